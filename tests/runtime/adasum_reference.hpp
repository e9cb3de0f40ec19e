// Adasum's serial reference (ringrun(3), RINGRUN_ADASUM): the same tree as the runtime's, every
// pair combined over whole tensors in double precision; inputs as doubles, stored in any dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "reference.hpp"

namespace ringrun::test {

using Tensor = std::vector<double>;

// Rank `rank`'s input of a case: normally distributed values, already rounded to dtype.
inline Tensor random_tensor(int rank, std::size_t count, ringrun_dtype dtype, unsigned seed) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<unsigned>(rank));
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor values(count);
  std::vector<char> one(8);
  for (auto& v : values) {
    store_value(one.data(), 0, dtype, normal(rng));
    v = 0;
    switch (dtype) {
      case RINGRUN_FLOAT32: v = *reinterpret_cast<const float*>(one.data()); break;
      case RINGRUN_FLOAT64: v = *reinterpret_cast<const double*>(one.data()); break;
      case RINGRUN_FLOAT16: v = core::half_to_float(*reinterpret_cast<const std::uint16_t*>(one.data())); break;
      case RINGRUN_BFLOAT16: v = core::bfloat16_to_float(*reinterpret_cast<const std::uint16_t*>(one.data())); break;
      default: break;
    }
  }
  return values;
}

inline std::vector<char> to_bytes(const Tensor& values, ringrun_dtype dtype) {
  std::vector<char> bytes(values.size() * core::dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) store_value(bytes.data(), i, dtype, values[i]);
  return bytes;
}

inline Tensor from_bytes(const std::vector<char>& bytes, ringrun_dtype dtype) {
  Tensor values(bytes.size() / core::dtype_size(dtype));
  const auto* sixteen = reinterpret_cast<const std::uint16_t*>(bytes.data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case RINGRUN_FLOAT32: values[i] = reinterpret_cast<const float*>(bytes.data())[i]; break;
      case RINGRUN_FLOAT64: values[i] = reinterpret_cast<const double*>(bytes.data())[i]; break;
      case RINGRUN_FLOAT16: values[i] = core::half_to_float(sixteen[i]); break;
      case RINGRUN_BFLOAT16: values[i] = core::bfloat16_to_float(sixteen[i]); break;
      default: break;
    }
  }
  return values;
}

// One pair, a standing for m ranks and b for k: (1 - m/(m+k) a.b / |a|^2) a + (1 - k/(m+k) a.b / |b|^2) b
// (Adasum's halves when m == k), a weight 1 where a squared norm is below sqrt(DBL_MIN).
inline Tensor adasum_pair(const Tensor& a, const Tensor& b, int m = 1, int k = 1) {
  double dot = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double smallest = std::sqrt(std::numeric_limits<double>::min());
  const double share_a = static_cast<double>(m) / (m + k), share_b = static_cast<double>(k) / (m + k);
  const double wa = aa >= smallest ? 1 - share_a * dot / aa : 1, wb = bb >= smallest ? 1 - share_b * dot / bb : 1;
  Tensor out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = wa * a[i] + wb * b[i];
  return out;
}

// The runtime's tree: with p = 2^k <= n < 2p, rank p + j into rank j first; then blocks of 2, 4, ..
// p ranks, each combining its lower half's result with its upper half's, weighted by the ranks
// each half stands for.
inline Tensor adasum_tree(std::vector<Tensor> inputs) {
  const int n = static_cast<int>(inputs.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  std::vector<int> behind(static_cast<std::size_t>(p), 1);
  for (int j = 0; j + p < n; ++j) {
    inputs[j] = adasum_pair(inputs[j], inputs[p + j]);
    behind[j] = 2;
  }
  for (int d = 1; d < p; d *= 2)
    for (int block = 0; block < p; block += 2 * d) {
      inputs[block] = adasum_pair(inputs[block], inputs[block + d], behind[block], behind[block + d]);
      behind[block] += behind[block + d];
    }
  return inputs[0];
}

// |got - expected| / |expected| (the absolute difference when expected is zero).
inline double relative_error(const Tensor& got, const Tensor& expected) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - expected[i]) * (got[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// What the runtime may lose against the double-precision reference: a rounding to dtype at each
// of the tree's levels, with room; float64 loses more to the sums' order than to its rounding.
inline double adasum_tolerance(ringrun_dtype dtype, int ranks) {
  int levels = 1;
  while ((1 << levels) < ranks) ++levels;
  const double eps = dtype == RINGRUN_FLOAT64 ? 1e-12 : dtype == RINGRUN_FLOAT32 ? 0x1p-23
                     : dtype == RINGRUN_FLOAT16 ? 0x1p-10 : 0x1p-7;
  return 4.0 * (levels + 1) * eps;
}

}  // namespace ringrun::test

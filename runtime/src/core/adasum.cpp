#include "core/adasum.hpp"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "core/adasum_simd.hpp"
#include "core/dtype.hpp"
#include "core/reduce_simd.hpp"
#include "ringrun/runtime.hpp"
#include "core/device_memory.hpp"

namespace ringrun::core {
namespace {

// Element i of a typed buffer as a double, and a double stored back into one.
template <typename T> struct Native {
  static double load(const T* p, std::size_t i) { return static_cast<double>(p[i]); }
  static void store(T* p, std::size_t i, double v) { p[i] = static_cast<T>(v); }
};
template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)> struct Sixteen {
  static double load(const std::uint16_t* p, std::size_t i) { return static_cast<double>(ToFloat(p[i])); }
  static void store(std::uint16_t* p, std::size_t i, double v) { p[i] = FromFloat(static_cast<float>(v)); }
};
using Half = Sixteen<half_to_float, float_to_half>;
using BFloat16 = Sixteen<bfloat16_to_float, float_to_bfloat16>;

// Eight independent partial sums per quantity, element i in lane i % 8 from `from` on (the vector
// kernels did the elements before), the tail in lane 0: one running sum cannot be vectorised
// without reordering it, and long pieces lose less precision this way.
template <typename Format, typename T>
AdasumSums sums_of(const T* a, const T* b, std::size_t n, std::size_t from, simd::AdasumLanes& l) {
  constexpr std::size_t kLanes = simd::kAdasumLanes;
  std::size_t i = from;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t lane = 0; lane < kLanes; ++lane) {
      const double x = Format::load(a, i + lane), y = Format::load(b, i + lane);
      l.dot[lane] += x * y;
      l.a_norm_sq[lane] += x * x;
      l.b_norm_sq[lane] += y * y;
    }
  }
  for (; i < n; ++i) {
    const double x = Format::load(a, i), y = Format::load(b, i);
    l.dot[0] += x * y;
    l.a_norm_sq[0] += x * x;
    l.b_norm_sq[0] += y * y;
  }
  const auto total = [](const double* v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  };
  return {total(l.dot), total(l.a_norm_sq), total(l.b_norm_sq)};
}

template <typename Format, typename T>
void combine_as(T* a, const T* b, std::size_t n, std::size_t from, AdasumWeights w) {
  for (std::size_t i = from; i < n; ++i) Format::store(a, i, w.a * Format::load(a, i) + w.b * Format::load(b, i));
}

AdasumSums sums_from(const void* a, const void* b, std::size_t count, ringrun_dtype dtype, std::size_t from,
                     simd::AdasumLanes& lanes) {
  switch (dtype) {
    case RINGRUN_FLOAT32:
      return sums_of<Native<float>>(static_cast<const float*>(a), static_cast<const float*>(b), count, from, lanes);
    case RINGRUN_FLOAT64:
      return sums_of<Native<double>>(static_cast<const double*>(a), static_cast<const double*>(b), count, from, lanes);
    case RINGRUN_FLOAT16:
      return sums_of<Half>(static_cast<const std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), count, from,
                           lanes);
    case RINGRUN_BFLOAT16:
      return sums_of<BFloat16>(static_cast<const std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), count, from,
                               lanes);
    default: break;
  }
  throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("adasum: dtype {} reached the kernels", dtype_name(dtype)));
}

void combine_from(void* a, const void* b, std::size_t count, ringrun_dtype dtype, std::size_t from, AdasumWeights w) {
  switch (dtype) {
    case RINGRUN_FLOAT32:
      return combine_as<Native<float>>(static_cast<float*>(a), static_cast<const float*>(b), count, from, w);
    case RINGRUN_FLOAT64:
      return combine_as<Native<double>>(static_cast<double*>(a), static_cast<const double*>(b), count, from, w);
    case RINGRUN_FLOAT16:
      return combine_as<Half>(static_cast<std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), count, from, w);
    case RINGRUN_BFLOAT16:
      return combine_as<BFloat16>(static_cast<std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), count, from, w);
    default: break;
  }
  throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("adasum: dtype {} reached the kernels", dtype_name(dtype)));
}

}  // namespace

bool adasum_dtype(ringrun_dtype dtype) {
  return dtype == RINGRUN_FLOAT16 || dtype == RINGRUN_BFLOAT16 || dtype == RINGRUN_FLOAT32 || dtype == RINGRUN_FLOAT64;
}

void check_adasum_arguments(const std::string& what, ringrun_dtype dtype, const void* send, const void* recv,
                            std::size_t count) {
  if (!adasum_dtype(dtype))
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}: Adasum combines floating-point tensors (float16, bfloat16, float32, float64), "
                                   "not {}; cast the tensor to one of those, or use SUM or AVERAGE",
                                   what, dtype_name(dtype)));
  if (count == 0 || !cuda_driver_loaded()) return;
  for (const void* buffer : {send, recv}) {
    const BufferLocation where = locate_buffer(buffer);
    if (where.device)
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                         fmt::format("{}: Adasum reduces host memory, but a buffer is on CUDA device {}; copy the "
                                     "tensor to the host first (ringrun.torch does this for CUDA tensors)",
                                     what, where.ordinal));
  }
}

AdasumSums adasum_sums(const void* a, const void* b, std::size_t count, ringrun_dtype dtype) {
  simd::AdasumLanes lanes;
  const std::size_t done = simd::available() ? simd::adasum_sums(a, b, count, dtype, lanes) : 0;
  return sums_from(a, b, count, dtype, done, lanes);
}

AdasumSums adasum_sums_scalar(const void* a, const void* b, std::size_t count, ringrun_dtype dtype) {
  simd::AdasumLanes lanes;
  return sums_from(a, b, count, dtype, 0, lanes);
}

AdasumWeights adasum_weights(const AdasumSums& whole, int ranks_a, int ranks_b) {
  // Below this a squared norm is a zero tensor or one whose quotient would overflow: its partner
  // is kept unscaled rather than turned into infinities.
  static const double kSmallest = std::sqrt(DBL_MIN);
  // Exactly 0.5 each for subtrees of equal size.
  const double share_a = static_cast<double>(ranks_a) / (ranks_a + ranks_b);
  const double share_b = static_cast<double>(ranks_b) / (ranks_a + ranks_b);
  AdasumWeights weights;
  if (whole.a_norm_sq >= kSmallest) weights.a = 1.0 - whole.dot / whole.a_norm_sq * share_a;
  if (whole.b_norm_sq >= kSmallest) weights.b = 1.0 - whole.dot / whole.b_norm_sq * share_b;
  return weights;
}

void adasum_combine(void* a, const void* b, std::size_t count, ringrun_dtype dtype, AdasumWeights weights) {
  const std::size_t done = simd::available() ? simd::adasum_combine(a, b, count, dtype, weights.a, weights.b) : 0;
  combine_from(a, b, count, dtype, done, weights);
}

void adasum_combine_scalar(void* a, const void* b, std::size_t count, ringrun_dtype dtype, AdasumWeights weights) {
  combine_from(a, b, count, dtype, 0, weights);
}

}  // namespace ringrun::core

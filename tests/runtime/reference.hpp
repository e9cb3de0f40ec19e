// Inputs and the serial reference for allreduce tests: small integers, so every reduction order
// gives the same exactly representable result and results compare bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

namespace ringrun::test {

inline const ringrun_dtype kDtypes[] = {RINGRUN_FLOAT32, RINGRUN_FLOAT64, RINGRUN_FLOAT16, RINGRUN_BFLOAT16,
                                 RINGRUN_INT32,   RINGRUN_INT64,   RINGRUN_UINT8};
inline const ringrun_op kOps[] = {RINGRUN_SUM, RINGRUN_AVERAGE, RINGRUN_MIN, RINGRUN_MAX, RINGRUN_PRODUCT};

// Rank r's element i: small integers; products stay within {-1, 1, 2} factors.
inline double input_value(int rank, std::size_t i, ringrun_op op) {
  if (op == RINGRUN_PRODUCT) {
    static const double factors[] = {1, 2, -1, 1, 2};
    return factors[(i * 3 + static_cast<std::size_t>(rank)) % 5];
  }
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 9) - 4);
}

inline void store_value(void* buf, std::size_t i, ringrun_dtype dtype, double v) {
  switch (dtype) {
    case RINGRUN_FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case RINGRUN_FLOAT64: static_cast<double*>(buf)[i] = v; break;
    case RINGRUN_FLOAT16: static_cast<std::uint16_t*>(buf)[i] = core::float_to_half(static_cast<float>(v)); break;
    case RINGRUN_BFLOAT16: static_cast<std::uint16_t*>(buf)[i] = core::float_to_bfloat16(static_cast<float>(v)); break;
    case RINGRUN_INT32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); break;
    case RINGRUN_INT64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); break;
    case RINGRUN_UINT8: static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(static_cast<int>(v) & 0xff); break;
    case RINGRUN_INT8: static_cast<std::int8_t*>(buf)[i] = static_cast<std::int8_t>(v); break;
    case RINGRUN_INT16: static_cast<std::int16_t*>(buf)[i] = static_cast<std::int16_t>(v); break;
    case RINGRUN_BOOL: static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(v != 0); break;
  }
}

inline std::vector<char> make_input(int rank, std::size_t count, ringrun_dtype dtype, ringrun_op op) {
  std::vector<char> buf(count * core::dtype_size(dtype) + 1);
  for (std::size_t i = 0; i < count; ++i) store_value(buf.data(), i, dtype, input_value(rank, i, op));
  return buf;
}

// The serial reference: combine rank 0..n-1 with the same kernels, then average.
inline std::vector<char> reference(int n, std::size_t count, ringrun_dtype dtype, ringrun_op op) {
  std::vector<char> result = make_input(0, count, dtype, op);
  for (int r = 1; r < n; ++r) {
    auto other = make_input(r, count, dtype, op);
    core::reduce(result.data(), result.data(), other.data(), count, dtype, op);
  }
  if (op == RINGRUN_AVERAGE) core::finish_average(result.data(), count, dtype, n);
  return result;
}

}  // namespace ringrun::test

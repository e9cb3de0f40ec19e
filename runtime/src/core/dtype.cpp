#include "core/dtype.hpp"

#include "core/reduce_simd.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "ringrun/runtime.hpp"

namespace ringrun::core {

bool valid_dtype(int dtype) { return dtype >= RINGRUN_FLOAT32 && dtype <= RINGRUN_BOOL; }
bool valid_op(int op) { return op >= RINGRUN_SUM && op <= RINGRUN_ADASUM; }

const char* dtype_name(ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return "float32";
    case RINGRUN_FLOAT64: return "float64";
    case RINGRUN_FLOAT16: return "float16";
    case RINGRUN_BFLOAT16: return "bfloat16";
    case RINGRUN_INT32: return "int32";
    case RINGRUN_INT64: return "int64";
    case RINGRUN_UINT8: return "uint8";
    case RINGRUN_INT8: return "int8";
    case RINGRUN_INT16: return "int16";
    case RINGRUN_BOOL: return "bool";
  }
  return "unknown-dtype";
}

const char* op_name(ringrun_op op) {
  switch (op) {
    case RINGRUN_SUM: return "sum";
    case RINGRUN_AVERAGE: return "average";
    case RINGRUN_MIN: return "min";
    case RINGRUN_MAX: return "max";
    case RINGRUN_PRODUCT: return "product";
    case RINGRUN_ADASUM: return "adasum";
  }
  return "unknown-op";
}

static std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float half_to_float(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / nan
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // Subnormal half: value = mantissa * 2^-24, exact in float.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_half(float value) {
  std::uint32_t f = float_bits(value);
  std::uint16_t sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  std::uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf or nan (keep nan quiet and non-zero)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: scale so that the integer part is the half mantissa, then
    // round to nearest even with the FPU (adding 0.5f magic number).
    float scaled = bits_float(abs) * 16777216.0f;  // * 2^24
    // nearbyint in the default rounding mode (to nearest even)
    float rounded = scaled + 8388608.0f - 8388608.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(rounded));
  }
  std::uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xfffu + mantissa_odd;  // round to nearest even at bit 13
  return static_cast<std::uint16_t>(sign | ((abs - 0x38000000u) >> 13));
}

float bfloat16_to_float(std::uint16_t bits) { return bits_float(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_bfloat16(float value) {
  std::uint32_t f = float_bits(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((f >> 16) | 0x40u);  // quiet nan
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<std::uint16_t>(f >> 16);
}

namespace {

struct Sum {
  template <typename T> static T apply(T a, T b) { return a + b; }
};
struct Min {
  template <typename T> static T apply(T a, T b) { return b < a ? b : a; }
};
struct Max {
  template <typename T> static T apply(T a, T b) { return a < b ? b : a; }
};
struct Product {
  template <typename T> static T apply(T a, T b) { return a * b; }
};

// Integer sums and products wrap: compute in the unsigned type (no signed-overflow UB).
template <typename T> struct Wrapping {
  using type = T;
};
template <> struct Wrapping<std::int32_t> {
  using type = std::uint32_t;
};
template <> struct Wrapping<std::int64_t> {
  using type = std::uint64_t;
};
template <> struct Wrapping<std::uint8_t> {
  using type = std::uint32_t;
};
template <> struct Wrapping<std::int8_t> {
  using type = std::uint32_t;
};
template <> struct Wrapping<std::int16_t> {
  using type = std::uint32_t;
};

// bool (one byte, 0 or 1): SUM and MAX are a logical or, MIN and PRODUCT a logical and; AVERAGE
// is the or too (the mean of truths is true where any is), as torch's and TensorFlow's casts read it.
template <typename Op> void combine_bool(std::uint8_t* dst, const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  if constexpr (std::is_same_v<Op, Sum> || std::is_same_v<Op, Max>) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>((a[i] | b[i]) != 0);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>(a[i] != 0 && b[i] != 0);
  }
}

template <typename T, typename Op>
void combine(T* dst, const T* a, const T* b, std::size_t n) {
  if constexpr (std::is_integral_v<T> && (std::is_same_v<Op, Sum> || std::is_same_v<Op, Product>)) {
    using W = typename Wrapping<T>::type;
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(Op::apply(static_cast<W>(a[i]), static_cast<W>(b[i])));
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
  }
}

// Of two NaNs, a's wins (x86's rule for the first operand, made explicit because a compiler may
// swap the operands of + and *): the vector kernels of reduce_simd.cpp give the same bits.
template <typename Op, float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void combine_16(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = ToFloat(a[i]);
    const float combined = Op::apply(x, ToFloat(b[i]));
    dst[i] = FromFloat(x != x ? x : combined);
  }
}

template <typename Op>
void dispatch(void* dst, const void* a, const void* b, std::size_t n, ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT32:
      return combine<float, Op>(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n);
    case RINGRUN_FLOAT64:
      return combine<double, Op>(static_cast<double*>(dst), static_cast<const double*>(a),
                                 static_cast<const double*>(b), n);
    case RINGRUN_INT32:
      return combine<std::int32_t, Op>(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(a),
                                       static_cast<const std::int32_t*>(b), n);
    case RINGRUN_INT64:
      return combine<std::int64_t, Op>(static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(a),
                                       static_cast<const std::int64_t*>(b), n);
    case RINGRUN_UINT8:
      return combine<std::uint8_t, Op>(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(a),
                                       static_cast<const std::uint8_t*>(b), n);
    case RINGRUN_INT8:
      return combine<std::int8_t, Op>(static_cast<std::int8_t*>(dst), static_cast<const std::int8_t*>(a),
                                      static_cast<const std::int8_t*>(b), n);
    case RINGRUN_INT16:
      return combine<std::int16_t, Op>(static_cast<std::int16_t*>(dst), static_cast<const std::int16_t*>(a),
                                       static_cast<const std::int16_t*>(b), n);
    case RINGRUN_BOOL:
      return combine_bool<Op>(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(a),
                              static_cast<const std::uint8_t*>(b), n);
    case RINGRUN_FLOAT16:
      return combine_16<Op, half_to_float, float_to_half>(
          static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), n);
    case RINGRUN_BFLOAT16:
      return combine_16<Op, bfloat16_to_float, float_to_bfloat16>(
          static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), n);
  }
}

template <typename T> void divide(T* buf, std::size_t n, int ranks) {
  if constexpr (std::is_floating_point_v<T>) {
    T inverse_free = static_cast<T>(ranks);  // divide, not multiply by 1/n: exact for exact quotients
    for (std::size_t i = 0; i < n; ++i) buf[i] = buf[i] / inverse_free;
  } else {
    for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<T>(buf[i] / static_cast<T>(ranks));
  }
}

}  // namespace

void reduce_scalar(void* dst, const void* a, const void* b, std::size_t count, ringrun_dtype dtype, ringrun_op op) {
  switch (op) {
    case RINGRUN_SUM:
    case RINGRUN_AVERAGE: return dispatch<Sum>(dst, a, b, count, dtype);
    case RINGRUN_MIN: return dispatch<Min>(dst, a, b, count, dtype);
    case RINGRUN_MAX: return dispatch<Max>(dst, a, b, count, dtype);
    case RINGRUN_PRODUCT: return dispatch<Product>(dst, a, b, count, dtype);
    case RINGRUN_ADASUM: break;
  }
  throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("reduce: {} is no elementwise op (core/adasum.cpp runs it)",
                                                       op_name(op)));
}

void finish_average_scalar(void* buf, std::size_t count, ringrun_dtype dtype, int ranks) {
  if (ranks == 1) return;
  switch (dtype) {
    case RINGRUN_FLOAT32: return divide(static_cast<float*>(buf), count, ranks);
    case RINGRUN_FLOAT64: return divide(static_cast<double*>(buf), count, ranks);
    case RINGRUN_INT32: return divide(static_cast<std::int32_t*>(buf), count, ranks);
    case RINGRUN_INT64: return divide(static_cast<std::int64_t*>(buf), count, ranks);
    case RINGRUN_UINT8: return divide(static_cast<std::uint8_t*>(buf), count, ranks);
    case RINGRUN_INT8: return divide(static_cast<std::int8_t*>(buf), count, ranks);
    case RINGRUN_INT16: return divide(static_cast<std::int16_t*>(buf), count, ranks);
    case RINGRUN_BOOL: return;  // the or of the sum stays
    case RINGRUN_FLOAT16: {
      auto* p = static_cast<std::uint16_t*>(buf);
      for (std::size_t i = 0; i < count; ++i) p[i] = float_to_half(half_to_float(p[i]) / static_cast<float>(ranks));
      return;
    }
    case RINGRUN_BFLOAT16: {
      auto* p = static_cast<std::uint16_t*>(buf);
      for (std::size_t i = 0; i < count; ++i)
        p[i] = float_to_bfloat16(bfloat16_to_float(p[i]) / static_cast<float>(ranks));
      return;
    }
  }
}

static bool is_16_bit_float(ringrun_dtype dtype) { return dtype == RINGRUN_FLOAT16 || dtype == RINGRUN_BFLOAT16; }

// float16 and bfloat16 through the vector kernels where the CPU has them (the same bits, several
// times faster); the scalar kernels do the other dtypes and the last few elements.
void reduce(void* dst, const void* a, const void* b, std::size_t count, ringrun_dtype dtype, ringrun_op op) {
  std::size_t done = 0;
  if (is_16_bit_float(dtype) && simd::available())
    done = simd::combine_16(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a),
                            static_cast<const std::uint16_t*>(b), count, dtype, op);
  if (done == count) return;
  const std::size_t skip = done * sizeof(std::uint16_t);  // done is 0 for the other dtypes
  reduce_scalar(static_cast<char*>(dst) + skip, static_cast<const char*>(a) + skip, static_cast<const char*>(b) + skip,
                count - done, dtype, op);
}

void finish_average(void* buf, std::size_t count, ringrun_dtype dtype, int ranks) {
  if (ranks == 1) return;
  std::size_t done = 0;
  if (is_16_bit_float(dtype) && simd::available())
    done = simd::divide_16(static_cast<std::uint16_t*>(buf), count, dtype, ranks);
  if (done == count) return;
  finish_average_scalar(static_cast<char*>(buf) + done * sizeof(std::uint16_t), count - done, dtype, ranks);
}

}  // namespace ringrun::core

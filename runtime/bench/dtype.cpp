#include "dtype.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ringrun::bench {
namespace {

struct DtypeEntry {
  ringrun_dtype dtype;
  std::string_view name;
  std::string_view alias;  // nccl-tests' spelling
  std::size_t bytes;
};
constexpr std::array<DtypeEntry, 10> kDtypes{{
    {RINGRUN_FLOAT32, "float32", "float", 4},
    {RINGRUN_FLOAT64, "float64", "double", 8},
    {RINGRUN_FLOAT16, "float16", "half", 2},
    {RINGRUN_BFLOAT16, "bfloat16", "bf16", 2},
    {RINGRUN_INT32, "int32", "int", 4},
    {RINGRUN_INT64, "int64", "int64_t", 8},
    {RINGRUN_UINT8, "uint8", "uint8_t", 1},
    {RINGRUN_INT8, "int8", "int8_t", 1},
    {RINGRUN_INT16, "int16", "int16_t", 2},
    {RINGRUN_BOOL, "bool", "bool", 1},
}};

struct OpEntry {
  ringrun_op op;
  std::string_view name;
  std::string_view alias;
};
constexpr std::array<OpEntry, 5> kOps{{
    {RINGRUN_SUM, "sum", "sum"},
    {RINGRUN_AVERAGE, "avg", "average"},
    {RINGRUN_MIN, "min", "min"},
    {RINGRUN_MAX, "max", "max"},
    {RINGRUN_PRODUCT, "prod", "product"},
}};

// IEEE binary16 <-> binary32, round to nearest even.
std::uint16_t float_to_half(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (magnitude < 0x38800000u) {  // subnormal half or zero
    if (magnitude < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;  // 14..24
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = ((magnitude - 0x38000000u) >> 13);
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = (half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    const float subnormal = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -subnormal : subnormal;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t float_to_bfloat16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bfloat16_to_float(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

template <typename T>
void store_as(void *buffer, std::size_t index, T value) {
  std::memcpy(static_cast<std::byte *>(buffer) + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
T load_as(const void *buffer, std::size_t index) {
  T value;
  std::memcpy(&value, static_cast<const std::byte *>(buffer) + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

std::optional<ringrun_dtype> parse_dtype(std::string_view name) {
  for (const auto &entry : kDtypes) {
    if (name == entry.name || name == entry.alias) return entry.dtype;
  }
  return std::nullopt;
}

std::optional<ringrun_op> parse_op(std::string_view name) {
  for (const auto &entry : kOps) {
    if (name == entry.name || name == entry.alias) return entry.op;
  }
  return std::nullopt;
}

std::string_view dtype_name(ringrun_dtype dtype) {
  for (const auto &entry : kDtypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "unknown";
}

std::string_view op_name(ringrun_op op) {
  for (const auto &entry : kOps) {
    if (entry.op == op) return entry.name;
  }
  return "unknown";
}

std::size_t dtype_bytes(ringrun_dtype dtype) {
  for (const auto &entry : kDtypes) {
    if (entry.dtype == dtype) return entry.bytes;
  }
  return 0;
}

bool dtype_is_integer(ringrun_dtype dtype) {
  return dtype == RINGRUN_INT32 || dtype == RINGRUN_INT64 || dtype == RINGRUN_UINT8 || dtype == RINGRUN_INT8 ||
         dtype == RINGRUN_INT16 || dtype == RINGRUN_BOOL;
}

void store_element(void *buffer, std::size_t index, ringrun_dtype dtype, double value) {
  switch (dtype) {
    case RINGRUN_FLOAT32: store_as(buffer, index, static_cast<float>(value)); break;
    case RINGRUN_FLOAT64: store_as(buffer, index, value); break;
    case RINGRUN_FLOAT16: store_as(buffer, index, float_to_half(static_cast<float>(value))); break;
    case RINGRUN_BFLOAT16:
      store_as(buffer, index, float_to_bfloat16(static_cast<float>(value)));
      break;
    // Integers wrap as the runtime's integer arithmetic does (conversion is modular in C++20).
    case RINGRUN_INT32:
      store_as(buffer, index, static_cast<std::int32_t>(static_cast<std::int64_t>(value)));
      break;
    case RINGRUN_INT64: store_as(buffer, index, static_cast<std::int64_t>(value)); break;
    case RINGRUN_UINT8:
      store_as(buffer, index, static_cast<std::uint8_t>(static_cast<std::int64_t>(value)));
      break;
    case RINGRUN_INT8: store_as(buffer, index, static_cast<std::int8_t>(static_cast<std::int64_t>(value))); break;
    case RINGRUN_INT16: store_as(buffer, index, static_cast<std::int16_t>(static_cast<std::int64_t>(value))); break;
    case RINGRUN_BOOL: store_as(buffer, index, static_cast<std::uint8_t>(value != 0.0)); break;
  }
}

double load_element(const void *buffer, std::size_t index, ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return load_as<float>(buffer, index);
    case RINGRUN_FLOAT64: return load_as<double>(buffer, index);
    case RINGRUN_FLOAT16: return half_to_float(load_as<std::uint16_t>(buffer, index));
    case RINGRUN_BFLOAT16: return bfloat16_to_float(load_as<std::uint16_t>(buffer, index));
    case RINGRUN_INT32: return load_as<std::int32_t>(buffer, index);
    case RINGRUN_INT64: return static_cast<double>(load_as<std::int64_t>(buffer, index));
    case RINGRUN_UINT8: return load_as<std::uint8_t>(buffer, index);
    case RINGRUN_INT8: return load_as<std::int8_t>(buffer, index);
    case RINGRUN_INT16: return load_as<std::int16_t>(buffer, index);
    case RINGRUN_BOOL: return load_as<std::uint8_t>(buffer, index);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double dtype_tolerance(ringrun_dtype dtype, int ranks) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return 0x1p-23 * ranks;
    case RINGRUN_FLOAT64: return 0x1p-52 * ranks;
    case RINGRUN_FLOAT16: return 0x1p-10 * ranks;
    case RINGRUN_BFLOAT16: return 0x1p-7 * ranks;
    default: return 0.0;
  }
}

}  // namespace ringrun::bench

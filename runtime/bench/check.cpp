#include "check.hpp"

#include "dtype.hpp"

#include <cmath>
#include <cstdint>

namespace ringrun::bench {
namespace {

// The reference value of one element of an allreduce, already rounded or wrapped to `dtype`.
double reference_allreduce(std::size_t index, ringrun_dtype dtype, ringrun_op op, int ranks) {
  double result = input_value(0, index, op);
  for (int rank = 1; rank < ranks; ++rank) {
    const double value = input_value(rank, index, op);
    switch (op) {
      case RINGRUN_SUM:
      case RINGRUN_AVERAGE: result += value; break;
      case RINGRUN_MIN: result = std::min(result, value); break;
      case RINGRUN_MAX: result = std::max(result, value); break;
      case RINGRUN_PRODUCT: result *= value; break;
      case RINGRUN_ADASUM: break;  // not offered by the bench (parse_op): no elementwise reference
    }
  }
  if (op == RINGRUN_AVERAGE) result /= ranks;
  if (dtype_is_integer(dtype) && op != RINGRUN_AVERAGE) {
    // Wrap the way the dtype does: store and load it again.
    unsigned char scratch[8];
    store_element(scratch, 0, dtype, result);
    return load_element(scratch, 0, dtype);
  }
  return result;
}

bool element_is_right(double got, double expected, ringrun_dtype dtype, ringrun_op op, int ranks) {
  if (dtype_is_integer(dtype)) {
    if (op == RINGRUN_AVERAGE) return std::abs(got - expected) < 1.0;
    return got == expected;
  }
  return std::abs(got - expected) <= dtype_tolerance(dtype, ranks) * std::max(1.0, std::abs(expected));
}

}  // namespace

double input_value(int rank, std::size_t index, ringrun_op op) {
  if (op == RINGRUN_PRODUCT) return static_cast<double>(1 + ((index + static_cast<std::size_t>(rank)) & 1u));
  return static_cast<double>((index * 7 + static_cast<std::size_t>(rank) * 3) % 11 + 1);
}

void fill_inputs(void *buffer, std::size_t count, ringrun_dtype dtype, int rank, ringrun_op op) {
  for (std::size_t i = 0; i < count; ++i) store_element(buffer, i, dtype, input_value(rank, i, op));
}

std::size_t count_wrong_allreduce(const void *result, std::size_t count, ringrun_dtype dtype,
                                  ringrun_op op, int ranks) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double expected = reference_allreduce(i, dtype, op, ranks);
    if (!element_is_right(load_element(result, i, dtype), expected, dtype, op, ranks)) ++wrong;
  }
  return wrong;
}

std::size_t count_wrong_broadcast(const void *result, std::size_t count, ringrun_dtype dtype, int root) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    unsigned char expected[8];
    store_element(expected, 0, dtype, input_value(root, i, RINGRUN_SUM));
    if (load_element(result, i, dtype) != load_element(expected, 0, dtype)) ++wrong;
  }
  return wrong;
}

std::size_t count_wrong_allgather(const void *result, std::size_t count, ringrun_dtype dtype, int ranks) {
  std::size_t wrong = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    for (std::size_t i = 0; i < count; ++i) {
      unsigned char expected[8];
      store_element(expected, 0, dtype, input_value(rank, i, RINGRUN_SUM));
      const std::size_t at = static_cast<std::size_t>(rank) * count + i;
      if (load_element(result, at, dtype) != load_element(expected, 0, dtype)) ++wrong;
    }
  }
  return wrong;
}

}  // namespace ringrun::bench

// Element types and reduction kernels of the C API. fp16 and bf16 are combined in fp32 and
// rounded back (round to nearest even) after every combination.
//
// AVERAGE = SUM followed by one division by the number of ranks. On integer types the division is
// C++ integer division (truncates toward zero); integer sums wrap (two's complement), like MPI.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringrun/ringrun.h"

namespace ringrun::core {

bool valid_dtype(int dtype);
bool valid_op(int op);
// The ops reduce() and finish_average() take: all but RINGRUN_ADASUM, which combines whole tensors
// (core/adasum.hpp) and never reaches the elementwise kernels.
constexpr bool elementwise_op(ringrun_op op) { return op != RINGRUN_ADASUM; }
// Bytes per element; 0 for an unknown dtype. Inline: the engine asks once per tensor.
constexpr std::size_t dtype_size(ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return 4;
    case RINGRUN_FLOAT64: return 8;
    case RINGRUN_FLOAT16: return 2;
    case RINGRUN_BFLOAT16: return 2;
    case RINGRUN_INT32: return 4;
    case RINGRUN_INT64: return 8;
    case RINGRUN_UINT8: return 1;
    case RINGRUN_INT8: return 1;
    case RINGRUN_INT16: return 2;
    case RINGRUN_BOOL: return 1;
  }
  return 0;
}
const char* dtype_name(ringrun_dtype dtype);
const char* op_name(ringrun_op op);

float half_to_float(std::uint16_t bits);
std::uint16_t float_to_half(float value);
float bfloat16_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16(float value);

// dst[i] = a[i] (op) b[i] for count elements. dst may be the same buffer as a or b; AVERAGE
// combines like SUM (see finish_average). op must be elementwise_op (ADASUM throws
// RINGRUN_ERR_INTERNAL).
void reduce(void* dst, const void* a, const void* b, std::size_t count, ringrun_dtype dtype, ringrun_op op);

// buf[i] /= ranks, the last step of AVERAGE.
void finish_average(void* buf, std::size_t count, ringrun_dtype dtype, int ranks);

// The same, element by element: what reduce() and finish_average() run where the CPU lacks
// AVX2/F16C (see reduce_simd.hpp), and the reference their vector kernels are tested against.
void reduce_scalar(void* dst, const void* a, const void* b, std::size_t count, ringrun_dtype dtype, ringrun_op op);
void finish_average_scalar(void* buf, std::size_t count, ringrun_dtype dtype, int ranks);

}  // namespace ringrun::core

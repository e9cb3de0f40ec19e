// Vector kernels for float16 and bfloat16 reductions: AVX2 + F16C on x86-64, chosen at run time
// so that the binary needs no -march flag and still runs on a CPU without them. They give the same
// bits as the scalar kernels of dtype.cpp for every input (NaN, infinities, subnormals, ties):
// convert to float32 exactly, apply the same float32 operation, round back to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringrun/ringrun.h"

namespace ringrun::core::simd {

// Whether this CPU runs the kernels below (x86-64 with AVX2 and F16C); checked once.
bool available();

// dst[i] = a[i] (op) b[i] for the leading multiple of 16 of n float16 or bfloat16 elements; returns
// how many it did (the caller does the rest). AVERAGE combines like SUM. Call only if available().
std::size_t combine_16(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t n,
                       ringrun_dtype dtype, ringrun_op op);

// buf[i] /= ranks for the leading multiple of 16 of n float16 or bfloat16 elements; returns how many.
std::size_t divide_16(std::uint16_t* buf, std::size_t n, ringrun_dtype dtype, int ranks);

}  // namespace ringrun::core::simd

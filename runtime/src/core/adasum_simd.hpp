// Vector versions of Adasum's kernels (core/adasum.hpp) for float32, float64 and float16: AVX2 +
// F16C on x86-64, chosen at run time (simd::available(), as the reduction kernels). They give the
// same bits as the scalar kernels: the same eight partial sums per quantity (element i in lane
// i % 8), the same operations in the same order, no fused multiply-add, conversions that are exact
// or round to nearest even as the scalar ones do. bfloat16 stays scalar.
#pragma once

#include <cstddef>

#include "ringrun/ringrun.h"

namespace ringrun::core::simd {

inline constexpr std::size_t kAdasumLanes = 8;

// The partial sums of adasum_sums, lane by lane.
struct AdasumLanes {
  double dot[kAdasumLanes] = {}, a_norm_sq[kAdasumLanes] = {}, b_norm_sq[kAdasumLanes] = {};
};

// Adds the leading multiple of 8 of n elements of a and b into lanes; returns how many it did
// (0 for a dtype it does not do). Call only if available().
std::size_t adasum_sums(const void* a, const void* b, std::size_t n, ringrun_dtype dtype, AdasumLanes& lanes);

// a[i] = wa * a[i] + wb * b[i] for the leading multiple of 8 of n elements; returns how many.
std::size_t adasum_combine(void* a, const void* b, std::size_t n, ringrun_dtype dtype, double wa, double wb);

}  // namespace ringrun::core::simd

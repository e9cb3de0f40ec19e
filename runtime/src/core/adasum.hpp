// Adasum's arithmetic (RINGRUN_ADASUM, ringrun(3)): the two partial results a and b of a pair of
// subtrees become (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, where the dot product and the
// squared norms are those of the whole tensors. The exchanges that bring the pieces together are
// the TCP transport's (transport/tcp/tcp_adasum.hpp); here, what one rank computes on its piece.
//
// Sums are taken in double precision whatever the dtype, and the combination is rounded to the
// dtype once; float16 and bfloat16 convert through float32 on the way (exact in, to nearest even
// out). Vector kernels (core/adasum_simd.hpp) do the same where the CPU has AVX2 and F16C.
#pragma once

#include <cstddef>
#include <string>

#include "ringrun/ringrun.h"

namespace ringrun::core {

// float16, bfloat16, float32, float64: the dtypes Adasum combines.
bool adasum_dtype(ringrun_dtype dtype);

// Throws RuntimeError RINGRUN_ERR_INVALID_ARGUMENT, "<what>: ..." naming the input and the fix,
// unless Adasum can reduce count elements of dtype from send into recv: a floating-point dtype,
// host memory. The same on every rank that passes the same dtype and memory kind.
void check_adasum_arguments(const std::string& what, ringrun_dtype dtype, const void* send, const void* recv,
                            std::size_t count);

// The dot product a.b and the squared norms |a|^2, |b|^2: over one piece, then summed over the
// ranks that hold the others.
struct AdasumSums {
  double dot = 0, a_norm_sq = 0, b_norm_sq = 0;
};
AdasumSums adasum_sums(const void* a, const void* b, std::size_t count, ringrun_dtype dtype);

// The weights of a and b from the sums over the whole tensors: 1 - a.b / (2 |x|^2) for x = a, b,
// or 1 when |x|^2 is below sqrt(DBL_MIN) (a zero tensor, or one too small to divide by: the
// other is then kept as it is). When a stands for the tensors of ranks_a ranks and b for ranks_b
// (an unbalanced tree, ringrun(3)), the halves become ranks_a / (ranks_a + ranks_b) and
// ranks_b / (ranks_a + ranks_b): tensors that are multiples of one another then still give
// their mean over all ranks, orthogonal ones still their sum, equal ones themselves.
struct AdasumWeights {
  double a = 1, b = 1;
};
AdasumWeights adasum_weights(const AdasumSums& whole, int ranks_a = 1, int ranks_b = 1);

// a[i] = weights.a * a[i] + weights.b * b[i] for count elements, in double, rounded once.
void adasum_combine(void* a, const void* b, std::size_t count, ringrun_dtype dtype, AdasumWeights weights);

// The same two, element by element: what runs where the CPU lacks AVX2/F16C (core/adasum_simd.hpp),
// and the reference the vector kernels are tested against, bit for bit.
AdasumSums adasum_sums_scalar(const void* a, const void* b, std::size_t count, ringrun_dtype dtype);
void adasum_combine_scalar(void* a, const void* b, std::size_t count, ringrun_dtype dtype, AdasumWeights weights);

}  // namespace ringrun::core

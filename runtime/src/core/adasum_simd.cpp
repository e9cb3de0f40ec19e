#include "core/adasum_simd.hpp"

#include <cstdint>

#include "core/reduce_simd.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ringrun::core::simd {

#if defined(__x86_64__)

// Per function, not -march, as in reduce_simd.cpp; and no "fma": a fused multiply-add would round
// once where the scalar kernels round twice.
#define RINGRUN_AVX2_F16C __attribute__((target("avx2,f16c")))

namespace {

// Eight elements as doubles: lanes 0-3 and 4-7.
struct Eight {
  __m256d low, high;
};

RINGRUN_AVX2_F16C inline Eight widen(__m256 v) {
  return {_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
}
// Rounds to nearest even (MXCSR's default), as static_cast<float>(double).
RINGRUN_AVX2_F16C inline __m256 narrow(Eight v) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(v.low)), _mm256_cvtpd_ps(v.high), 1);
}

struct Float32 {
  using T = float;
  RINGRUN_AVX2_F16C static Eight load(const float* p) { return widen(_mm256_loadu_ps(p)); }
  RINGRUN_AVX2_F16C static void store(float* p, Eight v) { _mm256_storeu_ps(p, narrow(v)); }
};
struct Float64 {
  using T = double;
  RINGRUN_AVX2_F16C static Eight load(const double* p) { return {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
  RINGRUN_AVX2_F16C static void store(double* p, Eight v) {
    _mm256_storeu_pd(p, v.low);
    _mm256_storeu_pd(p + 4, v.high);
  }
};
// Through float32, as the scalar kernel: exact on the way in, to nearest even on the way out.
struct Float16 {
  using T = std::uint16_t;
  RINGRUN_AVX2_F16C static Eight load(const std::uint16_t* p) {
    return widen(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  RINGRUN_AVX2_F16C static void store(std::uint16_t* p, Eight v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(narrow(v), _MM_FROUND_TO_NEAREST_INT));
  }
};

// acc + x * y, rounded twice as the scalar `acc += x * y`.
RINGRUN_AVX2_F16C inline __m256d add_product(__m256d acc, __m256d x, __m256d y) {
  return _mm256_add_pd(acc, _mm256_mul_pd(x, y));
}

template <typename Format>
RINGRUN_AVX2_F16C std::size_t sums(const typename Format::T* a, const typename Format::T* b, std::size_t n,
                                   AdasumLanes& lanes) {
  __m256d dot_low = _mm256_loadu_pd(lanes.dot), dot_high = _mm256_loadu_pd(lanes.dot + 4);
  __m256d aa_low = _mm256_loadu_pd(lanes.a_norm_sq), aa_high = _mm256_loadu_pd(lanes.a_norm_sq + 4);
  __m256d bb_low = _mm256_loadu_pd(lanes.b_norm_sq), bb_high = _mm256_loadu_pd(lanes.b_norm_sq + 4);
  const std::size_t vector_n = n & ~(kAdasumLanes - 1);
  for (std::size_t i = 0; i < vector_n; i += kAdasumLanes) {
    const Eight x = Format::load(a + i), y = Format::load(b + i);
    dot_low = add_product(dot_low, x.low, y.low);
    dot_high = add_product(dot_high, x.high, y.high);
    aa_low = add_product(aa_low, x.low, x.low);
    aa_high = add_product(aa_high, x.high, x.high);
    bb_low = add_product(bb_low, y.low, y.low);
    bb_high = add_product(bb_high, y.high, y.high);
  }
  _mm256_storeu_pd(lanes.dot, dot_low);
  _mm256_storeu_pd(lanes.dot + 4, dot_high);
  _mm256_storeu_pd(lanes.a_norm_sq, aa_low);
  _mm256_storeu_pd(lanes.a_norm_sq + 4, aa_high);
  _mm256_storeu_pd(lanes.b_norm_sq, bb_low);
  _mm256_storeu_pd(lanes.b_norm_sq + 4, bb_high);
  return vector_n;
}

template <typename Format>
RINGRUN_AVX2_F16C std::size_t combine(typename Format::T* a, const typename Format::T* b, std::size_t n, double wa,
                                      double wb) {
  const __m256d weight_a = _mm256_set1_pd(wa), weight_b = _mm256_set1_pd(wb);
  const std::size_t vector_n = n & ~(kAdasumLanes - 1);
  for (std::size_t i = 0; i < vector_n; i += kAdasumLanes) {
    const Eight x = Format::load(a + i), y = Format::load(b + i);
    Format::store(a + i, {_mm256_add_pd(_mm256_mul_pd(weight_a, x.low), _mm256_mul_pd(weight_b, y.low)),
                          _mm256_add_pd(_mm256_mul_pd(weight_a, x.high), _mm256_mul_pd(weight_b, y.high))});
  }
  return vector_n;
}

}  // namespace

std::size_t adasum_sums(const void* a, const void* b, std::size_t n, ringrun_dtype dtype, AdasumLanes& lanes) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return sums<Float32>(static_cast<const float*>(a), static_cast<const float*>(b), n, lanes);
    case RINGRUN_FLOAT64: return sums<Float64>(static_cast<const double*>(a), static_cast<const double*>(b), n, lanes);
    case RINGRUN_FLOAT16:
      return sums<Float16>(static_cast<const std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), n, lanes);
    default: return 0;
  }
}

std::size_t adasum_combine(void* a, const void* b, std::size_t n, ringrun_dtype dtype, double wa, double wb) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return combine<Float32>(static_cast<float*>(a), static_cast<const float*>(b), n, wa, wb);
    case RINGRUN_FLOAT64: return combine<Float64>(static_cast<double*>(a), static_cast<const double*>(b), n, wa, wb);
    case RINGRUN_FLOAT16:
      return combine<Float16>(static_cast<std::uint16_t*>(a), static_cast<const std::uint16_t*>(b), n, wa, wb);
    default: return 0;
  }
}

#else  // no vector kernels here: the scalar ones do everything

std::size_t adasum_sums(const void*, const void*, std::size_t, ringrun_dtype, AdasumLanes&) { return 0; }
std::size_t adasum_combine(void*, const void*, std::size_t, ringrun_dtype, double, double) { return 0; }

#endif

}  // namespace ringrun::core::simd

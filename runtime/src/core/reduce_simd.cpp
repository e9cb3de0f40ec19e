#include "core/reduce_simd.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ringrun::core::simd {

#if defined(__x86_64__)

// Per function, not -march: only these kernels need the instructions, and available() guards them.
#define RINGRUN_AVX2_F16C __attribute__((target("avx2,f16c")))

bool available() {
  static const bool supported = [] {
    __builtin_cpu_init();  // may run before other static constructors
    // AVX2 as the compiler sees it (it checks that the OS saves the ymm registers too); F16C from
    // cpuid, since clang's __builtin_cpu_supports does not know "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return supported;
}

namespace {

// Sixteen elements of a 16-bit format to and from two float32 vectors, exactly as half_to_float /
// float_to_half and bfloat16_to_float / float_to_bfloat16 do one element. Which element goes to
// which vector is the format's business: the ops work element by element.
struct Half {
  RINGRUN_AVX2_F16C static void load(const std::uint16_t* p, __m256& low, __m256& high) {
    low = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    high = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
  // The immediate rounds to nearest even whatever MXCSR says; NaN stays NaN with its sign and top
  // payload bits and the quiet bit set, as float_to_half.
  RINGRUN_AVX2_F16C static void store(std::uint16_t* p, __m256 low, __m256 high) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT));
  }
};

struct BFloat16 {
  // Interleaving with zeros puts each element in the top half of a float32; per 128-bit lane, so
  // low holds elements 0-3 and 8-11, high 4-7 and 12-15, and packus in store undoes it.
  RINGRUN_AVX2_F16C static void load(const std::uint16_t* p, __m256& low, __m256& high) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    low = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), bits));
    high = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), bits));
  }
  RINGRUN_AVX2_F16C static void store(std::uint16_t* p, __m256 low, __m256 high) {
    const __m256i packed = _mm256_packus_epi32(rounded_top(low), rounded_top(high));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  }
  // The top 16 bits, rounded to nearest even by adding 0x7fff plus the kept part's lowest bit; a
  // NaN keeps its top bits with the quiet bit set instead (rounding could carry it to infinity).
  RINGRUN_AVX2_F16C static __m256i rounded_top(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i kept_lowest = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(kept_lowest, _mm256_set1_epi32(0x7fff)));
    const __m256i quieted = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quieted, nan), 16);
  }
};

// vaddps and vmulps with their operands pinned: of two NaNs x86 returns the first source's, a's
// here, as combine_16 in dtype.cpp; through an intrinsic the compiler may swap them (they commute),
// and selecting a's NaN afterwards costs a fifth of the kernel's speed.
RINGRUN_AVX2_F16C inline __m256 add_a_first(__m256 a, __m256 b) {
  __m256 sum;
  asm("vaddps %2, %1, %0" : "=x"(sum) : "x"(a), "x"(b));
  return sum;
}
RINGRUN_AVX2_F16C inline __m256 multiply_a_first(__m256 a, __m256 b) {
  __m256 product;
  asm("vmulps %2, %1, %0" : "=x"(product) : "x"(a), "x"(b));
  return product;
}

// The scalar Sum/Min/Max/Product of dtype.cpp.
struct VectorSum {
  RINGRUN_AVX2_F16C static __m256 apply(__m256 a, __m256 b) { return add_a_first(a, b); }
};
// Min and max return a when either is a NaN, in both kernels: minps(x, y) is x < y ? x : y.
struct VectorMin {  // b < a ? b : a
  RINGRUN_AVX2_F16C static __m256 apply(__m256 a, __m256 b) { return _mm256_min_ps(b, a); }
};
struct VectorMax {  // a < b ? b : a; maxps(x, y) is x > y ? x : y, so b > a ? b : a
  RINGRUN_AVX2_F16C static __m256 apply(__m256 a, __m256 b) { return _mm256_max_ps(b, a); }
};
struct VectorProduct {
  RINGRUN_AVX2_F16C static __m256 apply(__m256 a, __m256 b) { return multiply_a_first(a, b); }
};

template <typename Format, typename Op>
RINGRUN_AVX2_F16C std::size_t combine(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b,
                                      std::size_t n) {
  const std::size_t vector_n = n & ~std::size_t{15};
  for (std::size_t i = 0; i < vector_n; i += 16) {
    __m256 a_low, a_high, b_low, b_high;
    Format::load(a + i, a_low, a_high);
    Format::load(b + i, b_low, b_high);
    Format::store(dst + i, Op::apply(a_low, b_low), Op::apply(a_high, b_high));
  }
  return vector_n;
}

template <typename Format>
RINGRUN_AVX2_F16C std::size_t combine_format(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b,
                                             std::size_t n, ringrun_op op) {
  switch (op) {
    case RINGRUN_SUM:
    case RINGRUN_AVERAGE: return combine<Format, VectorSum>(dst, a, b, n);
    case RINGRUN_MIN: return combine<Format, VectorMin>(dst, a, b, n);
    case RINGRUN_MAX: return combine<Format, VectorMax>(dst, a, b, n);
    case RINGRUN_PRODUCT: return combine<Format, VectorProduct>(dst, a, b, n);
    case RINGRUN_ADASUM: break;  // not elementwise: the scalar kernel refuses it
  }
  return 0;
}

// Divides, not multiplies by 1/ranks: the scalar kernel does, and exact quotients stay exact.
template <typename Format>
RINGRUN_AVX2_F16C std::size_t divide(std::uint16_t* buf, std::size_t n, int ranks) {
  const __m256 divisor = _mm256_set1_ps(static_cast<float>(ranks));
  const std::size_t vector_n = n & ~std::size_t{15};
  for (std::size_t i = 0; i < vector_n; i += 16) {
    __m256 low, high;
    Format::load(buf + i, low, high);
    Format::store(buf + i, _mm256_div_ps(low, divisor), _mm256_div_ps(high, divisor));
  }
  return vector_n;
}

}  // namespace

std::size_t combine_16(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t n,
                       ringrun_dtype dtype, ringrun_op op) {
  if (dtype == RINGRUN_FLOAT16) return combine_format<Half>(dst, a, b, n, op);
  if (dtype == RINGRUN_BFLOAT16) return combine_format<BFloat16>(dst, a, b, n, op);
  return 0;
}

std::size_t divide_16(std::uint16_t* buf, std::size_t n, ringrun_dtype dtype, int ranks) {
  if (dtype == RINGRUN_FLOAT16) return divide<Half>(buf, n, ranks);
  if (dtype == RINGRUN_BFLOAT16) return divide<BFloat16>(buf, n, ranks);
  return 0;
}

#else  // no vector kernels here: the scalar ones do everything

bool available() { return false; }
std::size_t combine_16(std::uint16_t*, const std::uint16_t*, const std::uint16_t*, std::size_t, ringrun_dtype,
                       ringrun_op) {
  return 0;
}
std::size_t divide_16(std::uint16_t*, std::size_t, ringrun_dtype, int) { return 0; }

#endif

}  // namespace ringrun::core::simd

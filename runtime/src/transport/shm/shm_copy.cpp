// The copy and reduce kernels of the shared-memory transport's streamed paths.
#include "transport/shm/shm_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace ringrun::core {

// memcpy, or (stream) the same with non-temporal stores: for large outputs that only the caller
// reads later, skipping the cache saves the read-for-ownership of every destination line and keeps
// the ring chunks in cache. SSE2 is the x86-64 baseline; elsewhere it is plain memcpy.
void copy_out(char* dst, const char* src, std::size_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && n >= 256) {
    std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    const std::size_t body = n & ~std::size_t{63};
    for (std::size_t i = 0; i < body; i += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + body, src + body, n - body);
    return;
  }
#else
  (void)stream;
#endif
  std::memcpy(dst, src, n);
}

// The last reduction step of a shard, for float32 sums and averages (what gradients are):
// ring = a + b (divided by the ranks for an average) and the same values to out, in one pass.
// Reducing into the ring chunk, dividing there and then copying it out reads the result back twice
// more; on the large messages that matter here those passes cost a third of the reduction. The
// division is core::finish_average's (IEEE, by the same float), or for a power-of-two number of
// ranks the multiplication by its exact reciprocal: the bits are the same either way.
// out gets non-temporal stores when stream (see copy_out).
enum class Scale { none, divide, multiply };

template <Scale S>
static void sum_f32_to_both_impl(float* ring, char* out, const float* a, const float* b, std::size_t n, bool stream,
                                 float factor) {
  auto value = [&](std::size_t i) {
    const float v = a[i] + b[i];
    return S == Scale::divide ? v / factor : S == Scale::multiply ? v * factor : v;
  };
  std::size_t i = 0;
#if defined(__SSE2__)
  // Scalar until out is 16-byte aligned (the non-temporal store needs it; elements are 4-byte).
  while (i < n && (reinterpret_cast<std::uintptr_t>(out + i * 4) & 15) != 0) {
    const float v = value(i);
    ring[i] = v;
    std::memcpy(out + i * 4, &v, 4);
    ++i;
  }
  if ((reinterpret_cast<std::uintptr_t>(out + i * 4) & 15) == 0) {
    const __m128 f = _mm_set1_ps(factor);
    auto sum = [&](std::size_t at) {
      const __m128 v = _mm_add_ps(_mm_loadu_ps(a + at), _mm_loadu_ps(b + at));
      return S == Scale::divide ? _mm_div_ps(v, f) : S == Scale::multiply ? _mm_mul_ps(v, f) : v;
    };
    for (; i + 16 <= n; i += 16) {
      __m128 v0 = sum(i), v1 = sum(i + 4), v2 = sum(i + 8), v3 = sum(i + 12);
      _mm_storeu_ps(ring + i, v0);
      _mm_storeu_ps(ring + i + 4, v1);
      _mm_storeu_ps(ring + i + 8, v2);
      _mm_storeu_ps(ring + i + 12, v3);
      auto* o = reinterpret_cast<float*>(out + i * 4);
      if (stream) {
        _mm_stream_ps(o, v0);
        _mm_stream_ps(o + 4, v1);
        _mm_stream_ps(o + 8, v2);
        _mm_stream_ps(o + 12, v3);
      } else {
        _mm_store_ps(o, v0);
        _mm_store_ps(o + 4, v1);
        _mm_store_ps(o + 8, v2);
        _mm_store_ps(o + 12, v3);
      }
    }
  }
#else
  (void)stream;
#endif
  for (; i < n; ++i) {
    const float v = value(i);
    ring[i] = v;
    std::memcpy(out + i * 4, &v, 4);
  }
}

void sum_f32_to_both(float* ring, char* out, const float* a, const float* b, std::size_t n, bool stream, int average_of) {
  if (average_of <= 1) return sum_f32_to_both_impl<Scale::none>(ring, out, a, b, n, stream, 1.0f);
  // Dividing by a power of two and multiplying by its exact reciprocal round the same exact value:
  // the same bits, at a fraction of a division's cost (2 ranks: every average of two).
  if ((average_of & (average_of - 1)) == 0)
    return sum_f32_to_both_impl<Scale::multiply>(ring, out, a, b, n, stream, 1.0f / static_cast<float>(average_of));
  sum_f32_to_both_impl<Scale::divide>(ring, out, a, b, n, stream, static_cast<float>(average_of));
}

// Orders non-temporal stores before whatever the caller does after the collective returns.
void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace ringrun::core

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

// The last reduction step of a shard, for float32 sums (what gradients are): ring = a + b and the
// same values to out, in one pass. Reducing into the ring chunk and then copying it out reads the
// result back once more; on the large messages that matter here that extra pass is about a tenth
// of the work. out gets non-temporal stores when stream (see copy_out).
void sum_f32_to_both(float* ring, char* out, const float* a, const float* b, std::size_t n, bool stream) {
  std::size_t i = 0;
#if defined(__SSE2__)
  // Scalar until out is 16-byte aligned (the non-temporal store needs it; elements are 4-byte).
  while (i < n && (reinterpret_cast<std::uintptr_t>(out + i * 4) & 15) != 0) {
    const float v = a[i] + b[i];
    ring[i] = v;
    std::memcpy(out + i * 4, &v, 4);
    ++i;
  }
  if ((reinterpret_cast<std::uintptr_t>(out + i * 4) & 15) == 0) {
    for (; i + 16 <= n; i += 16) {
      __m128 v0 = _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
      __m128 v1 = _mm_add_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(b + i + 4));
      __m128 v2 = _mm_add_ps(_mm_loadu_ps(a + i + 8), _mm_loadu_ps(b + i + 8));
      __m128 v3 = _mm_add_ps(_mm_loadu_ps(a + i + 12), _mm_loadu_ps(b + i + 12));
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
    const float v = a[i] + b[i];
    ring[i] = v;
    std::memcpy(out + i * 4, &v, 4);
  }
}

// Orders non-temporal stores before whatever the caller does after the collective returns.
void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace ringrun::core

// The copy and reduce kernels of the shared-memory transport's streamed paths (shm_copy.cpp).
#pragma once

#include <cstddef>

namespace ringrun::core {

// memcpy, or (stream) the same with non-temporal stores past the caches.
void copy_out(char* dst, const char* src, std::size_t n, bool stream);
// ring = a + b (then / average_of when it is above 1: an average's last step) and the same values
// to out, in one pass (float32); out streamed when stream.
void sum_f32_to_both(float* ring, char* out, const float* a, const float* b, std::size_t n, bool stream,
                     int average_of = 0);
// Orders non-temporal stores before whatever the caller does after the collective returns.
void stream_fence();

}  // namespace ringrun::core

// RINGRUN_TEST_TSAN: defined when this test is built with ThreadSanitizer (gcc or clang), for
// tests that count the sanitizer's own thread or trim work it makes 5-15x slower.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define RINGRUN_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RINGRUN_TEST_TSAN 1
#endif
#endif

// The cache-line hints of the shared-memory transport (shm_transport.cpp) and the CPU feature
// that shapes its small path: each a no-op where the CPU or architecture lacks it.
#pragma once

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define RINGRUN_CPU_RELAX() _mm_pause()
#else
#define RINGRUN_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace ringrun::core::shm {
// Pushes a line this core just wrote out to the shared cache, where the peer that waits for it
// reads it sooner than from this core's own caches (CLDEMOTE: a hint, a no-op on older CPUs).
inline void demote(const void* line) {
#if defined(__x86_64__)
  asm volatile(".byte 0x0f, 0x1c, 0x07" ::"D"(line) : "memory");  // cldemote (%rdi)
#else
  (void)line;
#endif
}

// Whether this CPU has CLDEMOTE (CPUID leaf 7, ECX bit 25): the small path is shaped around it.
inline bool cpu_demotes_lines() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 25)) != 0;
#else
  return false;
#endif
}

// Takes a line back for writing (PREFETCHW: a hint, a no-op where absent).
inline void own_line(const void* line) {
#if defined(__x86_64__)
  asm volatile("prefetchw (%0)" ::"r"(line));
#else
  (void)line;
#endif
}
}  // namespace ringrun::core::shm


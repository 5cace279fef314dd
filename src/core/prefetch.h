// Cache-line prefetch for writing, for stores that would otherwise each wait for their line, and
// for reading, for data the hardware prefetchers do not see coming.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tachyon {

// Brings the line holding `address` into this core's cache owned (PREFETCHW on x86: a CPU that
// lacks it runs it as a no-op), so that a later store to it does not stall on the line. Never
// faults.
inline void prefetch_for_write(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("prefetchw %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address, 1);
#endif
}

// prefetch_for_write for every 64-byte line overlapping [begin, begin + bytes).
inline void prefetch_range_for_write(const void* begin, size_t bytes) {
  constexpr uintptr_t kLineBytes = 64;
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~(kLineBytes - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(begin) + bytes;
  for (uintptr_t line = first; line < end; line += kLineBytes) {
    prefetch_for_write(reinterpret_cast<const void*>(line));
  }
}

// Brings every 64-byte line overlapping [begin, begin + bytes) towards this core's caches for
// reading. Never faults.
inline void prefetch_range_for_read(const void* begin, size_t bytes) {
  constexpr uintptr_t kLineBytes = 64;
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~(kLineBytes - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(begin) + bytes;
  for (uintptr_t line = first; line < end; line += kLineBytes) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  }
}

}  // namespace tachyon

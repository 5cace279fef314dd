// std::allocator with cache-line alignment, for activation buffers the SIMD kernels stream: a
// 64-byte vector load from a 16-byte aligned buffer (what malloc gives) spans two cache lines,
// and the f32 prompt products ran at ~2/3 speed from such buffers (576-wide rows, 512 tokens,
// 1 thread: 100 against 151 GFLOP/s with both operands aligned).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tachyon {

template <class T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}

  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }

  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};

// A vector whose data() is 64-byte aligned.
template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace tachyon

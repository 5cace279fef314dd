#include "core/huge_page_arena.h"

#include <algorithm>
#include <cstdlib>

#include <sys/mman.h>

#include "core/check.h"

namespace tachyon {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMinChunk = size_t{32} << 20;  // small matrices share chunks
constexpr size_t kAlignment = 64;

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

HugePageArena::~HugePageArena() {
  for (const Chunk& chunk : chunks_) munmap(chunk.data, chunk.size);
}

uint8_t* HugePageArena::allocate(size_t bytes) {
  uint8_t* out = try_allocate(bytes);
  TACHYON_CHECK(out != nullptr);
  return out;
}

uint8_t* HugePageArena::try_allocate(size_t bytes) {
  if (bytes > (size_t{1} << 62)) return nullptr;
  bytes = round_up(std::max<size_t>(bytes, 1), kAlignment);
  if (chunks_.empty() || used_in_last_ + bytes > chunks_.back().size) {
    // mmap'd memory is zeroed and page aligned; over-allocate by a huge page to align to one.
    const size_t size = round_up(std::max(bytes, kMinChunk), kHugePage);
    void* mapping = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) return nullptr;
    uint8_t* raw = static_cast<uint8_t*>(mapping);
    uint8_t* aligned = reinterpret_cast<uint8_t*>(
        round_up(reinterpret_cast<uintptr_t>(raw), kHugePage));
    // Give back the unaligned head and the tail.
    if (aligned > raw) munmap(raw, static_cast<size_t>(aligned - raw));
    const size_t tail = static_cast<size_t>(raw + size + kHugePage - (aligned + size));
    if (tail > 0) munmap(aligned + size, tail);
    static const bool huge_pages = std::getenv("TACHYON_NO_HUGE_PAGES") == nullptr;
    if (huge_pages) madvise(aligned, size, MADV_HUGEPAGE);  // a hint: failure is harmless
    chunks_.push_back({aligned, size});
    used_in_last_ = 0;
  }
  uint8_t* out = chunks_.back().data + used_in_last_;
  used_in_last_ += bytes;
  allocated_ += bytes;
  return out;
}

}  // namespace tachyon

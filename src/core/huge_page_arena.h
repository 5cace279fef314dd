// Memory for data that is read end to end over and over (a model's weights): carved out of
// large chunks that the kernel is asked to back with 2 MiB pages (transparent huge pages,
// madvise mode). Streaming hundreds of MiB per token through 4 KiB pages costs a TLB miss every
// 4 KiB; with 2 MiB pages decoding reads memory ~10% faster on the Zen 4 machines. Where huge
// pages are off (or TACHYON_NO_HUGE_PAGES=1) the memory is ordinary pages, same contents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tachyon {

class HugePageArena {
 public:
  HugePageArena() = default;
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;
  ~HugePageArena();

  // `bytes` of zeroed memory, 64-byte aligned, valid as long as the arena. Never fails
  // (allocation failure aborts, as for operator new).
  uint8_t* allocate(size_t bytes);
  // The same, or null when the system cannot map that much (the caller reports it).
  uint8_t* try_allocate(size_t bytes);

  size_t allocated_bytes() const { return allocated_; }

 private:
  struct Chunk {
    uint8_t* data;
    size_t size;
  };
  std::vector<Chunk> chunks_;
  size_t used_in_last_ = 0;  // bytes handed out from chunks_.back()
  size_t allocated_ = 0;
};

}  // namespace tachyon

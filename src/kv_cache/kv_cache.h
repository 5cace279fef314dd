// Keys and values of one sequence's past tokens, per layer, in a contiguous buffer, stored as
// f16 (half the memory, llama.cpp's default), f32 (exact) or q8 (kv_cache_type.h: a quarter).
// (The paged, shared cache for serving many sequences replaces this in the engine.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/function_ref.h"
#include "core/huge_page_arena.h"
#include "kv_cache/q8_plane.h"

namespace tachyon {

class KvCache {
 public:
  // Keys are stored transposed in blocks of this many positions (see f16_keys).
  static constexpr int kKeyBlock = 128;

  // `type` is DType::kF16, kF32 or kQ8_0 (check_kv_cache_type must pass). `values_are_keys`: each position's value is its key
  // (MLA's cached latent), stored once: half the memory, values read from the keys.
  KvCache(int num_layers, int num_kv_heads, int head_size, int capacity,
          DType type = DType::kF16, bool values_are_keys = false);

  int capacity() const { return capacity_; }
  int kv_size() const { return num_kv_heads_ * head_size_; }
  DType type() const { return type_; }
  bool values_are_keys() const { return values_are_keys_; }
  size_t bytes() const { return storage_bytes_; }

  // Stores `count` positions from `position` on. keys, values: f32 [count, kv_size] (values
  // unread when values_are_keys()). Calls for disjoint positions may run on several threads at
  // once.
  void store(int layer, int position, int count, const float* keys, const float* values);

  // Prefetches, for writing, the lines store(layer, position, count, ...) will write: a decode
  // step's store touches a line per dimension of every head (keys are stored transposed), all
  // evicted since the previous step by the weights streamed in between.
  void prefetch_store(int layer, int position, int count) const;

  // Prefetches, for reading, what attention reads in place of positions [first, first + count)
  // (within one key block) of a KV head: a decode step's attention streams through every
  // position of every head, in blocks the hardware prefetchers lose track of.
  void prefetch_span(int layer, int kv_head, int first, int count) const;

  // One KV head's keys and values for positions [0, count) as f32, rows of head_size.
  // keys, values: f32 [count, head_size]. head_size is the cache's (CHECKed).
  void load_head(int layer, int kv_head, int head_size, int count, float* keys,
                 float* values) const;

  // The same for positions [first, first + count), keys transposed for the attention kernels.
  // keys_by_dimension: f32 [head_size, key_stride] (position first + p in column p);
  // values: f32 [count, head_size].
  void load_span(int layer, int kv_head, int head_size, int first, int count,
                 float* keys_by_dimension, int64_t key_stride, float* values) const;

  // Drops positions [first, first + count) of the first `length`: positions after them move
  // down by `count`. Each moved run's keys (f32 rows [n, kv_size]) pass through `adjust_keys`
  // with their layer's index before they are stored again (the model turns them back by
  // `count` positions with that layer's RoPE).
  // f16 and f32 caches move exactly; q8 is quantized again (the same values unless adjusted).
  void drop_positions(int first, int count, int length,
                      FunctionRef<void(float* keys, int n, int layer)> adjust_keys);

  // Compacts one layer: KV head h keeps positions kept[h] (ascending, each head as many), which
  // become positions 0, 1, ... of that head; keys and values move as they are (f16 and f32
  // exactly, q8 quantized again to the same values). SnapKV's eviction.
  void keep_positions(int layer, std::span<const std::vector<int>> kept);

  // A KV head's stored keys and values as f16 bits, for kernels that read them in place
  // (type() must be kF16). Keys: [capacity / kKeyBlock (rounded up), head_size, kKeyBlock],
  // each block of positions transposed; values: [capacity, head_size] (none when
  // values_are_keys(): read the keys).
  const uint16_t* f16_keys(int layer, int kv_head) const;
  const uint16_t* f16_values(int layer, int kv_head) const;
  // The same for a q8 cache: values laid out as the f16 ones, keys for integer dot products,
  // [capacity / kKeyBlock, head_size / 4, kKeyBlock, 4] (each block's rows of 4 dimensions,
  // each position's 4 bytes together: kernels::q8_key_index), and their scales, one per 32
  // dimensions of a position: keys' [capacity / kKeyBlock, head_size / 32, kKeyBlock], values'
  // [capacity, head_size / 32].
  Q8Plane q8_keys(int layer, int kv_head) const;
  Q8Plane q8_values(int layer, int kv_head) const;

 private:
  // Bytes of one value of an f16 or f32 cache (q8: of its int8 values).
  size_t element_bytes() const {
    return type_ == DType::kQ8_0 ? 1 : type_ == DType::kF16 ? 2 : 4;
  }
  // Byte offset of a KV head's keys (which = 0) or values (1) in a layer. Keys are stored
  // transposed in blocks of kKeyBlock positions, [blocks, head_size, kKeyBlock], so that a
  // block reads as the kernels take it (dimension by dimension, positions contiguous, one run
  // of memory); values as rows, [capacity, head_size]. Both take padded_capacity_ positions.
  size_t head_offset(int layer, int which, int kv_head) const {
    return ((static_cast<size_t>(layer) * planes() + which) * num_kv_heads_ + kv_head) *
           head_bytes_;
  }
  // A q8 cache's keys (which = 0) or values (1) of a KV head, and their scales to write.
  Q8Plane q8_plane(int layer, int which, int kv_head) const;
  uint16_t* q8_scales(int layer, int which, int kv_head) {
    return reinterpret_cast<uint16_t*>(storage_ + head_offset(layer, which, kv_head) +
                                       static_cast<size_t>(head_size_) * padded_capacity_);
  }
  int planes() const { return values_are_keys_ ? 1 : 2; }  // keys (and values) per layer
  // Element index of position p's dimension d in a head's keys.
  size_t key_index(int p, int d) const {
    return (static_cast<size_t>(p / kKeyBlock) * head_size_ + d) * kKeyBlock + p % kKeyBlock;
  }
  // Element index of position p's dimension d in a q8 head's keys.
  size_t q8_key_index(int p, int d) const {
    return static_cast<size_t>(p / kKeyBlock) * head_size_ * kKeyBlock +
           static_cast<size_t>(d / 4) * kKeyBlock * 4 + (p % kKeyBlock) * 4 + d % 4;
  }
  // Index of the scale of position p's dimension d in a q8 head's key scales.
  size_t key_scale_index(int p, int d) const {
    return (static_cast<size_t>(p / kKeyBlock) * (head_size_ / 32) + d / 32) * kKeyBlock +
           p % kKeyBlock;
  }
  // Dimension d of positions [position, position + n) (one key block) of a head's keys.
  void read_key_run(int layer, int kv_head, int position, int d, int n, float* out) const;
  // Values of positions [position, position + count) of a head, as rows.
  void read_value_rows(int layer, int kv_head, int position, int count, float* out) const;

  int num_layers_;
  int num_kv_heads_;
  int head_size_;
  int capacity_;
  int padded_capacity_;  // capacity rounded up to whole key blocks
  DType type_;
  bool values_are_keys_ = false;
  size_t head_bytes_ = 0;  // of a KV head's keys (or values) in a layer
  // f16, f32 or q8 [layers, planes (keys, values), num_kv_heads, head_size * padded_capacity_], in 2 MiB
  // pages: a decode step touches a few KiB of every head of every layer, a TLB miss per 4 KiB
  // page otherwise (the weights streamed in between evict every translation).
  std::unique_ptr<HugePageArena> arena_;
  uint8_t* storage_ = nullptr;
  size_t storage_bytes_ = 0;
};

}  // namespace tachyon

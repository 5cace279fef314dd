// The tensors behind the paged KV cache: for every layer, keys and values of `num_blocks`
// blocks of `block_size` token slots each, stored as f16 (default), f32 or q8
// (kv_cache_type.h). Slot s of block b
// is cache row b * block_size + s. Which request owns which block is KvBlockPool's business;
// this class only writes the rows it is given and reads blocks back.
//
// One layer's block is contiguous and laid out for attention: keys transposed per KV head
// (dimension-major, so scores for a block are a few contiguous vector loops) and values
// position-major:
//   keys:   [num_kv_heads, head_size, block_size]
//   values: [num_kv_heads, block_size, head_size]
// q8 keys are laid out for integer dot products instead, [num_kv_heads, head_size / 4,
// block_size, 4] (rows of 4 dimensions, each slot's 4 bytes together: kernels::q8_key_index),
// and each KV head's scales follow its int8 values, one per 32 dimensions: keys'
// [head_size / 32, block_size], values' [block_size, head_size / 32].
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/function_ref.h"
#include "core/huge_page_arena.h"
#include "core/status.h"
#include "kv_cache/q8_plane.h"

namespace tachyon {

class PagedKvCache {
 public:
  // Fails when the memory cannot be reserved or `type` cannot hold the heads
  // (check_kv_cache_type). Pages are touched only when written.
  // `values_are_keys`: each slot's value is its key (MLA's cached latent), stored once: half
  // the memory; values are read from the keys (f16_values() has none).
  // `local_layers` (one flag per layer; empty: none): sliding-window layers, whose blocks are
  // another pool's, `num_local_blocks` of them (a request holds only its window's blocks of
  // them); the other layers have `num_blocks`.
  static Result<std::unique_ptr<PagedKvCache>> create(int num_layers, int num_kv_heads,
                                                      int head_size, int num_blocks,
                                                      int block_size, DType type,
                                                      bool values_are_keys = false,
                                                      std::vector<bool> local_layers = {},
                                                      int num_local_blocks = 0);

  // Bytes one block takes over all layers (keys and values, or keys alone).
  static size_t block_bytes(int num_layers, int kv_size, int block_size, DType type,
                            bool values_are_keys = false);

  int num_layers() const { return num_layers_; }
  int num_blocks() const { return num_blocks_; }
  // Sliding-window layers live in blocks of their own (ForwardBatch's local block tables and
  // slots address them).
  bool has_local_layers() const { return !local_layers_.empty(); }
  bool is_local(int layer) const { return has_local_layers() && local_layers_[layer]; }
  int num_local_blocks() const { return num_local_blocks_; }
  int layer_blocks(int layer) const { return is_local(layer) ? num_local_blocks_ : num_blocks_; }
  int block_size() const { return block_size_; }
  DType type() const { return type_; }
  bool values_are_keys() const { return values_are_keys_; }

  // Writes row i of keys/values (f32 [slots.size(), num_kv_heads * head_size]) into cache row
  // slots[i] of `layer` (values unread when values_are_keys()), rounded to the cache's type.
  // Calls for disjoint slots may run on several threads at once.
  void store(int layer, std::span<const int64_t> slots, const float* keys, const float* values);
  // Prefetches, for writing, the lines store(layer, slots, ...) will write (a token's keys
  // touch a line per dimension or two of every head, evicted since the previous step).
  void prefetch_store(int layer, std::span<const int64_t> slots) const;

  // Prefetches, for reading, one KV head's keys and values (and scales) in `block`: attention
  // streams through blocks anywhere in memory, which the hardware prefetchers cannot follow.
  void prefetch_block(int layer, int block, int kv_head) const;

  // The first `count` positions of `block` for one KV head, widened to f32:
  // keys_by_dimension: f32 [head_size, key_stride] (row d = dimension d of every position;
  //   columns [0, count) are written); values: f32 [count, head_size].
  void load_block(int layer, int kv_head, int block, int count, float* keys_by_dimension,
                  int64_t key_stride, float* values) const;

  // Copies the keys and values of block `from` into block `to` in every layer of one pool:
  // the local (sliding-window) layers' when `local`, else the others'.
  void copy_block(int from, int to, bool local = false);
  // Reads the keys of the first `count` slots of `block` in every layer of one pool (as
  // copy_block) back as f32 rows [count, kv_size], passes them through `adjust_keys` with the
  // layer's index and stores them again, values unchanged (the sink policy turns moved keys
  // back: DecoderModel::shift_keys, with the layer's own RoPE).
  void rewrite_keys(int block, int count, bool local,
                    FunctionRef<void(float* keys, int n, int layer)> adjust_keys);

  // Compacts one layer of a sequence whose positions live in `from` (position p in slot
  // p % block_size of from[p / block_size]) into `to`: KV head h keeps positions kept[h]
  // (ascending, as many for every head), which become positions 0, 1, ... of `to`; positions
  // before `first` (the same in both, e.g. shared blocks) are not written. SnapKV's eviction.
  void keep_positions(int layer, std::span<const int32_t> from, std::span<const int32_t> to,
                      std::span<const std::vector<int>> kept, int first);

  // Every byte of `block` in one pool's layers (as copy_block): one contiguous span per layer
  // (its keys and values, all heads), the lowest layer first. Copying them out and back in
  // restores the block exactly (the disk tier).
  std::vector<std::span<uint8_t>> block_layers(int block, bool local = false);

  // One KV head's keys ([head_size, block_size], transposed) and values ([block_size,
  // head_size]) in `block`, as f16 bits, for kernels that read them in place. type() must be
  // kF16.
  const uint16_t* f16_keys(int layer, int block, int kv_head) const;
  const uint16_t* f16_values(int layer, int block, int kv_head) const;
  // The same for a q8 cache: int8 values with their scales (see the layout above).
  Q8Plane q8_keys(int layer, int block, int kv_head) const;
  Q8Plane q8_values(int layer, int block, int kv_head) const;

 private:
  PagedKvCache(int num_layers, int num_kv_heads, int head_size, int num_blocks, int block_size,
               DType type, bool values_are_keys, std::unique_ptr<HugePageArena> arena,
               uint8_t* storage);
  // Bytes of one value of an f16 or f32 cache.
  size_t element_bytes() const { return type_ == DType::kF16 ? 2 : 4; }
  // Elements of one KV head's keys (or values) in one block.
  int64_t head_elements() const { return static_cast<int64_t>(head_size_) * block_size_; }
  // Byte offset of a KV head's keys (which = 0) or values (1) in a layer's block.
  size_t head_offset(int layer, int block, int which, int kv_head) const {
    const int64_t index =
        (static_cast<int64_t>(block) * planes() + which) * num_kv_heads_ + kv_head;
    return layer_offset_[layer] + static_cast<size_t>(index * head_bytes_);
  }
  // A q8 cache's keys (which = 0) or values (1) of a KV head in a block.
  Q8Plane q8_plane(int layer, int block, int which, int kv_head) const;
  uint16_t* q8_scales(int layer, int block, int which, int kv_head) {
    return reinterpret_cast<uint16_t*>(storage_ + head_offset(layer, block, which, kv_head) +
                                       head_elements());
  }

  int planes() const { return values_are_keys_ ? 1 : 2; }  // keys (and values) per block

  int num_layers_;
  int num_kv_heads_;
  int head_size_;
  int num_blocks_;
  int block_size_;
  DType type_;
  bool values_are_keys_;
  int64_t head_bytes_;  // of one KV head's keys (or values) in a block
  std::vector<bool> local_layers_;  // empty: no local layers
  int num_local_blocks_ = 0;
  std::vector<size_t> layer_offset_;  // where each layer's blocks start in storage_
  // f16, f32 or q8 [layers, blocks (the layer's pool's), planes (keys, values), kv_heads,
  // head_size × block_size], in 2 MiB
  // pages (each decode step reads a little of every layer's blocks: with 4 KiB pages, mostly
  // TLB misses).
  std::unique_ptr<HugePageArena> arena_;
  uint8_t* storage_;
};

}  // namespace tachyon

// The tensors behind the paged KV cache: for every layer, keys and values of `num_blocks`
// blocks of `block_size` token slots each, stored as f16 (default) or f32. Slot s of block b
// is row b * block_size + s. Which request owns which block is KvBlockPool's business; this
// class only writes the rows it is given and reads them back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/status.h"

namespace tachyon {

class PagedKvCache {
 public:
  // Fails when the memory cannot be reserved. Pages are touched only when written.
  static Result<std::unique_ptr<PagedKvCache>> create(int num_layers, int kv_size, int num_blocks,
                                                      int block_size, DType type);

  // Bytes one block takes over all layers (keys and values).
  static size_t block_bytes(int num_layers, int kv_size, int block_size, DType type);

  int num_layers() const { return num_layers_; }
  int kv_size() const { return kv_size_; }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  DType type() const { return type_; }

  // Writes row i of keys/values (f32 [slots.size(), kv_size]) into slot slots[i] of `layer`.
  void store(int layer, std::span<const int64_t> slots, const float* keys, const float* values);

  // Slots [first_slot, first_slot + count) of one KV head, widened to f32:
  // keys_by_dimension: f32 [head_size, key_stride] (transposed: row d = dimension d);
  // values: f32 [count, head_size]. The slots must lie in one block.
  void load_head(int layer, int kv_head, int head_size, int64_t first_slot, int count,
                 float* keys_by_dimension, int64_t key_stride, float* values) const;

 private:
  PagedKvCache(int num_layers, int kv_size, int num_blocks, int block_size, DType type,
               std::unique_ptr<uint8_t[]> storage);
  size_t element_bytes() const { return type_ == DType::kF16 ? 2 : 4; }
  // Byte offset of row `slot` of the keys (which = 0) or values (1) of `layer`.
  size_t row_offset(int layer, int which, int64_t slot) const {
    return ((static_cast<size_t>(layer) * 2 + which) * num_slots_ + slot) * kv_size_ *
           element_bytes();
  }

  int num_layers_;
  int kv_size_;
  int num_blocks_;
  int block_size_;
  int64_t num_slots_;
  DType type_;
  std::unique_ptr<uint8_t[]> storage_;  // f16 or f32 [layers, 2 (key, value), slots, kv_size]
};

}  // namespace tachyon

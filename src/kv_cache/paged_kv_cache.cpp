#include "kv_cache/paged_kv_cache.h"

#include <cstring>
#include <new>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/cpu/convert.h"

namespace tachyon {

size_t PagedKvCache::block_bytes(int num_layers, int kv_size, int block_size, DType type) {
  const size_t element = type == DType::kF16 ? 2 : 4;
  return static_cast<size_t>(num_layers) * 2 * block_size * kv_size * element;
}

Result<std::unique_ptr<PagedKvCache>> PagedKvCache::create(int num_layers, int kv_size,
                                                           int num_blocks, int block_size,
                                                           DType type) {
  if (type != DType::kF16 && type != DType::kF32) {
    return unsupported("the KV cache stores f16 or f32");
  }
  if (num_blocks <= 0 || block_size <= 0) {
    return invalid_argument(fmt::format("a KV cache needs blocks: {} blocks of {} tokens",
                                        num_blocks, block_size));
  }
  const size_t bytes = block_bytes(num_layers, kv_size, block_size, type) * num_blocks;
  // Default-initialised: the OS backs the pages only when they are first written.
  std::unique_ptr<uint8_t[]> storage(new (std::nothrow) uint8_t[bytes]);
  if (!storage) {
    return out_of_range(fmt::format("cannot allocate {} MiB for the KV cache", bytes >> 20));
  }
  return std::unique_ptr<PagedKvCache>(
      new PagedKvCache(num_layers, kv_size, num_blocks, block_size, type, std::move(storage)));
}

PagedKvCache::PagedKvCache(int num_layers, int kv_size, int num_blocks, int block_size,
                           DType type, std::unique_ptr<uint8_t[]> storage)
    : num_layers_(num_layers),
      kv_size_(kv_size),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_slots_(static_cast<int64_t>(num_blocks) * block_size),
      type_(type),
      storage_(std::move(storage)) {}

void PagedKvCache::store(int layer, std::span<const int64_t> slots, const float* keys,
                         const float* values) {
  for (size_t i = 0; i < slots.size(); ++i) {
    TACHYON_CHECK(slots[i] >= 0 && slots[i] < num_slots_);
    const float* key_row = keys + i * kv_size_;
    const float* value_row = values + i * kv_size_;
    uint8_t* key_out = storage_.get() + row_offset(layer, 0, slots[i]);
    uint8_t* value_out = storage_.get() + row_offset(layer, 1, slots[i]);
    if (type_ == DType::kF16) {
      kernels::f32_to_f16_row(key_row, reinterpret_cast<uint16_t*>(key_out), kv_size_);
      kernels::f32_to_f16_row(value_row, reinterpret_cast<uint16_t*>(value_out), kv_size_);
    } else {
      std::memcpy(key_out, key_row, kv_size_ * sizeof(float));
      std::memcpy(value_out, value_row, kv_size_ * sizeof(float));
    }
  }
}

void PagedKvCache::load_head(int layer, int kv_head, int head_size, int64_t first_slot, int count,
                             float* keys_by_dimension, int64_t key_stride, float* values) const {
  float key_row[512];
  TACHYON_CHECK(head_size <= 512);
  const size_t head_offset = static_cast<size_t>(kv_head) * head_size * element_bytes();
  for (int p = 0; p < count; ++p) {
    const uint8_t* key_in = storage_.get() + row_offset(layer, 0, first_slot + p) + head_offset;
    const uint8_t* value_in = storage_.get() + row_offset(layer, 1, first_slot + p) + head_offset;
    float* value_row = values + static_cast<int64_t>(p) * head_size;
    if (type_ == DType::kF16) {
      kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(key_in), key_row, head_size);
      kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(value_in), value_row, head_size);
    } else {
      std::memcpy(key_row, key_in, head_size * sizeof(float));
      std::memcpy(value_row, value_in, head_size * sizeof(float));
    }
    for (int d = 0; d < head_size; ++d) keys_by_dimension[d * key_stride + p] = key_row[d];
  }
}

}  // namespace tachyon

#include "kv_cache/paged_kv_cache.h"

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "core/half.h"
#include "core/prefetch.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "kv_cache/head_rows.h"
#include "kv_cache/kv_cache_type.h"

namespace tachyon {

size_t PagedKvCache::block_bytes(int num_layers, int kv_size, int block_size, DType type,
                                 bool values_are_keys) {
  return static_cast<size_t>(num_layers) * (values_are_keys ? 1 : 2) *
         kv_cache_bytes(type, static_cast<int64_t>(block_size) * kv_size);
}

Result<std::unique_ptr<PagedKvCache>> PagedKvCache::create(int num_layers, int num_kv_heads,
                                                           int head_size, int num_blocks,
                                                           int block_size, DType type,
                                                           bool values_are_keys,
                                                           std::vector<bool> local_layers,
                                                           int num_local_blocks) {
  TACHYON_RETURN_IF_ERROR(check_kv_cache_type(type, head_size));
  const bool split = !local_layers.empty();
  if (num_blocks <= 0 || block_size <= 0 || (split && num_local_blocks <= 0)) {
    return invalid_argument(fmt::format("a KV cache needs blocks: {} blocks (and {} for local "
                                        "layers) of {} tokens",
                                        num_blocks, num_local_blocks, block_size));
  }
  if (split && static_cast<int>(local_layers.size()) != num_layers) {
    return invalid_argument("the local layers' list does not cover every layer");
  }
  const size_t layer_block =
      block_bytes(1, num_kv_heads * head_size, block_size, type, values_are_keys);
  std::vector<size_t> layer_offset;
  size_t bytes = 0;
  for (int layer = 0; layer < num_layers; ++layer) {
    const size_t blocks = split && local_layers[layer] ? num_local_blocks : num_blocks;
    if (layer_block > (SIZE_MAX - bytes) / blocks) {
      return out_of_range(fmt::format("cannot allocate {} blocks of {} MiB for the KV cache",
                                      num_blocks, (layer_block * num_layers) >> 20));
    }
    layer_offset.push_back(bytes);
    bytes += layer_block * blocks;
  }
  // Mapped, not written: the OS backs the pages only when they are first written.
  auto arena = std::make_unique<HugePageArena>();
  uint8_t* storage = arena->try_allocate(bytes);
  if (storage == nullptr) {
    return out_of_range(fmt::format("cannot allocate {} MiB for the KV cache", bytes >> 20));
  }
  auto cache = std::unique_ptr<PagedKvCache>(
      new PagedKvCache(num_layers, num_kv_heads, head_size, num_blocks, block_size, type,
                       values_are_keys, std::move(arena), storage));
  cache->local_layers_ = std::move(local_layers);
  cache->num_local_blocks_ = split ? num_local_blocks : 0;
  cache->layer_offset_ = std::move(layer_offset);
  return cache;
}

PagedKvCache::PagedKvCache(int num_layers, int num_kv_heads, int head_size, int num_blocks,
                           int block_size, DType type, bool values_are_keys,
                           std::unique_ptr<HugePageArena> arena, uint8_t* storage)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_size_(head_size),
      num_blocks_(num_blocks),
      block_size_(block_size),
      type_(type),
      values_are_keys_(values_are_keys),
      head_bytes_(kv_cache_bytes(type, static_cast<int64_t>(head_size) * block_size)),
      arena_(std::move(arena)),
      storage_(storage) {}

void PagedKvCache::store(int layer, std::span<const int64_t> slots, const float* keys,
                         const float* values) {
  const int64_t kv_size = static_cast<int64_t>(num_kv_heads_) * head_size_;
  const int scale_groups = head_size_ / kernels::kQ8Group;  // per head and position, q8 only
  for (size_t i = 0; i < slots.size(); ++i) {
    TACHYON_CHECK(slots[i] >= 0 && slots[i] < static_cast<int64_t>(layer_blocks(layer)) * block_size_);
    const int block = static_cast<int>(slots[i] / block_size_);
    const int offset = static_cast<int>(slots[i] % block_size_);
    for (int h = 0; h < num_kv_heads_; ++h) {
      const float* key = keys + i * kv_size + h * head_size_;
      uint8_t* key_out = storage_ + head_offset(layer, block, 0, h);
      if (type_ == DType::kQ8_0) {
        // A row quantized, then its values and scales scattered into their columns.
        // The calling thread's own (threads may store at once).
        thread_local std::vector<int8_t> quantized;
        thread_local std::vector<uint16_t> scales;
        quantized.resize(head_size_);
        scales.resize(scale_groups);
        kernels::f32_to_q8_row(key, quantized.data(), scales.data(), head_size_);
        int8_t* key_rows = reinterpret_cast<int8_t*>(key_out);
        for (int d = 0; d < head_size_; ++d) {
          key_rows[kernels::q8_key_index(offset, d, block_size_)] = quantized[d];
        }
        uint16_t* scale_columns = q8_scales(layer, block, 0, h);
        for (int g = 0; g < scale_groups; ++g) scale_columns[g * block_size_ + offset] = scales[g];
      } else if (type_ == DType::kF16) {
        uint16_t* key_columns = reinterpret_cast<uint16_t*>(key_out);
        for (int d = 0; d < head_size_; ++d) key_columns[d * block_size_ + offset] = f32_to_f16(key[d]);
      } else {
        float* key_columns = reinterpret_cast<float*>(key_out);
        for (int d = 0; d < head_size_; ++d) key_columns[d * block_size_ + offset] = key[d];
      }
      if (values_are_keys_) continue;
      const float* value = values + i * kv_size + h * head_size_;
      uint8_t* value_plane = storage_ + head_offset(layer, block, 1, h);
      if (type_ == DType::kQ8_0) {
        kernels::f32_to_q8_row(
            value, reinterpret_cast<int8_t*>(value_plane) + static_cast<size_t>(offset) * head_size_,
            q8_scales(layer, block, 1, h) + offset * scale_groups, head_size_);
      } else if (type_ == DType::kF16) {
        kernels::f32_to_f16_row(
            value,
            reinterpret_cast<uint16_t*>(value_plane) + static_cast<size_t>(offset) * head_size_,
            head_size_);
      } else {
        std::memcpy(reinterpret_cast<float*>(value_plane) + static_cast<size_t>(offset) * head_size_,
                    value, head_size_ * sizeof(float));
      }
    }
  }
}

void PagedKvCache::prefetch_store(int layer, std::span<const int64_t> slots) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_);
  // A slot's keys: one value per dimension, block_size values apart (q8: 4 bytes per 4
  // dimensions, block_size * 4 bytes apart, and the scales after them, one per 32 dimensions).
  const size_t bytes = element_bytes();
  for (const int64_t slot : slots) {
    TACHYON_CHECK(slot >= 0 && slot < static_cast<int64_t>(layer_blocks(layer)) * block_size_);
    const int block = static_cast<int>(slot / block_size_);
    const int offset = static_cast<int>(slot % block_size_);
    for (int h = 0; h < num_kv_heads_; ++h) {
      const uint8_t* keys = storage_ + head_offset(layer, block, 0, h);
      if (type_ != DType::kQ8_0) {
        for (int d = 0; d < head_size_; ++d) {
          prefetch_for_write(keys + (static_cast<size_t>(d) * block_size_ + offset) * bytes);
        }
      } else {
        for (int d = 0; d < head_size_; d += 4) {
          prefetch_for_write(keys + kernels::q8_key_index(offset, d, block_size_));
        }
        const uint16_t* scales = q8_plane(layer, block, 0, h).scales + offset;
        for (int g = 0; g < head_size_ / kernels::kQ8Group; ++g) {
          prefetch_for_write(scales + g * block_size_);
        }
      }
      if (values_are_keys_) continue;
      // A slot's values are one run (q8: and its scales another).
      const size_t row_bytes = static_cast<size_t>(kv_cache_bytes(type_, head_size_));
      if (type_ == DType::kQ8_0) {
        const Q8Plane plane = q8_plane(layer, block, 1, h);
        prefetch_range_for_write(plane.data + static_cast<size_t>(offset) * head_size_, head_size_);
        prefetch_range_for_write(plane.scales + offset * (head_size_ / kernels::kQ8Group),
                                 row_bytes - head_size_);
        continue;
      }
      prefetch_range_for_write(storage_ + head_offset(layer, block, 1, h) + offset * row_bytes,
                               row_bytes);
    }
  }
}

void PagedKvCache::prefetch_block(int layer, int block, int kv_head) const {
  TACHYON_CHECK(layer >= 0 && layer < num_layers_ && block >= 0 && block < layer_blocks(layer));
  for (int which = 0; which < planes(); ++which) {
    prefetch_range_for_read(storage_ + head_offset(layer, block, which, kv_head),
                            static_cast<size_t>(head_bytes_));
  }
}

void PagedKvCache::load_block(int layer, int kv_head, int block, int count,
                              float* keys_by_dimension, int64_t key_stride, float* values) const {
  TACHYON_CHECK(block >= 0 && block < layer_blocks(layer) && count <= block_size_);
  const uint8_t* keys_in = storage_ + head_offset(layer, block, 0, kv_head);
  if (type_ == DType::kQ8_0) {
    const Q8Plane keys = q8_plane(layer, block, 0, kv_head);
    for (int d = 0; d < head_size_; ++d) {
      const uint16_t* scales = keys.scales + (d / kernels::kQ8Group) * block_size_;
      for (int p = 0; p < count; ++p) {
        keys_by_dimension[d * key_stride + p] =
            static_cast<float>(keys.data[kernels::q8_key_index(p, d, block_size_)]) *
            f16_to_f32(scales[p]);
      }
    }
  } else if (type_ == DType::kF16) {
    const uint16_t* key_columns = reinterpret_cast<const uint16_t*>(keys_in);
    for (int d = 0; d < head_size_; ++d) {
      kernels::f16_to_f32_row(key_columns + d * block_size_, keys_by_dimension + d * key_stride,
                              count);
    }
  } else {
    const float* key_columns = reinterpret_cast<const float*>(keys_in);
    for (int d = 0; d < head_size_; ++d) {
      std::memcpy(keys_by_dimension + d * key_stride, key_columns + d * block_size_,
                  count * sizeof(float));
    }
  }
  if (values_are_keys_) {  // the keys, back in rows
    for (int p = 0; p < count; ++p) {
      for (int d = 0; d < head_size_; ++d) {
        values[static_cast<int64_t>(p) * head_size_ + d] = keys_by_dimension[d * key_stride + p];
      }
    }
    return;
  }
  const uint8_t* values_in = storage_ + head_offset(layer, block, 1, kv_head);
  const int64_t value_elements = static_cast<int64_t>(count) * head_size_;
  if (type_ == DType::kQ8_0) {
    const Q8Plane plane = q8_plane(layer, block, 1, kv_head);
    kernels::q8_to_f32_row(plane.data, plane.scales, values, value_elements);
  } else if (type_ == DType::kF16) {
    kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(values_in), values, value_elements);
  } else {
    std::memcpy(values, values_in, value_elements * sizeof(float));
  }
}

const uint16_t* PagedKvCache::f16_keys(int layer, int block, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kF16 && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(block >= 0 && block < layer_blocks(layer) && kv_head >= 0 &&
                kv_head < num_kv_heads_);
  return reinterpret_cast<const uint16_t*>(storage_ + head_offset(layer, block, 0, kv_head));
}

const uint16_t* PagedKvCache::f16_values(int layer, int block, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kF16 && !values_are_keys_ && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(block >= 0 && block < layer_blocks(layer) && kv_head >= 0 &&
                kv_head < num_kv_heads_);
  return reinterpret_cast<const uint16_t*>(storage_ + head_offset(layer, block, 1, kv_head));
}

Q8Plane PagedKvCache::q8_plane(int layer, int block, int which, int kv_head) const {
  const uint8_t* plane = storage_ + head_offset(layer, block, which, kv_head);
  return {reinterpret_cast<const int8_t*>(plane),
          reinterpret_cast<const uint16_t*>(plane + head_elements())};
}

void PagedKvCache::copy_block(int from, int to, bool local) {
  const std::vector<std::span<uint8_t>> source = block_layers(from, local);
  const std::vector<std::span<uint8_t>> target = block_layers(to, local);
  for (size_t layer = 0; layer < source.size(); ++layer) {
    std::memcpy(target[layer].data(), source[layer].data(), source[layer].size());
  }
}

void PagedKvCache::rewrite_keys(int block, int count, bool local,
                                FunctionRef<void(float* keys, int n, int layer)> adjust_keys) {
  TACHYON_CHECK(!local || has_local_layers());
  TACHYON_CHECK(block >= 0 && block < (local ? num_local_blocks_ : num_blocks_) && count >= 0 &&
                count <= block_size_);
  if (count == 0) return;
  const int kv = num_kv_heads_ * head_size_;
  std::vector<float> by_dimension(static_cast<size_t>(head_size_) * block_size_);
  std::vector<float> head_values(static_cast<size_t>(block_size_) * head_size_);
  std::vector<float> keys(static_cast<size_t>(count) * kv), values(keys.size());
  std::vector<int64_t> slots(count);
  for (int i = 0; i < count; ++i) slots[i] = static_cast<int64_t>(block) * block_size_ + i;
  for (int layer = 0; layer < num_layers_; ++layer) {
    if (is_local(layer) != local) continue;
    for (int head = 0; head < num_kv_heads_; ++head) {
      load_block(layer, head, block, count, by_dimension.data(), block_size_,
                 head_values.data());
      for (int p = 0; p < count; ++p) {
        copy_head_position(by_dimension.data(), block_size_, head_values.data(), p, head,
                           head_size_, kv, keys.data(), values.data(), p);
      }
    }
    adjust_keys(keys.data(), count, layer);
    store(layer, slots, keys.data(), values.data());
  }
}

void PagedKvCache::keep_positions(int layer, std::span<const int32_t> from,
                                  std::span<const int32_t> to,
                                  std::span<const std::vector<int>> kept, int first) {
  TACHYON_CHECK(static_cast<int>(kept.size()) == num_kv_heads_);
  const int count = static_cast<int>(kept[0].size());
  const int unmoved = std::min(first, count);
  for (const std::vector<int>& positions : kept) {
    TACHYON_CHECK(static_cast<int>(positions.size()) == count);
    for (int i = 0; i < unmoved; ++i) TACHYON_CHECK(positions[i] == i);
  }
  if (unmoved == count) return;
  const int kv = num_kv_heads_ * head_size_;
  const int moved = count - unmoved;
  std::vector<float> keys(static_cast<size_t>(moved) * kv), values(keys.size());
  std::vector<float> by_dimension(static_cast<size_t>(head_size_) * block_size_);
  std::vector<float> block_values(static_cast<size_t>(block_size_) * head_size_);
  for (int head = 0; head < num_kv_heads_; ++head) {
    // Block by block through the positions this head keeps past `unmoved`, gathering rows.
    int loaded = -1;
    for (int i = unmoved; i < count; ++i) {
      const int position = kept[head][i];
      const int block_index = position / block_size_, slot = position % block_size_;
      if (block_index != loaded) {
        load_block(layer, head, from[block_index], block_size_, by_dimension.data(),
                   block_size_, block_values.data());
        loaded = block_index;
      }
      copy_head_position(by_dimension.data(), block_size_, block_values.data(), slot, head,
                         head_size_, kv, keys.data(), values.data(), i - unmoved);
    }
  }
  std::vector<int64_t> slots(moved);
  for (int i = 0; i < moved; ++i) {
    const int position = unmoved + i;
    slots[i] = static_cast<int64_t>(to[position / block_size_]) * block_size_ +
               position % block_size_;
  }
  store(layer, slots, keys.data(), values.data());
}

std::vector<std::span<uint8_t>> PagedKvCache::block_layers(int block, bool local) {
  TACHYON_CHECK(!local || has_local_layers());
  TACHYON_CHECK(block >= 0 && block < (local ? num_local_blocks_ : num_blocks_));
  const size_t layer_bytes = static_cast<size_t>(planes() * num_kv_heads_ * head_bytes_);
  std::vector<std::span<uint8_t>> layers;
  layers.reserve(num_layers_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    if (is_local(layer) != local) continue;
    layers.emplace_back(storage_ + head_offset(layer, block, 0, 0), layer_bytes);
  }
  return layers;
}

Q8Plane PagedKvCache::q8_keys(int layer, int block, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kQ8_0 && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(block >= 0 && block < layer_blocks(layer) && kv_head >= 0 &&
                kv_head < num_kv_heads_);
  return q8_plane(layer, block, 0, kv_head);
}

Q8Plane PagedKvCache::q8_values(int layer, int block, int kv_head) const {
  TACHYON_CHECK(type_ == DType::kQ8_0 && !values_are_keys_ && layer >= 0 && layer < num_layers_);
  TACHYON_CHECK(block >= 0 && block < layer_blocks(layer) && kv_head >= 0 &&
                kv_head < num_kv_heads_);
  return q8_plane(layer, block, 1, kv_head);
}

}  // namespace tachyon

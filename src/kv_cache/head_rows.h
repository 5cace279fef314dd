// Moving one KV head's positions between the layouts a cache reads back (keys by dimension,
// values as rows) and the rows of all heads that store() takes: the helper the caches' moves
// (the sink policy's shifts, SnapKV's compaction) share.
#pragma once

#include <cstdint>
#include <cstring>

namespace tachyon {

// Copies position `p` of KV head `head`, read back as keys_by_dimension (f32 [head_size,
// stride]) and value_rows (f32 [.., head_size]), into row `row` of keys and values (f32 [..,
// kv_size], every head's head_size values side by side).
inline void copy_head_position(const float* keys_by_dimension, int64_t stride,
                               const float* value_rows, int p, int head, int head_size,
                               int kv_size, float* keys, float* values, int row) {
  float* key_row = keys + static_cast<int64_t>(row) * kv_size + head * head_size;
  for (int d = 0; d < head_size; ++d) key_row[d] = keys_by_dimension[d * stride + p];
  std::memcpy(values + static_cast<int64_t>(row) * kv_size + head * head_size,
              value_rows + static_cast<int64_t>(p) * head_size, head_size * sizeof(float));
}

}  // namespace tachyon

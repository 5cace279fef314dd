#include "models/layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace tachyon {

void causal_attention(const AttentionShape& shape, const float* queries, int num_tokens,
                      int start_position, const KvCache& cache, int layer, float* out,
                      ThreadPool& pool) {
  const int head_size = shape.head_size;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * head_size;
  // Work items: a KV head and a run of consecutive tokens, whose keys and values are widened
  // to f32 once and then shared by the run's queries.
  constexpr int kTokensPerItem = 16;
  const int64_t runs = (num_tokens + kTokensPerItem - 1) / kTokensPerItem;
  const int64_t work = runs * shape.num_kv_heads;
  // Later tokens see more positions and cost more, so items are dealt out round-robin rather
  // than in contiguous ranges, which would leave one thread with all the long ones.
  pool.run([&](int thread_index, int num_threads) {
    // One row of scores per query head: O(context) memory, never a tokens x context matrix.
    thread_local std::vector<float> scores;
    thread_local std::vector<float> head_keys;    // f32 [positions, head_size]
    thread_local std::vector<float> keys_by_dimension;  // f32 [head_size, positions]
    thread_local std::vector<float> head_values;  // f32 [positions, head_size]
    for (int64_t item = thread_index; item < work; item += num_threads) {
      const int kv_head = static_cast<int>(item % shape.num_kv_heads);
      const int first_token = static_cast<int>(item / shape.num_kv_heads) * kTokensPerItem;
      const int last_token = std::min(num_tokens, first_token + kTokensPerItem) - 1;
      const int num_positions = start_position + last_token + 1;
      head_keys.resize(static_cast<size_t>(num_positions) * head_size);
      head_values.resize(static_cast<size_t>(num_positions) * head_size);
      cache.load_head(layer, kv_head, head_size, num_positions, head_keys.data(),
                      head_values.data());
      keys_by_dimension.resize(head_keys.size());
      for (int p = 0; p < num_positions; ++p) {
        for (int d = 0; d < head_size; ++d) {
          keys_by_dimension[static_cast<size_t>(d) * num_positions + p] =
              head_keys[static_cast<size_t>(p) * head_size + d];
        }
      }
      scores.resize(static_cast<size_t>(group) * num_positions);
      const int64_t head_offset = static_cast<int64_t>(kv_head) * group * head_size;
      for (int t = first_token; t <= last_token; ++t) {
        kernels::attention_group(queries + t * q_stride + head_offset, group, head_size, shape.scale,
                     start_position + t + 1, keys_by_dimension.data(), num_positions,
                     head_values.data(), scores.data(), out + t * q_stride + head_offset);
      }
    }
  });
}

}  // namespace tachyon

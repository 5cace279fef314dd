#include "models/layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/aligned_allocator.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/llamacpp_arithmetic.h"

namespace tachyon {
namespace {

// A work item's online-softmax state, shared by both attention paths: up to `max_tokens`
// consecutive tokens x `group` query heads of one KV head, folded in span by span and written
// out at the end. One per thread, reused between items. Buffers here are 64-byte aligned: the
// kernels' vector loads from 16-byte aligned ones span two cache lines.
struct SpanRunState {
  AlignedVector<float> scores;       // f32 [max tokens, group, span] scratch
  AlignedVector<float> running_max;  // f32 [max tokens, group]
  AlignedVector<float> running_sum;  // f32 [max tokens, group]
  AlignedVector<float> accumulator;  // f32 [max tokens, group, head_size]
  // The item's queries quantized for q8 caches, once per item (kernels::Q8Queries):
  AlignedVector<int8_t> q8_values;  // int8 [max tokens, group, head_size]
  AlignedVector<float> q8_scales;   // f32 [max tokens, group, head_size / 32]
  bool q8_ready = false;
  int group = 0;
  int head_size = 0;
  int span = 0;

  // Sizes the buffers for an item (they keep their largest size, so no allocation later).
  void size(int max_tokens, int group_size, int head, int span_positions) {
    group = group_size;
    head_size = head;
    span = span_positions;
    scores.resize(static_cast<size_t>(max_tokens) * group * span);
    running_max.resize(static_cast<size_t>(max_tokens) * group);
    running_sum.resize(static_cast<size_t>(max_tokens) * group);
    accumulator.resize(static_cast<size_t>(max_tokens) * group * head_size);
  }
  // Empties the state for a new item of `num_tokens` tokens (only what it will use: a decode
  // step's items have one token, the buffers room for a prompt's).
  void reset(int num_tokens) {
    const size_t rows = static_cast<size_t>(num_tokens) * group;
    std::fill_n(running_max.begin(), rows, -std::numeric_limits<float>::infinity());
    std::fill_n(running_sum.begin(), rows, 0.0f);
    std::fill_n(accumulator.begin(), rows * head_size, 0.0f);
    q8_ready = false;
  }
  // Folds one span (keys transposed with stride `span`, values [span, head_size]) into the
  // item's `num_tokens` tokens, whose queries are `q_stride` apart; token i sees visible[i].
  void update(const float* queries, int64_t q_stride, int num_tokens, float scale,
              const int* visible, const float* keys_by_dimension, const float* values) {
    kernels::attention_span_update(queries, q_stride, num_tokens, group, head_size, scale,
                                   visible, keys_by_dimension, span, values, scores.data(), span,
                                   running_max.data(), running_sum.data(), accumulator.data());
  }
  // The same with keys and values as f16 bits in groups of positions, read in place
  // (kernels::attention_reads_f16 must hold; see kernels::attention_span_update_f16).
  void update(const float* queries, int64_t q_stride, int num_tokens, float scale,
              const int* visible, const uint16_t* const* key_groups, int64_t key_stride,
              const uint16_t* const* value_groups) {
    kernels::attention_span_update_f16(queries, q_stride, num_tokens, group, head_size, scale,
                                       visible, key_groups, key_stride, value_groups,
                                       scores.data(), span, running_max.data(),
                                       running_sum.data(), accumulator.data());
  }
  // The same with keys and values as q8, read in place (kernels::attention_reads_q8 must hold):
  // the queries are quantized at the item's first span.
  void update(const float* queries, int64_t q_stride, int num_tokens, float scale,
              const int* visible, const kernels::Q8SpanGroups& groups) {
    if (!q8_ready) {
      const size_t rows = static_cast<size_t>(num_tokens) * group;
      q8_values.resize(std::max(q8_values.size(), rows * head_size));
      q8_scales.resize(std::max(q8_scales.size(), rows * (head_size / kernels::kQ8Group)));
      kernels::quantize_queries_q8(queries, q_stride, num_tokens, group, head_size, scale,
                                   q8_values.data(), q8_scales.data());
      q8_ready = true;
    }
    kernels::attention_span_update_q8({q8_values.data(), q8_scales.data()}, num_tokens, group,
                                      head_size, visible, groups, scores.data(), span,
                                      running_max.data(), running_sum.data(),
                                      accumulator.data());
  }
  // Folds the tail of a span (positions offset .. offset + count - 1 of keys and values
  // widened to f32, key_stride apart) into token i's rows alone: its sliding window starts
  // inside the span. `query` is the token's first row's query.
  void update_tail(int i, const float* query, float scale, int offset, int count,
                   const float* keys_by_dimension, int64_t key_stride, const float* values) {
    kernels::attention_span_update(query, 0, 1, group, head_size, scale, &count,
                                   keys_by_dimension + offset, key_stride,
                                   values + static_cast<int64_t>(offset) * head_size,
                                   scores.data(), span, running_max.data() + i * group,
                                   running_sum.data() + i * group,
                                   accumulator.data() + static_cast<size_t>(i) * group * head_size);
  }
  // Writes token i's normalised output to out + i * q_stride.
  void finish(int num_tokens, float* out, int64_t q_stride) const {
    for (int i = 0; i < num_tokens; ++i) {
      kernels::attention_finish(accumulator.data() + static_cast<size_t>(i) * group * head_size,
                                running_sum.data() + i * group, group, head_size,
                                out + i * q_stride);
    }
  }
};

// Sliding windows over one span starting at position span_start, for tokens at positions
// first_position + i whose prefix of the span is visible[i] positions: a token whose window
// starts inside that prefix, after its first position, cannot share the span's update (the
// kernels take prefixes), so its visible[i] becomes 0 and tail_start[i] / tail_count[i] say
// which positions of the span it folds alone (SpanRunState::update_tail, on keys widened to
// f32 in every path, so a token's arithmetic does not depend on its batch); a token whose
// window starts past the prefix sees none of it. tail_start[i] is -1 for tokens without a
// tail. Returns whether any token has one.
bool split_window_tails(int window, int first_position, int num_tokens, int span_start,
                        int* visible, int* tail_start, int* tail_count) {
  bool any = false;
  for (int i = 0; i < num_tokens; ++i) {
    tail_start[i] = -1;
    const int window_start = first_position + i - window + 1;
    if (window <= 0 || window_start <= span_start) continue;
    const int offset = window_start - span_start;
    if (offset < visible[i]) {
      tail_start[i] = offset;
      tail_count[i] = visible[i] - offset;
      any = true;
    }
    visible[i] = 0;
  }
  return any;
}

// The first position any of a run's tokens (the first at first_position) sees, rounded down to
// a multiple of `span`.
int first_visible_span(int window, int first_position, int span) {
  if (window <= 0) return 0;
  return std::max(0, first_position - window + 1) / span * span;
}

// True when attention reads `cache`'s blocks in place (f16 or q8 keys and values, or keys that
// are also the values: MLA's latent, in a layout the active kernel takes for heads of
// `head_size`).
template <typename Cache>
bool reads_in_place(const Cache& cache, int head_size) {
  if (cache.type() == DType::kF16) return kernels::attention_reads_f16(head_size);
  if (cache.type() == DType::kQ8_0) return kernels::attention_reads_q8(head_size);
  return false;
}

// A single run's query heads split evenly between the pool's threads, a KV head's between two
// if need be (a row's result does not depend on which rows share a kernel call): whole KV
// heads would leave one of 2 threads idle a third of the time with 3 KV heads, most of a long
// context's decoding time. attend(state, kv_head, first_row, rows) does a KV head's rows
// [first_row, first_row + rows) of its group.
template <typename Attend>
void split_query_heads(ThreadPool& pool, int num_heads, int group, const Attend& attend) {
  pool.run([&](int thread_index, int num_threads) {
    thread_local SpanRunState state;
    const int end = num_heads * (thread_index + 1) / num_threads;
    for (int head = num_heads * thread_index / num_threads; head < end;) {
      const int kv_head = head / group;
      const int rows = std::min(end, (kv_head + 1) * group) - head;
      attend(state, kv_head, head % group, rows);
      head += rows;
    }
  });
}

}  // namespace

void causal_attention(const AttentionShape& shape, const float* queries, int num_tokens,
                      int start_position, const KvCache& cache, int layer, float* out,
                      ThreadPool& pool) {
  if (num_tokens <= 0) return;
  const int head_size = shape.head_size;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * head_size;
  // Work items: a KV head and a run of consecutive tokens, whose queries share each key and
  // value the kernel loads.
  constexpr int kTokensPerItem = 16;
  // Positions are folded into an online softmax a span at a time, spans aligned to absolute
  // positions as in paged_attention, so a token's arithmetic depends only on its context.
  constexpr int kSpan = 128;
  static_assert(kSpan == KvCache::kKeyBlock, "spans read an f16 cache's key blocks in place");
  constexpr int kGroupsPerSpan = kSpan / kernels::kAttentionGroupPositions;
  const int num_positions = start_position + num_tokens;
  const int num_spans = (num_positions + kSpan - 1) / kSpan;
  // Each KV head's keys and values are widened to f32 once per call, keys transposed span by
  // span, and shared by every run that reads them (widening them per run cost a fifth of a
  // long prompt's time). Per span: keys f32 [head_size, kSpan], then values f32 [kSpan,
  // head_size]. All heads at once unless their copy would pass kWidenedBytes (long contexts
  // of models with many KV heads), then as many heads per pass as fit.
  const int64_t span_floats = static_cast<int64_t>(head_size) * kSpan;
  const int64_t head_floats = 2 * span_floats * num_spans;
  constexpr int64_t kWidenedBytes = int64_t{64} << 20;
  const int heads_per_pass = static_cast<int>(std::clamp<int64_t>(
      kWidenedBytes / (head_floats * static_cast<int64_t>(sizeof(float))), 1, shape.num_kv_heads));
  const int64_t runs = (num_tokens + kTokensPerItem - 1) / kTokensPerItem;
  // Folds a KV head's spans into query heads [first_row, first_row + rows) of its group, for
  // tokens [first_token, first_token + item_tokens), and writes their outputs. head_data: the
  // head's widened spans, or null to read an f16 cache in place.
  auto attend = [&](SpanRunState& state, int kv_head, int first_row, int rows, int first_token,
                    int item_tokens, const float* head_data) {
    state.size(kTokensPerItem, rows, head_size, kSpan);
    state.reset(item_tokens);
    const int item_first = start_position + first_token;
    const int item_positions = item_first + item_tokens;
    const int64_t offset =
        first_token * q_stride + static_cast<int64_t>(kv_head * group + first_row) * head_size;
    for (int span_start = first_visible_span(shape.window, item_first, kSpan);
         span_start < item_positions; span_start += kSpan) {
      const int span_count = std::min(kSpan, item_positions - span_start);
      int visible[kTokensPerItem];
      for (int i = 0; i < item_tokens; ++i) {
        visible[i] = std::clamp(item_first + i + 1 - span_start, 0, span_count);
      }
      int tail_start[kTokensPerItem];
      int tail_count[kTokensPerItem];
      if (split_window_tails(shape.window, item_first, item_tokens, span_start, visible,
                             tail_start, tail_count)) {
        thread_local AlignedVector<float> span_keys;    // f32 [head_size, kSpan]
        thread_local AlignedVector<float> span_values;  // f32 [kSpan, head_size]
        const float* keys = nullptr;
        const float* values = nullptr;
        if (head_data != nullptr) {
          keys = head_data + (span_start / kSpan) * 2 * span_floats;
          values = keys + span_floats;
        } else {
          span_keys.resize(static_cast<size_t>(span_floats));
          span_values.resize(static_cast<size_t>(span_floats));
          cache.load_span(layer, kv_head, head_size, span_start, span_count, span_keys.data(),
                          kSpan, span_values.data());
          keys = span_keys.data();
          values = span_values.data();
        }
        for (int i = 0; i < item_tokens; ++i) {
          if (tail_start[i] < 0) continue;
          state.update_tail(i, queries + offset + i * q_stride, shape.scale, tail_start[i],
                            tail_count[i], keys, kSpan, values);
        }
      }
      if (std::all_of(visible, visible + item_tokens, [](int v) { return v == 0; })) continue;
      if (head_data == nullptr && cache.type() == DType::kQ8_0 &&
          span_start + kSpan < item_positions) {
        // Reading q8 in place: the next span comes in while this one is computed (a decode
        // step was bound by the latency of its loads: 47 -> 62 tokens/s at 8K positions; f16's
        // spans, twice the bytes, measured slower prefetched: 48 -> 44).
        cache.prefetch_span(layer, kv_head, span_start + kSpan,
                            std::min(kSpan, item_positions - span_start - kSpan));
      }
      if (head_data == nullptr && cache.type() == DType::kQ8_0) {
        // The span is one key block (keys in rows of 4 dimensions, 4 bytes per position, and
        // their scales), its groups of positions following each other; values and their
        // scales as rows.
        // (MLA's latent: values are the keys, read from them.)
        const bool own_values = !cache.values_are_keys();
        const Q8Plane keys = cache.q8_keys(layer, kv_head);
        const Q8Plane values = own_values ? cache.q8_values(layer, kv_head) : Q8Plane{};
        const int scales_per_row = head_size / kernels::kQ8Group;
        const int8_t* key_groups[kGroupsPerSpan];
        const uint16_t* key_scale_groups[kGroupsPerSpan];
        const int8_t* value_groups[kGroupsPerSpan];
        const uint16_t* value_scale_groups[kGroupsPerSpan];
        for (int g = 0; g < kGroupsPerSpan; ++g) {
          const int64_t first = span_start + g * kernels::kAttentionGroupPositions;
          key_groups[g] = keys.data + static_cast<int64_t>(span_start) * head_size +
                          g * kernels::kAttentionGroupPositions * 4;
          key_scale_groups[g] = keys.scales + static_cast<int64_t>(span_start) * scales_per_row +
                                g * kernels::kAttentionGroupPositions;
          if (own_values) {
            value_groups[g] = values.data + first * head_size;
            value_scale_groups[g] = values.scales + first * scales_per_row;
          }
        }
        state.update(queries + offset, q_stride, item_tokens, shape.scale, visible,
                     {key_groups, key_scale_groups, KvCache::kKeyBlock,
                      own_values ? value_groups : nullptr,
                      own_values ? value_scale_groups : nullptr});
      } else if (head_data == nullptr) {
        // The span is one key block; its groups of positions follow each other (MLA's latent:
        // values are the keys, read from them).
        const bool own_values = !cache.values_are_keys();
        const uint16_t* keys =
            cache.f16_keys(layer, kv_head) + static_cast<int64_t>(span_start) * head_size;
        const uint16_t* values =
            own_values
                ? cache.f16_values(layer, kv_head) + static_cast<int64_t>(span_start) * head_size
                : nullptr;
        const uint16_t* key_groups[kGroupsPerSpan];
        const uint16_t* value_groups[kGroupsPerSpan];
        for (int g = 0; g < kGroupsPerSpan; ++g) {
          key_groups[g] = keys + g * kernels::kAttentionGroupPositions;
          if (own_values) value_groups[g] = values + g * kernels::kAttentionGroupPositions * head_size;
        }
        state.update(queries + offset, q_stride, item_tokens, shape.scale, visible, key_groups,
                     KvCache::kKeyBlock, own_values ? value_groups : nullptr);
      } else {
        const float* keys = head_data + (span_start / kSpan) * 2 * span_floats;
        state.update(queries + offset, q_stride, item_tokens, shape.scale, visible, keys,
                     keys + span_floats);
      }
    }
    state.finish(item_tokens, out + offset, q_stride);
  };
  if (runs == 1 && reads_in_place(cache, head_size)) {
    // Decoding from an f16 or q8 cache: nothing to widen, and the query heads split evenly.
    return split_query_heads(pool, shape.num_heads, group,
                             [&](SpanRunState& state, int kv_head, int first_row, int rows) {
                               attend(state, kv_head, first_row, rows, 0, num_tokens, nullptr);
                             });
  }
  if (cache.type() == DType::kQ8_0 && reads_in_place(cache, head_size)) {
    // Prompts read a q8 cache in place too: q8 scores are integer dot products with the keys
    // as stored, the same for every token however it is batched.
    pool.run([&](int thread_index, int num_threads) {
      thread_local SpanRunState state;
      for (int64_t item = thread_index; item < runs * shape.num_kv_heads; item += num_threads) {
        const int first_token = static_cast<int>(item / shape.num_kv_heads) * kTokensPerItem;
        attend(state, static_cast<int>(item % shape.num_kv_heads), 0, group, first_token,
               std::min(num_tokens - first_token, kTokensPerItem), nullptr);
      }
    });
    return;
  }
  // Grows to the longest context seen, then is reused.
  thread_local AlignedVector<float> widened_storage;
  AlignedVector<float>& widened = widened_storage;  // workers reach it through this reference
  if (widened.size() < static_cast<size_t>(heads_per_pass * head_floats)) {
    widened.resize(static_cast<size_t>(heads_per_pass * head_floats));
  }
  // With a single run (decoding) each item is a whole KV head and widens it itself: no extra
  // round of the pool.
  const bool widen_in_items = runs == 1;
  for (int first_head = 0; first_head < shape.num_kv_heads; first_head += heads_per_pass) {
    const int pass_heads = std::min(heads_per_pass, shape.num_kv_heads - first_head);
    auto widen = [&](int head, int span) {
      float* keys = widened.data() + head * head_floats + span * 2 * span_floats;
      cache.load_span(layer, first_head + head, head_size, span * kSpan,
                      std::min(kSpan, num_positions - span * kSpan), keys, kSpan,
                      keys + span_floats);
    };
    if (!widen_in_items) {
      pool.run([&](int thread_index, int num_threads) {
        for (int item = thread_index; item < pass_heads * num_spans; item += num_threads) {
          widen(item / num_spans, item % num_spans);
        }
      });
    }
    // Later tokens see more positions and cost more, so items are dealt out round-robin
    // rather than in contiguous ranges, which would leave one thread with all the long ones.
    pool.run([&](int thread_index, int num_threads) {
      thread_local SpanRunState state;
      for (int64_t item = thread_index; item < runs * pass_heads; item += num_threads) {
        const int head = static_cast<int>(item % pass_heads);
        const int first_token = static_cast<int>(item / pass_heads) * kTokensPerItem;
        if (widen_in_items) {
          for (int span = 0; span < num_spans; ++span) widen(head, span);
        }
        attend(state, first_head + head, 0, group, first_token,
               std::min(num_tokens - first_token, kTokensPerItem),
               widened.data() + head * head_floats);
      }
    });
  }
}

void causal_attention_llamacpp(const AttentionShape& shape, const float* queries, int num_tokens,
                               int start_position, const KvCache& cache, int layer, float* out,
                               ThreadPool& pool) {
  const int head_size = shape.head_size;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * head_size;
  const int num_positions = start_position + num_tokens;
  namespace llamacpp = kernels::llamacpp;
  // llama.cpp splits a single row's cells between its threads (assumed as many as ours).
  const int cells = llamacpp::attention_cells(num_positions, cache.capacity());
  const bool split = num_tokens == 1 && cells >= llamacpp::kSplitAttentionCells;
  const int split_chunk = (cells + pool.num_threads() - 1) / pool.num_threads();
  pool.run([&](int thread_index, int num_threads) {
    thread_local AlignedVector<float> keys;    // f32 [positions, head_size]
    thread_local AlignedVector<float> values;  // f32 [positions, head_size]
    keys.resize(static_cast<size_t>(num_positions) * head_size);
    values.resize(static_cast<size_t>(num_positions) * head_size);
    for (int kv_head = thread_index; kv_head < shape.num_kv_heads; kv_head += num_threads) {
      cache.load_head(layer, kv_head, head_size, num_positions, keys.data(), values.data());
      for (int t = 0; t < num_tokens; ++t) {
        for (int g = 0; g < group; ++g) {
          const int64_t offset =
              t * q_stride + static_cast<int64_t>(kv_head * group + g) * head_size;
          // A sliding window: the positions from its start on.
          const int first = shape.window > 0 ? std::max(0, start_position + t - shape.window + 1)
                                             : 0;
          const int visible = start_position + t + 1 - first;
          const float* row_keys = keys.data() + static_cast<int64_t>(first) * head_size;
          const float* row_values = values.data() + static_cast<int64_t>(first) * head_size;
          if (num_tokens >= llamacpp::kTiledAttentionRows) {
            llamacpp::attention_row_tiled(queries + offset, row_keys, row_values, visible,
                                          head_size, shape.scale, out + offset);
          } else if (split) {
            llamacpp::attention_row_split(queries + offset, row_keys, row_values, visible,
                                          head_size, shape.scale, split_chunk, out + offset);
          } else {
            llamacpp::attention_row(queries + offset, row_keys, row_values, visible, head_size,
                                    shape.scale, out + offset);
          }
        }
      }
    }
  });
}

}  // namespace tachyon

namespace tachyon {

void paged_attention(const AttentionShape& shape, const float* queries, const ForwardBatch& batch,
                     const PagedKvCache& cache, int layer, float* out, ThreadPool& pool) {
  // A sliding-window layer's blocks are its own pool's.
  const bool local = cache.is_local(layer);
  auto table = [local](const BatchSequence& sequence) -> const std::vector<BlockId>& {
    return local ? sequence.local_block_table : sequence.block_table;
  };
  const int head_size = shape.head_size;
  const int group = shape.num_heads / shape.num_kv_heads;
  const int block_size = batch.block_size;
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * head_size;
  // Work items: a KV head of a run of up to 16 consecutive new tokens of one sequence.
  constexpr int kTokensPerRun = 16;
  constexpr int kSpanPositions = 128;
  // Positions are folded into the online softmax a span at a time: whole blocks, aligned to
  // absolute positions, so a token's arithmetic depends only on its own context length.
  const int span = block_size * std::max(1, kSpanPositions / block_size);
  const int64_t span_floats = static_cast<int64_t>(span) * head_size;
  // A sequence with several runs (a prompt chunk) has its blocks widened to f32 once per call
  // and shared by its runs (per span: keys f32 [head_size, span], then values f32 [span,
  // head_size]; per sequence: [num_kv_heads, spans]), unless the copies of all such sequences
  // would pass kWidenedBytes; other runs widen their blocks span by span as they go.
  constexpr int64_t kWidenedBytes = int64_t{128} << 20;
  struct Run {
    int sequence;
    int first_token;  // index in the batch
    int num_tokens;
  };
  // Widened spans are numbered sequence by sequence, then head by head; span i lies at
  // widened + i * 2 * span_floats.
  struct Widened {
    int sequence;
    int lowest_span;     // the span of its first visible position (sliding windows: > 0)
    int num_spans;       // from lowest_span on
    int64_t first_span;  // number of its first head's first span
  };
  // Reused between calls. Workers reach them through these references: naming a thread_local
  // inside the job would give each worker its own, empty copy.
  thread_local std::vector<Run> runs_storage;
  thread_local std::vector<Widened> widened_sequences_storage;
  // Per sequence: its index in widened_sequences, or -1.
  thread_local std::vector<int> widened_index_storage;
  thread_local AlignedVector<float> widened_storage;
  std::vector<Run>& runs = runs_storage;
  std::vector<Widened>& widened_sequences = widened_sequences_storage;
  std::vector<int>& widened_index = widened_index_storage;
  AlignedVector<float>& widened = widened_storage;
  // A q8 cache read in place is read so by every run (q8 scores are integer dot products with
  // the keys as stored: the same for a token however it is batched); nothing is widened.
  const bool read_in_place = block_size == kernels::kAttentionGroupPositions &&
                             reads_in_place(cache, head_size);
  const bool q8_in_place = read_in_place && cache.type() == DType::kQ8_0;
  runs.clear();
  widened_sequences.clear();
  widened_index.assign(batch.sequences.size(), -1);
  int64_t widened_spans = 0;
  for (int s = 0; s < static_cast<int>(batch.sequences.size()); ++s) {
    const BatchSequence& sequence = batch.sequences[s];
    for (int t = 0; t < sequence.num_tokens; t += kTokensPerRun) {
      runs.push_back(
          {s, sequence.first_token + t, std::min(kTokensPerRun, sequence.num_tokens - t)});
    }
    if (sequence.num_tokens > kTokensPerRun && !q8_in_place) {
      const int lowest_span = first_visible_span(shape.window, sequence.start_position, span) / span;
      const int num_spans =
          (sequence.start_position + sequence.num_tokens + span - 1) / span - lowest_span;
      widened_index[s] = static_cast<int>(widened_sequences.size());
      widened_sequences.push_back({s, lowest_span, num_spans, widened_spans});
      widened_spans += static_cast<int64_t>(num_spans) * shape.num_kv_heads;
    }
  }
  if (widened_spans * 2 * span_floats * static_cast<int64_t>(sizeof(float)) > kWidenedBytes) {
    widened_sequences.clear();
    widened_index.assign(batch.sequences.size(), -1);
    widened_spans = 0;
  }
  const size_t widened_floats = static_cast<size_t>(widened_spans * 2 * span_floats);
  if (widened.size() < widened_floats) widened.resize(widened_floats);
  // Keys (transposed, stride `span`) and values of positions [span_start, span_start + count)
  // of a sequence's KV head; with a sliding window, only the blocks from the one holding the
  // sequence's first visible position (those before may be freed).
  auto load_span = [&](const BatchSequence& sequence, int kv_head, int span_start, int count,
                       float* keys, float* values) {
    const int first_needed =
        shape.window > 0 ? std::max(0, sequence.start_position - shape.window + 1) : 0;
    for (int offset = 0; offset < count; offset += block_size) {
      const int block = (span_start + offset) / block_size;
      if ((block + 1) * block_size <= first_needed) continue;
      cache.load_block(layer, kv_head, table(sequence)[block],
                       std::min(block_size, count - offset), keys + offset, span,
                       values + static_cast<size_t>(offset) * head_size);
    }
  };
  if (!widened_sequences.empty()) {
    pool.run([&](int thread_index, int num_threads) {
      size_t w = 0;  // the sequence that span `item` belongs to
      for (int64_t item = thread_index; item < widened_spans; item += num_threads) {
        while (w + 1 < widened_sequences.size() && item >= widened_sequences[w + 1].first_span) {
          ++w;
        }
        const Widened& widened_sequence = widened_sequences[w];
        const BatchSequence& sequence = batch.sequences[widened_sequence.sequence];
        const int64_t index = item - widened_sequence.first_span;  // kv_head * num_spans + span
        const int kv_head = static_cast<int>(index / widened_sequence.num_spans);
        const int span_start =
            (widened_sequence.lowest_span + static_cast<int>(index % widened_sequence.num_spans)) *
            span;
        float* keys = widened.data() + item * 2 * span_floats;
        load_span(sequence, kv_head, span_start,
                  std::min(span, sequence.start_position + sequence.num_tokens - span_start),
                  keys, keys + span_floats);
      }
    });
  }
  // Runs of sequences not widened above read an f16 or q8 cache in place where the kernel can
  // (blocks of one group of positions each, values stored as such), or widen their blocks span
  // by span as they go.
  constexpr int kMaxGroups = kSpanPositions / kernels::kAttentionGroupPositions;
  // Folds a run's spans of a KV head into query heads [first_row, first_row + rows) of its
  // group and writes their outputs.
  auto attend = [&](SpanRunState& state, const Run& run, int kv_head, int first_row, int rows) {
    thread_local AlignedVector<float> keys_by_dimension;  // f32 [head_size, span]
    thread_local AlignedVector<float> values;             // f32 [span, head_size]
    const BatchSequence& sequence = batch.sequences[run.sequence];
    const int widened_at = widened_index[run.sequence];
    // This head's widened span of lowest_span, if widened.
    const float* head_spans = nullptr;
    int lowest_span = 0;
    if (widened_at >= 0) {
      const Widened& w = widened_sequences[widened_at];
      head_spans = widened.data() + (w.first_span + kv_head * w.num_spans) * 2 * span_floats;
      lowest_span = w.lowest_span;
    } else if (!read_in_place || shape.window > 0) {
      keys_by_dimension.resize(static_cast<size_t>(head_size) * span);
      values.resize(static_cast<size_t>(span) * head_size);
    }
    state.size(kTokensPerRun, rows, head_size, span);
    state.reset(run.num_tokens);
    const int64_t offset = run.first_token * q_stride +
                           static_cast<int64_t>(kv_head * group + first_row) * head_size;
    // Cache positions seen by the run's last token (each token sees itself and everything
    // before). Cache positions, not RoPE's batch.positions: they differ after SnapKV.
    const int run_first = sequence.start_position + (run.first_token - sequence.first_token);
    const int run_end = run_first + run.num_tokens;
    // A span's keys (transposed, stride `span`) and values widened to f32: the sequence's
    // widened span, or loaded into this thread's buffers (once per span).
    int loaded_span = -1;
    auto widened_span = [&](int span_start,
                            int span_count) -> std::pair<const float*, const float*> {
      if (head_spans != nullptr) {
        const float* keys = head_spans + (span_start / span - lowest_span) * 2 * span_floats;
        return {keys, keys + span_floats};
      }
      if (loaded_span != span_start) {
        load_span(sequence, kv_head, span_start, span_count, keys_by_dimension.data(),
                  values.data());
        loaded_span = span_start;
      }
      return {keys_by_dimension.data(), values.data()};
    };
    for (int span_start = first_visible_span(shape.window, run_first, span);
         span_start < run_end; span_start += span) {
      const int span_count = std::min(span, run_end - span_start);
      int visible[kTokensPerRun];
      for (int i = 0; i < run.num_tokens; ++i) {
        visible[i] = std::clamp(run_first + i + 1 - span_start, 0, span_count);
      }
      int tail_start[kTokensPerRun];
      int tail_count[kTokensPerRun];
      if (split_window_tails(shape.window, run_first, run.num_tokens, span_start, visible,
                             tail_start, tail_count)) {
        const auto [span_keys, span_values] = widened_span(span_start, span_count);
        for (int i = 0; i < run.num_tokens; ++i) {
          if (tail_start[i] < 0) continue;
          state.update_tail(i, queries + offset + i * q_stride, shape.scale, tail_start[i],
                            tail_count[i], span_keys, span, span_values);
        }
      }
      if (std::all_of(visible, visible + run.num_tokens, [](int v) { return v == 0; })) continue;
      if (head_spans == nullptr && read_in_place && cache.type() == DType::kQ8_0) {
        // The next span's blocks come in while this one is computed (as in causal_attention).
        for (int b = (span_start + span) / block_size; b * block_size < run_end &&
                                                       b < (span_start + 2 * span) / block_size;
             ++b) {
          cache.prefetch_block(layer, table(sequence)[b], kv_head);
        }
        const int8_t* key_groups[kMaxGroups];
        const uint16_t* key_scale_groups[kMaxGroups];
        const int8_t* value_groups[kMaxGroups];
        const uint16_t* value_scale_groups[kMaxGroups];
        const bool own_values = !cache.values_are_keys();  // else MLA's latent
        for (int b = 0; b * block_size < span_count; ++b) {
          const int block = table(sequence)[span_start / block_size + b];
          const Q8Plane keys = cache.q8_keys(layer, block, kv_head);
          key_groups[b] = keys.data;
          key_scale_groups[b] = keys.scales;
          if (own_values) {
            const Q8Plane values = cache.q8_values(layer, block, kv_head);
            value_groups[b] = values.data;
            value_scale_groups[b] = values.scales;
          }
        }
        state.update(queries + offset, q_stride, run.num_tokens, shape.scale, visible,
                     {key_groups, key_scale_groups, block_size,
                      own_values ? value_groups : nullptr,
                      own_values ? value_scale_groups : nullptr});
        continue;
      }
      if (head_spans == nullptr && read_in_place) {
        const uint16_t* key_groups[kMaxGroups];
        const uint16_t* value_groups[kMaxGroups];
        const bool own_values = !cache.values_are_keys();  // else MLA's latent
        for (int b = 0; b * block_size < span_count; ++b) {
          const int block = table(sequence)[span_start / block_size + b];
          key_groups[b] = cache.f16_keys(layer, block, kv_head);
          if (own_values) value_groups[b] = cache.f16_values(layer, block, kv_head);
        }
        state.update(queries + offset, q_stride, run.num_tokens, shape.scale, visible,
                     key_groups, block_size, own_values ? value_groups : nullptr);
        continue;
      }
      const auto [span_keys, span_values] = widened_span(span_start, span_count);
      state.update(queries + offset, q_stride, run.num_tokens, shape.scale, visible, span_keys,
                   span_values);
    }
    state.finish(run.num_tokens, out + offset, q_stride);
  };
  if (runs.size() == 1) {
    // One run (a single sequence decoding): its query heads split evenly.
    return split_query_heads(pool, shape.num_heads, group,
                             [&](SpanRunState& state, int kv_head, int first_row, int rows) {
                               attend(state, runs[0], kv_head, first_row, rows);
                             });
  }
  const int64_t work = static_cast<int64_t>(runs.size()) * shape.num_kv_heads;
  pool.run([&](int thread_index, int num_threads) {
    thread_local SpanRunState state;
    for (int64_t item = thread_index; item < work; item += num_threads) {
      attend(state, runs[item / shape.num_kv_heads], static_cast<int>(item % shape.num_kv_heads),
             0, group);
    }
  });
}

}  // namespace tachyon

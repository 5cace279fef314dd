// The inner step of attention: queries against a block of a KV head's keys and values, with an
// online softmax. AVX-512 and AVX2 kernels with register tiles (cpu/avx512/, cpu/avx2/) and a
// portable one compiled for AVX-512, AVX2 and plain x86-64, the active level's chosen at load
// time; all give the same bits (attention_kernels.h). kernels/reference/attention.h is the oracle.
#pragma once

#include <cstdint>

namespace tachyon::kernels {

// Online (flash-style) softmax over a sequence of key/value blocks: each call folds one block
// of `num_positions` positions into a running state, so attention over any context needs
// memory for one block only. For the `group` query heads sharing a KV head:
//   queries:           f32 [group, head_size]
//   keys_by_dimension: f32 [head_size, key_stride] (this block's keys, transposed)
//   values:            f32 [num_positions, head_size]
//   scores:            f32 [group, num_positions] scratch
//   running_max:       f32 [group]             start at -infinity
//   running_sum:       f32 [group]             start at 0
//   accumulator:       f32 [group, head_size]  start at 0 (unnormalised output)
// The result for a query depends only on its own blocks, in order: never on what else is
// being computed, which keeps a request's output the same alone or in a batch.
void attention_block_update(const float* queries, int group, int head_size, float scale,
                            int num_positions, const float* keys_by_dimension, int64_t key_stride,
                            const float* values, float* scores, float* running_max,
                            float* running_sum, float* accumulator);

// attention_block_update for `num_tokens` consecutive tokens that share the block (a prompt's
// tokens against one span of their common context): row r = token * group + head, token i's
// queries at queries + i * token_stride, and token i sees the first visible[i] positions (0:
// none, its state is kept). Each row's result is bit for bit what attention_block_update gives
// it alone; rows are computed 4 at a time so that each key and value vector loaded serves 4.
//   scores:       f32 [num_tokens * group, score_stride] scratch, score_stride >= max visible
//   running_max, running_sum: f32 [num_tokens * group]
//   accumulator:  f32 [num_tokens * group, head_size]
void attention_span_update(const float* queries, int64_t token_stride, int num_tokens, int group,
                           int head_size, float scale, const int* visible,
                           const float* keys_by_dimension, int64_t key_stride,
                           const float* values, float* scores, int64_t score_stride,
                           float* running_max, float* running_sum, float* accumulator);

// attention_span_update with keys and values as f16 bits, read in place from a cache (each
// value widened exactly as it is loaded: the same bits as widening them to f32 first), the
// span's positions in groups of kAttentionGroupPositions, each group anywhere:
//   key_groups[g]:   f16 [head_size, key_stride]: dimension d of the group's positions
//   value_groups[g]: f16 [kAttentionGroupPositions, head_size]
// value_groups null: each position's value is its key (MLA's cached latent, stored once), read
// from the keys (the same bits as values stored apart).
// Only where attention_reads_f16(head_size) holds (the AVX-512 and AVX2 kernels: every head
// size up to 1024 at AVX-512, multiples of 8 at AVX2; f16 keys may be read past the span's
// positions within a group, so each group must have room for all 16); elsewhere callers
// widen and call attention_span_update.
inline constexpr int kAttentionGroupPositions = 16;
bool attention_reads_f16(int head_size);
void attention_span_update_f16(const float* queries, int64_t token_stride, int num_tokens,
                               int group, int head_size, float scale, const int* visible,
                               const uint16_t* const* key_groups, int64_t key_stride,
                               const uint16_t* const* value_groups, float* scores,
                               int64_t score_stride, float* running_max, float* running_sum,
                               float* accumulator);

// Keys and values of a span stored 8-bit (int8 with an f16 scale per 32 dimensions of a
// position: kernels/cpu/convert.h's q8), in groups of kAttentionGroupPositions positions, each
// group anywhere, read in place. Keys are laid out for integer dot products: rows of 4
// dimensions, each position's 4 bytes together (q8_key_index).
// `values` and `value_scales` null: each position's value is its key (MLA's cached latent,
// stored once), read from the keys' layout.
struct Q8SpanGroups {
  const int8_t* const* keys;            // per group: int8 [head_size / 4, key_stride, 4]
  const uint16_t* const* key_scales;    // per group: f16 [head_size / 32, key_stride]
  int64_t key_stride;                   // positions per row, >= kAttentionGroupPositions
  const int8_t* const* values;          // per group: int8 [kAttentionGroupPositions, head_size]
  const uint16_t* const* value_scales;  // per group: f16 [kAttentionGroupPositions, head_size / 32]
};

// Where dimension d of position p (of a row of `stride` positions) lies in q8 keys.
inline int64_t q8_key_index(int p, int d, int64_t stride) {
  return (d / 4) * stride * 4 + static_cast<int64_t>(p) * 4 + d % 4;
}

// Query rows quantized for q8 scores, as llama.cpp does for q8_0 caches: each row times the
// softmax scale, then per 32 dimensions an f32 scale d = max|x| / 127 and int8 round(x / d)
// (halves to even). Computed once per run of tokens and reused for all its spans.
//   values: int8 [num_tokens * group, head_size] (row = token * group + head)
//   scales: f32 [num_tokens * group, head_size / 32]
struct Q8Queries {
  const int8_t* values;
  const float* scales;
};
// Token i's `group` query heads at queries + i * token_stride.
void quantize_queries_q8(const float* queries, int64_t token_stride, int num_tokens, int group,
                         int head_size, float scale, int8_t* values, float* scales);

// attention_span_update over a q8 span for quantized queries: scores from exact integer dot
// products per 32 dimensions, score = sum over the groups, in order, of
// fma(dot, query scale * key scale, score); values widened exactly (q * scale) as they are
// loaded. The same bits at every level (AVX-512 VNNI, AVX2, portable), for every path (decode
// tokens and prompt chunks read the same way). Head sizes: multiples of 32 up to 1024.
bool attention_reads_q8(int head_size);
void attention_span_update_q8(const Q8Queries& queries, int num_tokens, int group, int head_size,
                              const int* visible, const Q8SpanGroups& span, float* scores,
                              int64_t score_stride, float* running_max, float* running_sum,
                              float* accumulator);

// out = accumulator / running_sum, per head. out: f32 [group, head_size]
void attention_finish(const float* accumulator, const float* running_sum, int group,
                      int head_size, float* out);

}  // namespace tachyon::kernels

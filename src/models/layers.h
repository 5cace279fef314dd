// Building blocks shared by decoder architectures: normalisation, the gated FFN activation and
// causal attention over a sequence's KV cache.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kv_cache/kv_cache.h"

namespace tachyon {

// out = x / sqrt(mean(x²) + eps) * weight, for one vector of `size` floats.
void rms_norm(const float* x, const float* weight, int size, float eps, float* out);

// out = silu(gate) * up, element-wise (SwiGLU).
void swiglu(const float* gate, const float* up, int64_t size, float* out);

// x += y
void add_in_place(float* x, const float* y, int64_t size);

struct AttentionShape {
  int num_heads;     // query heads
  int num_kv_heads;  // key/value heads; query head h reads kv head h / (num_heads/num_kv_heads)
  int head_size;
  float scale;       // usually 1/sqrt(head_size)
};

// For each of `num_tokens` queries (token t sits at position start_position + t and sees
// positions 0..start_position + t), softmax(q·K/scale)·V with an online softmax, so no score
// matrix is ever built.
// queries: f32 [num_tokens, num_heads * head_size]
// `layer` of `cache` already holds this batch's keys and values; the arithmetic is f32
// out: f32 [num_tokens, num_heads * head_size]
void causal_attention(const AttentionShape& shape, const float* queries, int num_tokens,
                      int start_position, const KvCache& cache, int layer, float* out,
                      ThreadPool& pool);

}  // namespace tachyon

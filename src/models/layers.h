// Building blocks shared by decoder architectures: causal attention over a sequence's KV cache
// (and, from kernels/, normalisation, the gated FFN activation and residual adds).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/elementwise.h"
#include "kv_cache/kv_cache.h"
#include "kv_cache/paged_kv_cache.h"
#include "models/forward_batch.h"

namespace tachyon {

// The element-wise blocks (RMSNorm, SwiGLU, residual adds) are kernels.
using kernels::add_in_place;
using kernels::rms_norm;
using kernels::swiglu;

struct AttentionShape {
  int num_heads;     // query heads
  int num_kv_heads;  // key/value heads; query head h reads kv head h / (num_heads/num_kv_heads)
  int head_size;
  float scale;       // usually 1/sqrt(head_size)
  // Sliding-window (local) attention: the token at position p sees only positions
  // p - window + 1 .. p. 0: every earlier position.
  int window = 0;
};

// For each of `num_tokens` queries (token t sits at position start_position + t and sees
// positions 0..start_position + t, or its shape.window last ones), softmax(q·K·scale)·V, keeping one row of scores per query
// (memory grows with the context, never with tokens × context).
// queries: f32 [num_tokens, num_heads * head_size]
// `layer` of `cache` already holds this batch's keys and values; the arithmetic is f32
// out: f32 [num_tokens, num_heads * head_size]
void causal_attention(const AttentionShape& shape, const float* queries, int num_tokens,
                      int start_position, const KvCache& cache, int layer, float* out,
                      ThreadPool& pool);

// The same computed as llama.cpp computes it (kernels::llamacpp::attention_row: one
// online-softmax pass per query row and head, f16 accumulation); needs an f16 cache to match.
void causal_attention_llamacpp(const AttentionShape& shape, const float* queries, int num_tokens,
                               int start_position, const KvCache& cache, int layer, float* out,
                               ThreadPool& pool);

// The same for a batch of sequences whose keys and values live in a paged cache: each
// sequence's new tokens attend over its own blocks with an online softmax, one block at a time
// (no padding between sequences, no tokens × context matrix). `layer` of `cache` already holds
// this batch's keys and values. A token's result depends only on its own sequence.
// queries, out: f32 [batch.num_tokens(), num_heads * head_size]
void paged_attention(const AttentionShape& shape, const float* queries, const ForwardBatch& batch,
                     const PagedKvCache& cache, int layer, float* out, ThreadPool& pool);

}  // namespace tachyon

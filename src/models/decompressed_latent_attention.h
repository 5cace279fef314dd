// MLA attention the way the model was trained (DeepSeek-V2 §2.1.2): each head's keys and values
// decompressed from the cached latents (k_nope = W_UK c, v = W_UV c, the rotary key part shared
// by the heads), then ordinary causal attention. The absorbed form that decoding uses scores
// and sums in the 512-wide latent space instead: 1,088 multiply-adds per head and (query,
// position) pair against 192 + 128 here, but nothing per cached position, where this path
// decompresses every position again on every call. So this one pays off for long runs of new
// tokens (a long prompt's chunks: DecoderModel::decompresses measures the costs); ik_llama.cpp's
// MLA mode 3 makes the same choice.
//
// Built from the matmul kernels (every level) and scaled_softmax: scores = K_h · q per query
// block (keys up to the block's last visible one), softmax over each row's visible positions,
// outputs = V_hᵀ · p with the rows' later positions zero. A token's result depends only on its
// own sequence's latents, not on how its run was cut into calls: the matmuls give each (row,
// column) the same bits however many rows or tokens share a call, and the values' sum runs
// over positions padded with zeros to kPositionPad (a token later in a run, or in a later
// call, adds only zeros after its own).
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned_allocator.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "models/model_config.h"

namespace tachyon {

class DecompressedLatentAttention {
 public:
  // The positions' count the values' sum runs over is rounded up to this (zeros after).
  static constexpr int kPositionPad = 64;

  // What run() reads: one sequence's new tokens and the layer's cached latents.
  struct Run {
    int num_tokens = 0;      // new tokens, at positions start_position..
    int start_position = 0;  // each token sees positions 0 .. its own
    // f32 [start_position + num_tokens, latent_size]: the layer's cached rows (normalized
    // latent, then the rotated shared key part), as attention reads them.
    const float* latents = nullptr;
    // Token t's head h query: its nope part (qk_nope_head_dim) at
    // nope_queries + t * nope_stride + h * nope_head_stride, its rotated part
    // (qk_rope_head_dim) at rotary_queries + t * rotary_stride + h * rotary_head_stride.
    const float* nope_queries = nullptr;
    int64_t nope_stride = 0;
    int64_t nope_head_stride = 0;
    const float* rotary_queries = nullptr;
    int64_t rotary_stride = 0;
    int64_t rotary_head_stride = 0;
    // Token t's head h output (v_head_dim) goes to out + t * out_stride + h * v_head_dim.
    float* out = nullptr;
    int64_t out_stride = 0;
  };

  // `key_up[h]`: W_UK of head h, f32 [qk_nope_head_dim, kv_lora_rank]; `value_up[h]`: W_UV,
  // [v_head_dim, kv_lora_rank] in any matmul type; heads [first_head, first_head + heads).
  void run(const LatentAttentionConfig& mla, const std::vector<kernels::WeightMatrix>& key_up,
           const std::vector<kernels::WeightMatrix>& value_up, int first_head, int heads,
           float scale, const Run& run, ThreadPool& pool);

  // Multiply-adds per head of a run of `num_tokens` new tokens after `start_position` cached
  // ones, and of the absorbed form over the same run (DecoderModel's choice between them).
  static double multiply_adds(const LatentAttentionConfig& mla, int start_position,
                              int num_tokens);
  static double absorbed_multiply_adds(const LatentAttentionConfig& mla, int start_position,
                                       int num_tokens);

 private:
  AlignedVector<float> latents_;        // f32 [padded positions, kv_lora_rank], zero rows after
  AlignedVector<float> keys_;           // f32 [positions, qk_head_dim] of one head
  AlignedVector<float> values_;         // f32 [positions, v_head_dim] of one head
  AlignedVector<float> values_by_dim_;  // f32 [v_head_dim, padded positions], zeros after
  AlignedVector<float> queries_;        // f32 [block tokens, qk_head_dim]
  AlignedVector<float> scores_;         // f32 [block tokens, block positions]
  AlignedVector<float> weights_;        // f32 [block tokens, padded positions]: softmax rows
  AlignedVector<float> outputs_;        // f32 [block tokens, v_head_dim]
};

}  // namespace tachyon

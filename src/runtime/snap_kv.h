// SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation"): a long
// prompt's KV cache compressed to a budget of positions per KV head, keeping those that the
// prompt's last tokens (the observation window) attend to most, smoothed over neighbouring
// positions, plus the window itself. Each head keeps its own positions; all keep as many, so
// the compacted cache is an ordinary cache of `budget` positions whose keys carry their
// original rotations: decoding goes on with RoPE positions offset by what was dropped
// (DecoderModel::forward's position_offset).
//
// Sliding-window layers (Gemma 3's local ones, every Mistral layer) keep the most recent
// positions instead: once at least window - 1 of them follow the shared prefix, the cache
// distance between a later token and every position it may see is the true one, and every
// position it may not see is at least a window away, so those layers attend exactly as
// before. A compaction that could not leave that many keeps every position (none happens).
#pragma once

#include <vector>

#include "core/function_ref.h"
#include "core/status.h"
#include "kv_cache/kv_cache.h"
#include "models/decoder_model.h"

namespace tachyon {

struct SnapKvOptions {
  int budget = 1024;    // positions kept per KV head, the window included
  int window = 32;      // the prompt's last tokens, whose attention scores the rest
  int pool_kernel = 7;  // positions averaged around each score (odd)
};

// Positions kept: [layer][kv_head] -> ascending positions, as many for every head.
using KeptPositions = std::vector<std::vector<std::vector<int>>>;

class SnapKvScorer {
 public:
  // For a prompt of `length` tokens, computed into a cache in any chunks; the model must be a
  // Llama-family one (not MLA) and the budget at least the observation window.
  SnapKvScorer(const DecoderModel& model, int length, SnapKvOptions options);

  // Reads a layer's KV head's keys of positions [0, count), transposed: f32 [head_size, count]
  // (row d = dimension d of every position).
  using KeyReader = FunctionRef<void(int kv_head, int count, float* keys_by_dimension)>;

  // DecoderModel's observer for the prompt's tokens [start_position, + num_tokens) (queries:
  // f32 [num_tokens, q_size]): adds the attention each window token pays to earlier positions.
  void observe(int layer, int start_position, const float* queries, int num_tokens,
               KeyReader read_keys);
  // The same, keys read from a contiguous cache.
  void observe(const KvCache& cache, int start_position, int layer, const float* queries,
               int num_tokens);

  // What each layer's KV heads keep: options.budget positions (all, when the prompt is not
  // longer than that). Positions before `first_scored` (a prefix shared with other requests)
  // are all kept and count against the budget. Sliding-window layers: the prefix and then the
  // most recent positions (see above).
  KeptPositions kept_positions(int first_scored = 0) const;

 private:
  AttentionShape shape_;
  int num_layers_;
  std::vector<bool> local_;  // [layer] a sliding-window layer
  int sliding_window_;
  int length_;
  SnapKvOptions options_;
  int scored_;                // positions scored: those before the window
  std::vector<double> scores_;  // [layers, kv_heads, scored_] attention received
};

// Whether SnapKV can run on `config` with `budget` positions per KV head: at least 64, not MLA
// (one latent per token), and on sliding-window models at least the window (their local
// layers keep their recent positions, and need the whole window of them).
Status check_snapkv_budget(const ModelConfig& config, int budget);

// The most recent `budget` positions of every head (what SnapKV is measured against).
KeptPositions recent_positions(int num_layers, int num_kv_heads, int length, int budget);

// Compacts every layer of `cache` to `kept`: afterwards it holds kept[0][0].size() positions.
void compact_cache(KvCache& cache, const KeptPositions& kept);

}  // namespace tachyon

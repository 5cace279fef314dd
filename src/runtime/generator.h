// One sequence at a time: prompt in, tokens out, streamed as text. Keeps the KV cache of the
// last sequence so that a follow-up prompt sharing its start (the next turn of a chat) only
// computes what is new. Used by `generate`, `chat` and `bench`; the serving engine batches
// many sequences instead.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "kv_cache/kv_cache.h"
#include "models/decoder_model.h"
#include "runtime/draft_model_runner.h"
#include "runtime/mtp_runner.h"
#include "runtime/snap_kv.h"
#include "sampling/sampler.h"
#include "sampling/stop_condition.h"
#include "speculative/speculative_options.h"
#include "speculative/step_cost_model.h"
#include "speculative/suffix_cache.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

struct GenerationOutput {
  std::vector<TokenId> tokens;  // generated ids, the finishing one included
  std::string text;             // what was streamed, stop strings excluded
  FinishReason finish_reason = FinishReason::kNone;  // kNone when cancelled
  bool cancelled = false;
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;   // reused from the previous sequence's cache
  int dropped_tokens = 0;         // with sink: cut from the prompt or dropped from the cache
  double prompt_seconds = 0;      // computing the prompt (and the first token's logits)
  double generation_seconds = 0;  // the rest
  // Speculative decoding: drafts verified, their tokens, and of those the accepted ones.
  int drafts = 0;
  int draft_tokens = 0;
  int accepted_draft_tokens = 0;
};

class Generator {
 public:
  // `context_size` tokens of KV cache (≤ the model's context length) are allocated up front.
  Generator(DecoderModel& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
            int batch_size = 512, DType cache_type = DType::kF16);

  // Generates after `prompt` until a stop condition, max_tokens, a full context, or `cancel`
  // becomes true. `on_text` receives each piece of final text as soon as it is known.
  // With a `constraint` (a grammar: JSON schema, regex...) every token is one it allows; a
  // grammar that allows nothing at some point is an error.
  Result<GenerationOutput> generate(std::span<const TokenId> prompt, const SamplingParams& params,
                                    const std::function<void(std::string_view)>& on_text,
                                    const std::atomic<bool>* cancel = nullptr,
                                    TokenConstraint* constraint = nullptr);

  // Speculative decoding for the next generate() calls (off by default). The tokens are the
  // same either way: each draft is checked by sampling its position exactly as a plain step
  // would. With kSuffix the drafts may also come from earlier sequences of this generator
  // (earlier turns of a chat); kDraft needs `draft` (which must outlive the generator).
  Status set_speculation(const SpeculativeOptions& options, DraftModelRunner* draft = nullptr);

  // The "sink" context policy (StreamingLLM) for the next generate() calls: instead of
  // stopping at a full context, the first kSinkTokens tokens and a recent window stay in the
  // cache, older tokens are dropped an eighth of the window at a time and the rest's keys
  // turned back (DecoderModel::shift_keys), so generation runs on in bounded memory. A prompt
  // longer than the window is cut to its first kSinkTokens and its last tokens. Speculation
  // is off while it is on.
  void set_sink(bool on) { sink_ = on; }
  static constexpr int kSinkTokens = 4;

  // SnapKV (runtime/snap_kv.h) for the next generate() calls: a prompt longer than `budget`
  // tokens keeps that many positions per KV head once computed. 0: off. Not with sink.
  void set_snapkv(int budget) { snapkv_budget_ = budget; }
  // The sink policy and SnapKV in one process; SnapKV's budget (check_snapkv_budget).
  Status check_cache_policies() const;

  // Computes the prompt only (no sampling) and returns the last position's logits.
  Result<std::span<const float>> prefill(std::span<const TokenId> prompt);

  int context_size() const { return cache_.capacity(); }
  // Tokens whose keys and values the cache holds, in order.
  const std::vector<TokenId>& cached_tokens() const { return cached_tokens_; }
  void forget_cache() { cached_tokens_.clear(); }

  // End-of-generation tokens: those the vocabulary names (eos, eot, eom) and control tokens
  // spelled like the usual end markers.
  static std::vector<TokenId> end_of_generation_tokens(const Vocabulary& vocabulary);

 private:
  // Runs the tokens not cached yet through the model in batches; logits_ then holds the last
  // `num_logits` tokens' logits (which must all be in the last batch). `scorer`: SnapKV's,
  // observing every batch.
  Status extend(std::span<const TokenId> tokens, int num_logits = 1,
                SnapKvScorer* scorer = nullptr);

  DecoderModel& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  int batch_size_;
  KvCache cache_;
  std::vector<TokenId> cached_tokens_;
  std::vector<float> logits_;  // f32 [num_logits, vocab] of the last computed tokens
  std::vector<TokenId> end_of_generation_;
  int last_reused_tokens_ = 0;  // prompt tokens the last prefill took from the cache
  SpeculativeOptions speculation_;
  std::unique_ptr<SuffixCache> suffix_cache_;  // earlier sequences, with kSuffix
  StepCostModel step_cost_;  // seconds per forward pass, by tokens (how many drafts pay off)
  DraftModelRunner* draft_ = nullptr;  // kDraft
  std::unique_ptr<MtpRunner> mtp_;      // kMtp: the model's MTP layer, and what it has not seen:
  std::vector<float> mtp_hidden_;       // f32 [rows, hidden] final hidden states since it last ran
  int mtp_first_ = 0;                   // of positions mtp_first_..
  bool sink_ = false;
  int snapkv_budget_ = 0;
  // After SnapKV: token i (past the compacted prompt) sits at cache position i - this; the
  // cache no longer follows cached_tokens_ position by position before it.
  int position_offset_ = 0;
  // With sink: tokens dropped at once when the cache is full.
  int sink_drop_chunk() const { return std::max(16, (context_size() - kSinkTokens) / 8); }
  // With sink: drops a chunk after the sink tokens from the cache and from `view` (what the
  // cache holds, plus the token about to be computed).
  void drop_for_sink(std::vector<TokenId>& view, int& dropped);
};

}  // namespace tachyon

// Speculative decoding with a draft model: a smaller (or lower-bit) model of the same
// vocabulary guesses each sequence's next tokens greedily, and the target verifies them.
// The draft runs on the engine thread between target steps, with its own paged KV cache and
// block pool; for each sequence it keeps the tokens its cache holds, and before drafting it
// rolls back to where they still agree with the sequence (the target rejected the rest) and
// computes what is new (the prompt the first time; then the accepted tokens and the target's
// own token), all sequences in one batch, then k - 1 single-token passes for k guesses.
// Not thread-safe: the engine thread (or the Generator) owns it.
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "kv_cache/kv_block_pool.h"
#include "kv_cache/paged_kv_cache.h"
#include "models/decoder_model.h"
#include "models/forward_batch.h"
#include "speculative/step_cost_model.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {

class DraftModelRunner {
 public:
  // Fails when the vocabularies differ (the message says how) or the cache cannot be
  // reserved. `num_blocks` blocks of `block_size` tokens; `model` and `pool` must outlive it.
  static Result<std::unique_ptr<DraftModelRunner>> create(DecoderModel& model,
                                                          const Tokenizer& draft_tokenizer,
                                                          const DecoderModel& target,
                                                          const Tokenizer& target_tokenizer,
                                                          ThreadPool& pool, int num_blocks,
                                                          int block_size, DType cache_type);

  // The same token ids must mean the same text: sizes and every token's text are compared.
  static Status check_vocabularies(const Vocabulary& draft, const Vocabulary& target);

  struct Job {
    uint64_t id;                       // the sequence (its state is kept between calls)
    std::span<const TokenId> tokens;   // all its known tokens
    int max_tokens;                    // most guesses wanted (≥ 1)
    std::vector<TokenId>* out;         // replaced by the guesses (empty if none)
  };
  // Guesses up to `length` tokens for each job (fewer where its max_tokens says so), all jobs
  // batched. A job whose cache blocks cannot be had gets no guesses (and loses its state).
  Status propose(std::vector<Job>& jobs, int length);
  // Forgets a sequence and frees its blocks.
  void release(uint64_t id);

  // Seconds of one draft pass over `num_sequences` sequences: measured once passes of that
  // size ran; before that the target's cost for as many tokens scaled by the two models'
  // decode bytes (a decode pass is bound by reading the weights).
  double pass_seconds(int num_sequences, const StepCostModel& target) const;
  int num_free_blocks() const { return blocks_.num_available(); }

 private:
  DraftModelRunner(DecoderModel& model, ThreadPool& pool, std::unique_ptr<PagedKvCache> cache,
                   double relative_cost)
      : model_(model),
        pool_(pool),
        cache_(std::move(cache)),
        blocks_(cache_->num_blocks(), /*enable_prefix_cache=*/false),
        relative_cost_(relative_cost) {}

  struct Sequence {
    std::vector<TokenId> cached;  // tokens whose keys and values the draft cache holds
    std::vector<BlockId> blocks;
  };
  // Cuts `sequence` back to `num_tokens` cached tokens, freeing blocks past them.
  void truncate(Sequence& sequence, int num_tokens);
  // Runs batch_ and stores each sequence's greedy next token in `next`.
  Status run_batch(std::vector<TokenId>& next);

  DecoderModel& model_;
  ThreadPool& pool_;
  std::unique_ptr<PagedKvCache> cache_;
  KvBlockPool blocks_;
  std::unordered_map<uint64_t, Sequence> sequences_;
  ForwardBatch batch_;
  std::vector<float> logits_;
  double relative_cost_;     // the draft's decode weight bytes / the target's
  StepCostModel step_cost_;  // the draft's decode passes, by sequences
};

}  // namespace tachyon

// Speculative decoding with the model's own multi-token prediction layer (DeepSeek-V3's NextN,
// DecoderModel::forward_mtp_batch). The MTP layer's entry at position p reads the trunk's final
// hidden state at p and the token at p + 1, and guesses the token at p + 2; it attends over the
// entries before it in a paged cache of its own (one layer). After every engine step the runner
// is handed each MTP sequence's hidden states from that step: the entries whose tokens are now
// final are computed (all sequences in one batch), and the last one's logits give the first
// guess. Further guesses chain the layer on its own output hidden state in place of the trunk's
// (as serving engines run a one-layer MTP for longer drafts); those entries are scratch, written
// over by the real ones later. A sequence's entries start where the trunk first computed it
// (positions served from the prefix cache have no hidden state), so their attention may see a
// shorter history; guesses only decide speed, never the output.
// Not thread-safe: the engine thread owns it.
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
#include "tokenizer/vocabulary.h"

namespace tachyon {

class MtpRunner {
 public:
  // Fails when the model has no MTP layer or the cache cannot be reserved. `num_blocks` blocks
  // of `block_size` positions; `model` must outlive it.
  static Result<std::unique_ptr<MtpRunner>> create(DecoderModel& model, ThreadPool& pool,
                                                   int num_blocks, int block_size,
                                                   DType cache_type);

  struct Job {
    uint64_t id;                      // the sequence (its state is kept between calls)
    std::span<const TokenId> tokens;  // all its tokens, final (accepted drafts included)
    int first_position;               // the first position the trunk computed this step
    const float* hidden;              // f32 [num_rows, hidden]: the trunk's final hidden states
    int num_rows;                     // of positions first_position.. (drafts included)
    int max_tokens;                   // most guesses wanted (0: none, catch up only)
    std::vector<TokenId>* out;        // replaced by the guesses (empty if none)
  };
  // Computes each job's entries whose tokens are final and guesses up to `length` tokens for
  // the jobs that want them, all jobs batched. A job whose blocks cannot be had loses its
  // state and gets no guesses.
  Status advance(std::vector<Job>& jobs, int length);
  // Forgets a sequence and frees its blocks.
  void release(uint64_t id);

  // Seconds of one MTP pass over `num_sequences` sequences: measured once passes of that size
  // ran; before that the target's cost scaled by the layer's share of the decode bytes.
  double pass_seconds(int num_sequences, const StepCostModel& target) const;

 private:
  MtpRunner(DecoderModel& model, ThreadPool& pool, std::unique_ptr<PagedKvCache> cache,
            double relative_cost)
      : model_(model),
        pool_(pool),
        cache_(std::move(cache)),
        blocks_(cache_->num_blocks(), /*enable_prefix_cache=*/false),
        relative_cost_(relative_cost) {}

  struct Sequence {
    int base = 0;    // the position of its first entry (slot 0)
    int entries = 0;  // real entries: positions base .. base + entries - 1
    std::vector<BlockId> blocks;
  };
  // Makes room for `slots` slots; false (state released) when blocks run out.
  bool reserve(uint64_t id, Sequence& sequence, int slots);
  // Adds one entry to batch_: `token` at `position`, its input hidden row `hidden`.
  void add_entry(const Sequence& sequence, TokenId token, int position, const float* hidden,
                 bool wants_logits);
  // Runs batch_ (inputs in hidden_in_) and stores the greedy guess of each logits row in `next`.
  Status run_batch(std::vector<TokenId>& next);

  DecoderModel& model_;
  ThreadPool& pool_;
  std::unique_ptr<PagedKvCache> cache_;
  KvBlockPool blocks_;
  std::unordered_map<uint64_t, Sequence> sequences_;
  ForwardBatch batch_;
  std::vector<float> hidden_in_;   // f32 [batch tokens, hidden]: each entry's input hidden row
  std::vector<float> hidden_out_;  // f32 [logits rows, hidden]: the layer's output, for chaining
  std::vector<float> logits_;
  double relative_cost_;
  StepCostModel step_cost_;
};

}  // namespace tachyon

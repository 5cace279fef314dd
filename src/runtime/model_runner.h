// Turns a SchedulerOutput into a ForwardBatch (flat tokens, positions, cache slots, block
// tables), runs the model over it and hands back one row of logits per request that samples
// its next token this step.
#pragma once

#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kv_cache/paged_kv_cache.h"
#include "models/decoder_model.h"
#include "models/forward_batch.h"
#include "scheduler/scheduler_output.h"

namespace tachyon {

class ModelRunner {
 public:
  ModelRunner(DecoderModel& model, PagedKvCache& cache, ThreadPool& pool)
      : model_(model), cache_(cache), pool_(pool) {}

  // Runs the step (its cache moves first: block copies, then key shifts). On success, logits rows come in `output.scheduled` order: for each request
  // with samples_next_token set, one row for its last known token, then one per draft token.
  // `observer` sees each layer's queries (DecoderModel::forward_batch), in batch() order.
  // `final_hidden`, when given, gets every batch token's final hidden state (MTP's input).
  Status execute(const SchedulerOutput& output,
                 const DecoderModel::AttentionObserver* observer = nullptr,
                 std::vector<float>* final_hidden = nullptr);
  // The batch the last execute() ran.
  const ForwardBatch& batch() const { return batch_; }
  std::span<float> logits_for(int k) {
    const size_t vocab = model_.config().vocab_size;
    return std::span<float>(logits_.data() + k * vocab, vocab);
  }

 private:
  DecoderModel& model_;
  PagedKvCache& cache_;
  ThreadPool& pool_;
  ForwardBatch batch_;          // reused between steps
  std::vector<float> logits_;   // f32 [sampling rows, vocab]
};

}  // namespace tachyon

#include "runtime/model_runner.h"

namespace tachyon {

Status ModelRunner::execute(const SchedulerOutput& output,
                            const DecoderModel::AttentionObserver* observer,
                            std::vector<float>* final_hidden) {
  ForwardBatch& batch = batch_;
  const int block_size = cache_.block_size();
  batch.block_size = block_size;
  batch.block_copies = output.block_copies;
  batch.key_shifts = output.key_shifts;
  batch.tokens.clear();
  batch.positions.clear();
  batch.slots.clear();
  batch.local_slots.clear();
  batch.logits_tokens.clear();
  const bool local_layers = cache_.has_local_layers();
  batch.sequences.resize(output.scheduled.size());
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledRequest& item = output.scheduled[i];
    const Request& request = *item.request;
    BatchSequence& sequence = batch.sequences[i];
    sequence.first_token = batch.num_tokens();
    sequence.num_tokens = item.num_new_tokens;
    // Cache positions are token positions less what SnapKV dropped (the keys kept carry their
    // own rotations: new tokens keep their true RoPE positions).
    sequence.start_position = request.num_computed_slots();
    sequence.block_table = request.blocks;
    if (local_layers) sequence.local_block_table = request.local_blocks;
    for (int t = 0; t < item.num_new_tokens; ++t) {
      const int position = request.num_computed_tokens + t;
      // Past the known tokens come the drafts being verified.
      batch.tokens.push_back(position < request.num_tokens()
                                 ? request.tokens[position]
                                 : request.draft_tokens[position - request.num_tokens()]);
      batch.positions.push_back(position);
      const int slot = position - request.slot_offset;
      batch.slots.push_back(static_cast<int64_t>(request.blocks[slot / block_size]) *
                                block_size + slot % block_size);
      if (local_layers) {
        batch.local_slots.push_back(static_cast<int64_t>(request.local_blocks[slot / block_size]) *
                                        block_size + slot % block_size);
      }
    }
    if (item.samples_next_token) {
      // The last known token's logits, then each draft's (what follows it, if it is right).
      for (int t = item.num_draft_tokens; t >= 0; --t) {
        batch.logits_tokens.push_back(batch.num_tokens() - 1 - t);
      }
    }
  }
  return model_.forward_batch(batch, cache_, pool_, logits_, observer, final_hidden);
}

}  // namespace tachyon

#include "runtime/mtp_runner.h"

#include <algorithm>

#include "runtime/draft_pass.h"

namespace tachyon {

Result<std::unique_ptr<MtpRunner>> MtpRunner::create(DecoderModel& model, ThreadPool& pool,
                                                     int num_blocks, int block_size,
                                                     DType cache_type) {
  const ModelConfig& config = model.config();
  if (config.num_mtp_layers == 0) {
    return invalid_argument(
        "speculative mode 'mtp' needs a model with a multi-token prediction layer (DeepSeek-V3's "
        "NextN, GGUF key nextn_predict_layers); this model has none: use ngram, suffix or draft");
  }
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvCache> cache,
                           model.make_mtp_cache(num_blocks, block_size, cache_type));
  // A pass reads about one layer's weights and the head (decode is bound by reading them).
  const DecoderWeights& weights = model.weights();
  const double total = std::max(1.0, weights.decode_weight_bytes());
  const kernels::WeightMatrix& head = weights.mtp_layers[0].head;
  const double layer_bytes = total / std::max(1, config.num_layers) +
                             static_cast<double>(head.rows) * static_cast<double>(head.row_bytes());
  return std::unique_ptr<MtpRunner>(
      new MtpRunner(model, pool, std::move(cache), std::min(1.0, layer_bytes / total)));
}

double MtpRunner::pass_seconds(int num_sequences, const StepCostModel& target) const {
  if (step_cost_.measured(num_sequences)) return step_cost_.seconds(num_sequences);
  return target.seconds(num_sequences) * relative_cost_;
}

void MtpRunner::release(uint64_t id) {
  auto found = sequences_.find(id);
  if (found == sequences_.end()) return;
  blocks_.release(found->second.blocks);
  sequences_.erase(found);
}

bool MtpRunner::reserve(uint64_t id, Sequence& sequence, int slots) {
  const int block_size = cache_->block_size();
  const int missing = (slots + block_size - 1) / block_size - static_cast<int>(sequence.blocks.size());
  if (missing <= 0) return true;
  std::optional<std::vector<BlockId>> blocks = blocks_.allocate(missing);
  if (!blocks) {
    release(id);
    return false;
  }
  sequence.blocks.insert(sequence.blocks.end(), blocks->begin(), blocks->end());
  return true;
}

void MtpRunner::add_entry(const Sequence& sequence, TokenId token, int position,
                          const float* hidden, bool wants_logits) {
  const int block_size = cache_->block_size();
  const int slot = position - sequence.base;
  batch_.tokens.push_back(token);
  batch_.positions.push_back(position);
  batch_.slots.push_back(static_cast<int64_t>(sequence.blocks[slot / block_size]) * block_size +
                         slot % block_size);
  const int64_t width = model_.config().hidden_size;
  hidden_in_.insert(hidden_in_.end(), hidden, hidden + width);
  if (wants_logits) batch_.logits_tokens.push_back(batch_.num_tokens() - 1);
}

Status MtpRunner::run_batch(std::vector<TokenId>& next) {
  return run_draft_pass(
      batch_,
      [&] {
        return model_.forward_mtp_batch(0, batch_, hidden_in_.data(), *cache_, pool_, logits_,
                                        &hidden_out_);
      },
      logits_, model_.config().vocab_size, step_cost_, next);
}

Status MtpRunner::advance(std::vector<Job>& jobs, int length) {
  batch_.block_size = cache_->block_size();
  batch_.clear();
  hidden_in_.clear();
  // The real entries whose tokens are final; the last one of a job that wants guesses gives
  // its first.
  std::vector<Job*> guessing;
  for (Job& job : jobs) {
    job.out->clear();
    const int num_tokens = static_cast<int>(job.tokens.size());
    auto [found, inserted] = sequences_.try_emplace(job.id);
    Sequence* sequence = &found->second;
    if (!inserted && job.first_position != sequence->base + sequence->entries) {
      // Not where it left off (recomputed after preemption, or a prefix the trunk skipped):
      // start over from here.
      release(job.id);
      sequence = &sequences_[job.id];
      inserted = true;
    }
    if (inserted) sequence->base = job.first_position;
    // Entry p needs the token at p + 1.
    const int count = std::min(job.num_rows, num_tokens - 1 - job.first_position);
    if (count <= 0) continue;
    const int wanted = std::min(length, job.max_tokens);
    const bool guess = wanted > 0 && job.first_position + count == num_tokens - 1;
    if (!reserve(job.id, *sequence, sequence->entries + count + (guess ? wanted - 1 : 0))) continue;
    BatchSequence batch_sequence;
    batch_sequence.first_token = batch_.num_tokens();
    batch_sequence.num_tokens = count;
    batch_sequence.start_position = sequence->entries;
    batch_sequence.block_table = sequence->blocks;
    batch_.sequences.push_back(std::move(batch_sequence));
    const int64_t width = model_.config().hidden_size;
    for (int i = 0; i < count; ++i) {
      const int position = job.first_position + i;
      add_entry(*sequence, job.tokens[position + 1], position, job.hidden + i * width,
                guess && i == count - 1);
    }
    sequence->entries += count;
    if (guess) {
      job.max_tokens = wanted;
      guessing.push_back(&job);
    }
  }
  if (batch_.tokens.empty()) return Status();
  std::vector<TokenId> next;
  TACHYON_RETURN_IF_ERROR(run_batch(next));
  for (size_t i = 0; i < guessing.size(); ++i) guessing[i]->out->push_back(next[i]);

  // Longer guesses: the layer's output hidden state stands in for the trunk's, one scratch
  // entry per guess after the real ones.
  std::vector<float> previous_hidden;
  for (int step = 1; step < length; ++step) {
    std::vector<Job*> active;
    std::vector<size_t> rows;  // each active job's row in the last pass's hidden_out_
    for (size_t i = 0; i < guessing.size(); ++i) {
      if (static_cast<int>(guessing[i]->out->size()) < guessing[i]->max_tokens) {
        active.push_back(guessing[i]);
        rows.push_back(i);
      }
    }
    if (active.empty()) break;
    previous_hidden.swap(hidden_out_);
    batch_.clear();
    hidden_in_.clear();
    const int64_t width = model_.config().hidden_size;
    for (size_t a = 0; a < active.size(); ++a) {
      Job& job = *active[a];
      const Sequence& sequence = sequences_.at(job.id);
      // The entry at the last token's position (then further on), fed the latest guess.
      const int position = static_cast<int>(job.tokens.size()) - 2 + step;
      BatchSequence batch_sequence;
      batch_sequence.first_token = batch_.num_tokens();
      batch_sequence.num_tokens = 1;
      batch_sequence.start_position = position - sequence.base;
      batch_sequence.block_table = sequence.blocks;
      batch_.sequences.push_back(std::move(batch_sequence));
      add_entry(sequence, job.out->back(), position, previous_hidden.data() + rows[a] * width,
                true);
    }
    TACHYON_RETURN_IF_ERROR(run_batch(next));
    for (size_t a = 0; a < active.size(); ++a) active[a]->out->push_back(next[a]);
    guessing.swap(active);
  }
  return Status();
}

}  // namespace tachyon

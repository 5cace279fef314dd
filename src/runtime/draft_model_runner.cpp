#include "runtime/draft_model_runner.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/draft_pass.h"

namespace tachyon {
namespace {

// Most tokens one catch-up pass computes (a new sequence's whole prompt is split in chunks).
constexpr int kCatchUpChunk = 512;

}  // namespace

Status DraftModelRunner::check_vocabularies(const Vocabulary& draft, const Vocabulary& target) {
  if (draft.tokens.size() != target.tokens.size()) {
    return invalid_argument(fmt::format(
        "the draft model's vocabulary has {} tokens but the model's has {}: a draft model must "
        "share the model's vocabulary",
        draft.tokens.size(), target.tokens.size()));
  }
  for (size_t i = 0; i < draft.tokens.size(); ++i) {
    if (draft.tokens[i] != target.tokens[i]) {
      return invalid_argument(fmt::format(
          "the draft model's token {} is '{}' but the model's is '{}': a draft model must share "
          "the model's vocabulary",
          i, draft.tokens[i], target.tokens[i]));
    }
  }
  return Status();
}

Result<std::unique_ptr<DraftModelRunner>> DraftModelRunner::create(
    DecoderModel& model, const Tokenizer& draft_tokenizer, const DecoderModel& target,
    const Tokenizer& target_tokenizer, ThreadPool& pool, int num_blocks, int block_size,
    DType cache_type) {
  TACHYON_RETURN_IF_ERROR(
      check_vocabularies(draft_tokenizer.vocabulary(), target_tokenizer.vocabulary()));
  const ModelConfig& config = model.config();
  TACHYON_ASSIGN_OR_RETURN(
      std::unique_ptr<PagedKvCache> cache,
      PagedKvCache::create(config.num_layers, config.num_kv_heads, config.head_size, num_blocks,
                           block_size, cache_type, config.kv_values_are_keys()));
  const double relative_cost = static_cast<double>(model.weights().decode_weight_bytes()) /
                               std::max<double>(1, target.weights().decode_weight_bytes());
  return std::unique_ptr<DraftModelRunner>(
      new DraftModelRunner(model, pool, std::move(cache), relative_cost));
}

double DraftModelRunner::pass_seconds(int num_sequences, const StepCostModel& target) const {
  if (step_cost_.measured(num_sequences)) return step_cost_.seconds(num_sequences);
  return target.seconds(num_sequences) * relative_cost_;
}

void DraftModelRunner::release(uint64_t id) {
  auto found = sequences_.find(id);
  if (found == sequences_.end()) return;
  blocks_.release(found->second.blocks);
  sequences_.erase(found);
}

void DraftModelRunner::truncate(Sequence& sequence, int num_tokens) {
  sequence.cached.resize(num_tokens);
  const int block_size = cache_->block_size();
  const size_t needed = static_cast<size_t>((num_tokens + block_size - 1) / block_size);
  if (sequence.blocks.size() > needed) {
    blocks_.release(std::span<const BlockId>(sequence.blocks).subspan(needed));
    sequence.blocks.resize(needed);
  }
}

Status DraftModelRunner::run_batch(std::vector<TokenId>& next) {
  return run_draft_pass(
      batch_, [&] { return model_.forward_batch(batch_, *cache_, pool_, logits_); }, logits_,
      model_.config().vocab_size, step_cost_, next);
}

Status DraftModelRunner::propose(std::vector<Job>& jobs, int length) {
  const int block_size = cache_->block_size();
  batch_.block_size = block_size;
  // Roll back to what still agrees, and reserve blocks for the guesses' keys and values (the
  // last guess is never computed).
  std::vector<Job*> drafting;
  for (Job& job : jobs) {
    job.out->clear();
    const int wanted = std::min(length, job.max_tokens);
    if (wanted <= 0 || job.tokens.empty()) continue;
    Sequence& sequence = sequences_[job.id];
    const size_t limit = std::min(sequence.cached.size(), job.tokens.size() - 1);
    size_t common = 0;
    while (common < limit && sequence.cached[common] == job.tokens[common]) ++common;
    truncate(sequence, static_cast<int>(common));
    const int positions = static_cast<int>(job.tokens.size()) + wanted - 1;
    const int missing = (positions + block_size - 1) / block_size -
                        static_cast<int>(sequence.blocks.size());
    if (missing > 0) {
      std::optional<std::vector<BlockId>> blocks = blocks_.allocate(missing);
      if (!blocks) {
        release(job.id);
        continue;
      }
      sequence.blocks.insert(sequence.blocks.end(), blocks->begin(), blocks->end());
    }
    job.max_tokens = wanted;
    drafting.push_back(&job);
  }
  if (drafting.empty()) return Status();

  // Catch up: compute each sequence's new tokens, a chunk at a time; the pass that reaches a
  // sequence's last token gives its first guess.
  std::vector<TokenId> next;
  std::vector<size_t> pending(drafting.size());
  for (size_t i = 0; i < drafting.size(); ++i) pending[i] = i;
  while (!pending.empty()) {
    batch_.clear();
    std::vector<size_t> finishing;  // jobs whose last token is in this pass (logits order)
    std::vector<size_t> still_pending;
    int budget = kCatchUpChunk;
    for (size_t index : pending) {
      Job& job = *drafting[index];
      Sequence& sequence = sequences_[job.id];
      if (budget <= 0) {
        still_pending.push_back(index);
        continue;
      }
      const int start = static_cast<int>(sequence.cached.size());
      const int remaining = static_cast<int>(job.tokens.size()) - start;
      const int count = std::min(remaining, budget);
      BatchSequence batch_sequence;
      batch_sequence.first_token = batch_.num_tokens();
      batch_sequence.num_tokens = count;
      batch_sequence.start_position = start;
      batch_sequence.block_table = sequence.blocks;
      batch_.sequences.push_back(std::move(batch_sequence));
      for (int t = 0; t < count; ++t) {
        const int position = start + t;
        batch_.tokens.push_back(job.tokens[position]);
        batch_.positions.push_back(position);
        batch_.slots.push_back(static_cast<int64_t>(sequence.blocks[position / block_size]) *
                                   block_size + position % block_size);
        sequence.cached.push_back(job.tokens[position]);
      }
      budget -= count;
      if (count == remaining) {
        batch_.logits_tokens.push_back(batch_.num_tokens() - 1);
        finishing.push_back(index);
      } else {
        still_pending.push_back(index);
      }
    }
    TACHYON_RETURN_IF_ERROR(run_batch(next));
    for (size_t i = 0; i < finishing.size(); ++i) drafting[finishing[i]]->out->push_back(next[i]);
    pending.swap(still_pending);
  }

  // Then one token per pass: each sequence's latest guess goes in, the next comes out.
  for (int step = 1; step < length; ++step) {
    batch_.clear();
    std::vector<Job*> active;
    for (Job* job : drafting) {
      if (static_cast<int>(job->out->size()) >= job->max_tokens) continue;
      Sequence& sequence = sequences_[job->id];
      const TokenId token = job->out->back();
      const int position = static_cast<int>(sequence.cached.size());
      BatchSequence batch_sequence;
      batch_sequence.first_token = batch_.num_tokens();
      batch_sequence.num_tokens = 1;
      batch_sequence.start_position = position;
      batch_sequence.block_table = sequence.blocks;
      batch_.sequences.push_back(std::move(batch_sequence));
      batch_.tokens.push_back(token);
      batch_.positions.push_back(position);
      batch_.slots.push_back(static_cast<int64_t>(sequence.blocks[position / block_size]) *
                                 block_size + position % block_size);
      batch_.logits_tokens.push_back(batch_.num_tokens() - 1);
      sequence.cached.push_back(token);
      active.push_back(job);
    }
    if (active.empty()) break;
    TACHYON_RETURN_IF_ERROR(run_batch(next));
    for (size_t i = 0; i < active.size(); ++i) active[i]->out->push_back(next[i]);
  }
  return Status();
}

}  // namespace tachyon

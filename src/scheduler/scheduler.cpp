#include "scheduler/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace tachyon {

Scheduler::Scheduler(SchedulerConfig config, KvBlockPool& pool) : config_(config), pool_(pool) {}

void Scheduler::add(std::unique_ptr<Request> request) {
  Request* raw = request.get();
  raw->state = RequestState::kWaiting;
  requests_[raw->id] = std::move(request);
  waiting_.insert(raw);
}

Request* Scheduler::find(RequestId id) {
  auto found = requests_.find(id);
  return found == requests_.end() ? nullptr : found->second.get();
}

void Scheduler::remove(RequestId id) {
  Request* request = find(id);
  if (!request) return;
  if (request->state == RequestState::kWaiting) {
    waiting_.erase(request);
  } else {
    running_.erase(std::find(running_.begin(), running_.end(), request));
  }
  pool_.release(request->blocks);
  requests_.erase(id);
}

void Scheduler::preempt(Request* request) {
  running_.erase(std::find(running_.begin(), running_.end(), request));
  pool_.release(request->blocks);
  request->blocks.clear();
  request->num_computed_tokens = 0;
  request->state = RequestState::kWaiting;
  ++request->num_preemptions;
  ++counters_.preemptions;
  waiting_.insert(request);
}

void Scheduler::extend_block_hashes(Request* request, int num_blocks) {
  while (static_cast<int>(request->block_hashes.size()) < num_blocks) {
    const size_t index = request->block_hashes.size();
    const BlockHash& parent = index == 0 ? request->hash_root : request->block_hashes.back();
    std::span<const int32_t> tokens(request->tokens.data() + index * config_.block_size,
                                    config_.block_size);
    request->block_hashes.push_back(BlockHash::chain(parent, tokens));
  }
}

void Scheduler::take_cached_prefix(Request* request) {
  // The last token is always computed: its logits give the first new token.
  const int max_blocks = (request->num_tokens() - 1) / config_.block_size;
  extend_block_hashes(request, max_blocks);
  for (int i = 0; i < max_blocks; ++i) {
    std::optional<BlockId> block = pool_.take_cached(request->block_hashes[i]);
    if (!block) break;
    request->blocks.push_back(*block);
  }
  request->num_computed_tokens = static_cast<int>(request->blocks.size()) * config_.block_size;
}

bool Scheduler::grow_blocks(Request* request, int num_tokens) {
  const int missing = blocks_for(num_tokens) - static_cast<int>(request->blocks.size());
  if (missing <= 0) return true;
  std::optional<std::vector<BlockId>> blocks = pool_.allocate(missing);
  if (!blocks) return false;
  request->blocks.insert(request->blocks.end(), blocks->begin(), blocks->end());
  return true;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput output;
  int budget = config_.max_batch_tokens;
  std::sort(running_.begin(), running_.end(), ServeOrder());

  // Running requests, most urgent first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* request = running_[i];
    const int num_new = std::min(request->num_uncomputed_tokens(), budget);
    if (num_new <= 0) {
      ++i;
      continue;
    }
    bool preempted_self = false;
    while (!grow_blocks(request, request->num_computed_tokens + num_new)) {
      // Make room by preempting the least urgent running request (the last one).
      Request* victim = running_.back();
      output.preempted.push_back(victim->id);
      preempt(victim);
      if (victim == request) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    output.scheduled.push_back(
        {request, num_new, request->num_computed_tokens + num_new == request->num_tokens()});
    budget -= num_new;
    ++i;
  }

  // Waiting requests, in order, while there is room; none are admitted in a step that had to
  // preempt (the pool is full) and none jump ahead of a request that does not fit.
  while (output.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_running_requests) {
    Request* request = *waiting_.begin();
    take_cached_prefix(request);
    const int num_new = std::min(request->num_uncomputed_tokens(), budget);
    if (!grow_blocks(request, request->num_computed_tokens + num_new)) {
      pool_.release(request->blocks);
      request->blocks.clear();
      request->num_computed_tokens = 0;
      break;
    }
    if (!request->admitted_before) {
      request->admitted_before = true;
      request->num_cached_prompt_tokens = request->num_computed_tokens;
      counters_.prefix_queried_tokens += request->num_prompt_tokens;
      counters_.prefix_hit_tokens += request->num_computed_tokens;
    }
    waiting_.erase(waiting_.begin());
    request->state = RequestState::kRunning;
    running_.push_back(request);
    output.scheduled.push_back(
        {request, num_new, request->num_computed_tokens + num_new == request->num_tokens()});
    budget -= num_new;
  }
  output.num_tokens = config_.max_batch_tokens - budget;
  return output;
}

void Scheduler::on_step_done(const SchedulerOutput& output) {
  for (const ScheduledRequest& item : output.scheduled) {
    Request* request = item.request;
    request->num_computed_tokens += item.num_new_tokens;
    TACHYON_CHECK(request->num_computed_tokens <= request->num_tokens());
    const int num_full = request->num_computed_tokens / config_.block_size;
    extend_block_hashes(request, num_full);
    for (int i = 0; i < num_full; ++i) pool_.set_hash(request->blocks[i], request->block_hashes[i]);
  }
}

}  // namespace tachyon

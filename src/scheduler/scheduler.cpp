#include "scheduler/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace tachyon {

Scheduler::Scheduler(SchedulerConfig config, KvBlockPool& pool) : config_(config), pool_(pool) {}

double Scheduler::virtual_time(uint64_t tenant) const {
  auto found = tenants_.find(tenant);
  return found == tenants_.end() ? 0.0 : found->second.virtual_time;
}

bool Scheduler::fairly_before(const Request* a, const Request* b) const {
  if (a->priority != b->priority) return a->priority < b->priority;
  const double time_a = virtual_time(a->tenant), time_b = virtual_time(b->tenant);
  if (time_a != time_b) return time_a < time_b;
  return a->arrival < b->arrival;
}

std::set<Request*, Scheduler::ServeOrder>::iterator Scheduler::next_waiting() {
  auto best = waiting_.begin();
  for (auto it = std::next(best); it != waiting_.end() && (*it)->priority == (*best)->priority;
       ++it) {
    if (fairly_before(*it, *best)) best = it;
  }
  return best;
}

void Scheduler::tenant_arrives(const Request& request) {
  Tenant& tenant = tenants_[request.tenant];
  if (tenant.num_requests++ > 0) return;
  // A tenant that was idle starts level with the least-served active tenant: being away earns
  // no credit to starve the others with later.
  double floor = -1;
  for (const auto& [id, other] : tenants_) {
    if (id != request.tenant && other.num_requests > 0 &&
        (floor < 0 || other.virtual_time < floor)) {
      floor = other.virtual_time;
    }
  }
  tenant.virtual_time = std::max(tenant.virtual_time, floor);
}

void Scheduler::tenant_leaves(const Request& request) {
  auto found = tenants_.find(request.tenant);
  if (found == tenants_.end()) return;
  --found->second.num_requests;
}

void Scheduler::add(std::unique_ptr<Request> request) {
  Request* raw = request.get();
  raw->state = RequestState::kWaiting;
  tenant_arrives(*raw);
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
  tenant_leaves(*request);
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
  // Kept in preemption order: the last one is the least urgent (lowest priority, latest).
  std::sort(running_.begin(), running_.end(), ServeOrder());

  // Running requests: decodes first (one token each, so streams never stall behind a long
  // prompt), then prompt chunks in fair order.
  std::vector<Request*> order(running_.begin(), running_.end());
  std::stable_sort(order.begin(), order.end(), [&](const Request* a, const Request* b) {
    const bool a_decodes = a->num_uncomputed_tokens() <= 1;
    const bool b_decodes = b->num_uncomputed_tokens() <= 1;
    if (a_decodes != b_decodes) return a_decodes;
    return fairly_before(a, b);
  });
  for (Request* request : order) {
    if (budget <= 0) break;
    if (request->state != RequestState::kRunning) continue;  // preempted in this loop
    int num_new = std::min(request->num_uncomputed_tokens(), budget);
    // A prompt chunk leaves half the budget to waiting requests, so a short request is not
    // stuck behind a long prompt.
    if (num_new > 1 && !waiting_.empty() &&
        static_cast<int>(running_.size()) < config_.max_running_requests) {
      num_new = std::max(1, std::min(num_new, (budget + 1) / 2));
    }
    if (num_new <= 0) continue;
    bool preempted_self = false;
    while (!grow_blocks(request, request->num_computed_tokens + num_new)) {
      // Make room by preempting the least urgent running request (the last one).
      Request* victim = running_.back();
      output.preempted.push_back(victim->id);
      preempt(victim);
      // A victim already scheduled this step loses its slot in the batch.
      std::erase_if(output.scheduled, [&](const ScheduledRequest& item) {
        if (item.request != victim) return false;
        budget += item.num_new_tokens;
        return true;
      });
      if (victim == request) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) continue;
    output.scheduled.push_back(
        {request, num_new, request->num_computed_tokens + num_new == request->num_tokens()});
    budget -= num_new;
  }

  // Waiting requests, in order, while there is room; none are admitted in a step that had to
  // preempt (the pool is full) and none jump ahead of a request that does not fit.
  while (output.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_running_requests) {
    auto next = next_waiting();
    Request* request = *next;
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
    waiting_.erase(next);
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
    tenants_[request->tenant].virtual_time += item.num_new_tokens / request->tenant_weight;
    TACHYON_CHECK(request->num_computed_tokens <= request->num_tokens());
    const int num_full = request->num_computed_tokens / config_.block_size;
    extend_block_hashes(request, num_full);
    for (int i = 0; i < num_full; ++i) pool_.set_hash(request->blocks[i], request->block_hashes[i]);
  }
}

}  // namespace tachyon

#include "scheduler/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace tachyon {

Scheduler::Scheduler(SchedulerConfig config, KvBlockPool& pool, KvBlockPool* local_pool)
    : config_(config), pool_(pool), local_pool_(local_pool) {
  TACHYON_CHECK((config_.window > 0) == (local_pool_ != nullptr));
}

double Scheduler::virtual_time(uint64_t tenant) const {
  auto found = tenants_.find(tenant);
  auto charged = step_charge_.find(tenant);
  return (found == tenants_.end() ? 0.0 : found->second.virtual_time) +
         (charged == step_charge_.end() ? 0.0 : charged->second);
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
  tenant.priority = request.priority;
  if (tenant.num_requests++ > 0) return;
  // A tenant that was idle starts a little behind the system's virtual clock: a short burst
  // from a light tenant goes ahead of a heavy tenant's backlog (its first token comes quickly),
  // but being away earns no more credit than that, so on-and-off traffic cannot starve anyone.
  tenant.virtual_time =
      std::max(tenant.virtual_time, virtual_clock_ - config_.burst_credit_tokens);
}

void Scheduler::advance_virtual_clock() {
  // The clock follows the least-served active tenant and never goes back.
  double least = -1;
  for (const auto& [id, tenant] : tenants_) {
    if (tenant.num_requests > 0 && (least < 0 || tenant.virtual_time < least)) {
      least = tenant.virtual_time;
    }
  }
  virtual_clock_ = std::max(virtual_clock_, least);
  // Forget idle tenants that would come back exactly as a new one would (burst_credit_tokens
  // behind the clock), so that the table does not grow with every key ever seen.
  std::erase_if(tenants_, [&](const auto& entry) {
    const Tenant& tenant = entry.second;
    return tenant.num_requests == 0 && !lingers(tenant) &&
           tenant.virtual_time <= virtual_clock_ - config_.burst_credit_tokens;
  });
}

bool Scheduler::lingers(const Tenant& tenant) const {
  return tenant.light_when_left && now_ - tenant.left_at <= config_.tenant_linger_seconds;
}

void Scheduler::tenant_leaves(const Request& request) {
  auto found = tenants_.find(request.tenant);
  if (found == tenants_.end()) return;
  Tenant& tenant = found->second;
  if (--tenant.num_requests > 0) return;
  tenant.left_at = now_;
  tenant.light_when_left = tenant.virtual_time < virtual_clock_;
}

bool Scheduler::yields_to_lighter_tenant(const Request* request) const {
  if (config_.contended_prompt_tokens <= 0) return false;
  const double own = virtual_time(request->tenant);
  for (const auto& [id, tenant] : tenants_) {
    const bool present = tenant.num_requests > 0 || lingers(tenant);
    if (id != request->tenant && present && tenant.priority == request->priority &&
        virtual_time(id) < own) {
      return true;
    }
  }
  return false;
}

void Scheduler::add(std::unique_ptr<Request> request) {
  Request* raw = request.get();
  if (raw->sink_tokens > 0) {
    TACHYON_CHECK(raw->sink_tokens % config_.block_size == 0 &&
                  raw->max_positions >= raw->sink_tokens + 2 * config_.block_size);
    // A prompt longer than the window is cut to its sink and its last tokens, leaving room for
    // a drop chunk of output: computing the middle only to drop it would cost time for every
    // token and change little (streaming a text through the cache is within 1% of recomputing
    // its window: tests/cli/streaming_perplexity_test.py).
    const int keep = raw->max_positions - sink_drop_chunk(*raw);
    if (raw->num_tokens() > keep) {
      const int cut = raw->num_tokens() - keep;
      raw->tokens.erase(raw->tokens.begin() + raw->sink_tokens,
                        raw->tokens.begin() + raw->sink_tokens + cut);
      raw->num_dropped_tokens += cut;
    }
  }
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
  if (local_pool_ != nullptr) local_pool_->release(request->local_blocks);
  tenant_leaves(*request);
  requests_.erase(id);
}

void Scheduler::release_blocks(Request* request) {
  pool_.release(request->blocks);
  request->blocks.clear();
  if (local_pool_ != nullptr) local_pool_->release(request->local_blocks);
  request->local_blocks.clear();
  request->num_computed_tokens = 0;
  request->first_moved_block = -1;
  request->slot_offset = 0;
  request->compacted = false;
  request->num_reused_tokens = 0;
}

void Scheduler::preempt(Request* request) {
  running_.erase(std::find(running_.begin(), running_.end(), request));
  release_blocks(request);
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
    const BlockHash& hash = request->block_hashes[i];
    std::optional<BlockId> block = pool_.take_cached(hash);
    if (!block) {
      if (source_ == nullptr || !source_->has(hash)) break;
      std::optional<std::vector<BlockId>> allocated = pool_.allocate(1);
      if (!allocated) break;
      block = allocated->front();
      std::span<const int32_t> tokens(request->tokens.data() + i * config_.block_size,
                                      config_.block_size);
      if (!source_->fill(hash, tokens, *block, kNoBlock)) {
        pool_.release(*allocated);
        break;
      }
      pool_.set_hash(*block, hash);
      counters_.prefix_source_tokens += config_.block_size;
    }
    request->blocks.push_back(*block);
  }
  if (local_pool_ != nullptr) {
    // The local layers keep only windows: the hit ends where the window before it can be had
    // (from the local pool or the source); a block the source then fails to give ends it there.
    int taken = static_cast<int>(request->blocks.size());
    for (;;) {
      while (taken > 0 && !window_cached(request, taken)) --taken;
      const int failed = take_local_blocks(request, taken);
      if (failed < 0) break;
      taken = failed;
    }
    pool_.release(std::span<const BlockId>(request->blocks).subspan(taken));
    request->blocks.resize(taken);
  }
  request->num_computed_tokens = static_cast<int>(request->blocks.size()) * config_.block_size;
  request->num_reused_tokens = request->num_computed_tokens;
}

bool Scheduler::window_cached(Request* request, int num_blocks) const {
  const int first = first_window_block(num_blocks * config_.block_size);
  for (int i = 0; i < num_blocks; ++i) {
    if (!local_block_wanted(*request, i, first)) continue;
    const BlockHash& hash = request->block_hashes[i];
    if (!local_pool_->contains(hash) && (source_ == nullptr || !source_->has(hash))) return false;
  }
  return true;
}

int Scheduler::take_local_blocks(Request* request, int num_blocks) {
  std::vector<BlockId>& local = request->local_blocks;
  local.clear();
  const int first = first_window_block(num_blocks * config_.block_size);
  for (int i = 0; i < num_blocks; ++i) {
    if (!local_block_wanted(*request, i, first)) {
      local.push_back(kNoBlock);
      continue;
    }
    const BlockHash& hash = request->block_hashes[i];
    std::optional<BlockId> block = local_pool_->take_cached(hash);
    if (!block && source_ != nullptr) {
      std::optional<std::vector<BlockId>> allocated = local_pool_->allocate(1);
      std::span<const int32_t> tokens(request->tokens.data() + i * config_.block_size,
                                      config_.block_size);
      if (allocated && source_->fill(hash, tokens, kNoBlock, allocated->front())) {
        block = allocated->front();
        local_pool_->set_hash(*block, hash);
      } else if (allocated) {
        local_pool_->release(*allocated);
      }
    }
    if (!block) {  // gone since window_cached looked (evicted, or a bad file): give back
      for (BlockId taken : local) {
        if (taken != kNoBlock) local_pool_->release(std::span<const BlockId>(&taken, 1));
      }
      local.clear();
      return i;
    }
    local.push_back(*block);
  }
  return -1;
}

bool Scheduler::grow_blocks(Request* request, int num_tokens) {
  const int needed = blocks_for(num_tokens - request->slot_offset);
  const int missing = needed - static_cast<int>(request->blocks.size());
  std::vector<BlockId> blocks;
  if (missing > 0) {
    std::optional<std::vector<BlockId>> allocated = pool_.allocate(missing);
    if (!allocated) return false;
    blocks = std::move(*allocated);
  }
  if (local_pool_ != nullptr) {
    // Local blocks no token from the first uncomputed one on can see go back (named ones stay
    // in the prefix cache, for a later request's window); the sink's stay. (Blocks hold slots:
    // after SnapKV, positions less what it dropped.)
    std::vector<BlockId>& local = request->local_blocks;
    const int first =
        std::min<int>(first_window_block(request->num_computed_slots()), local.size());
    for (int i = local_sink_blocks(*request); i < first; ++i) {
      if (local[i] == kNoBlock) continue;
      local_pool_->release(std::span<const BlockId>(&local[i], 1));
      local[i] = kNoBlock;
    }
    const int local_missing = needed - static_cast<int>(local.size());
    if (local_missing > 0) {
      std::optional<std::vector<BlockId>> allocated = local_pool_->allocate(local_missing);
      if (!allocated) {
        pool_.release(blocks);
        return false;
      }
      local.insert(local.end(), allocated->begin(), allocated->end());
    }
  }
  request->blocks.insert(request->blocks.end(), blocks.begin(), blocks.end());
  return true;
}

std::optional<Scheduler::CompactionBlocks> Scheduler::blocks_for_compaction(int num_shared_blocks,
                                                                            int num_slots) {
  CompactionBlocks blocks;
  std::optional<std::vector<BlockId>> fresh =
      pool_.allocate(blocks_for(num_slots) - num_shared_blocks);
  if (!fresh) return std::nullopt;
  blocks.fresh = std::move(*fresh);
  if (local_pool_ != nullptr) {
    blocks.first_local_block = first_window_block(num_slots);
    std::optional<std::vector<BlockId>> local =
        local_pool_->allocate(blocks_for(num_slots) - blocks.first_local_block);
    if (!local) {
      pool_.release(blocks.fresh);
      return std::nullopt;
    }
    blocks.local = std::move(*local);
  }
  return blocks;
}

void Scheduler::compact(Request* request, int num_shared_blocks, CompactionBlocks blocks,
                        int num_slots) {
  TACHYON_CHECK(num_slots <= request->num_computed_slots() && request->sink_tokens == 0);
  request->slot_offset += request->num_computed_slots() - num_slots;
  request->compacted = true;
  pool_.release(std::span<const BlockId>(request->blocks).subspan(num_shared_blocks));
  request->blocks.resize(num_shared_blocks);
  request->blocks.insert(request->blocks.end(), blocks.fresh.begin(), blocks.fresh.end());
  if (local_pool_ != nullptr) {
    for (BlockId block : request->local_blocks) {
      if (block != kNoBlock) local_pool_->release(std::span<const BlockId>(&block, 1));
    }
    request->local_blocks.assign(blocks.first_local_block, kNoBlock);
    request->local_blocks.insert(request->local_blocks.end(), blocks.local.begin(),
                                 blocks.local.end());
  }
  request->first_moved_block = num_shared_blocks;
  request->block_hashes.resize(
      std::min<size_t>(request->block_hashes.size(), static_cast<size_t>(num_shared_blocks)));
}

int Scheduler::sink_drop_chunk(const Request& request) const {
  const int block = config_.block_size;
  return std::max(block, (request.max_positions - request.sink_tokens) / 8 / block * block);
}

bool Scheduler::drop_for_sink(Request* request, int num_new, SchedulerOutput& output) {
  const int excess = request->num_computed_tokens + num_new - request->max_positions;
  if (request->sink_tokens == 0 || excess <= 0) return true;
  const int block = config_.block_size;
  const int sink_blocks = request->sink_tokens / block;
  const int droppable = (request->num_computed_tokens - request->sink_tokens) / block * block;
  const int drop = std::min(droppable, std::max(sink_drop_chunk(*request),
                                                (excess + block - 1) / block * block));
  TACHYON_CHECK(drop >= excess);
  auto first = request->blocks.begin() + sink_blocks;
  pool_.release(std::span<const BlockId>(&*first, drop / block));
  request->blocks.erase(first, first + drop / block);
  if (local_pool_ != nullptr) {
    // The local layers' blocks follow (those before the window are already gone).
    std::vector<BlockId>& local = request->local_blocks;
    for (int i = sink_blocks; i < sink_blocks + drop / block; ++i) {
      if (local[i] != kNoBlock) local_pool_->release(std::span<const BlockId>(&local[i], 1));
    }
    local.erase(local.begin() + sink_blocks, local.begin() + sink_blocks + drop / block);
  }
  request->tokens.erase(request->tokens.begin() + request->sink_tokens,
                        request->tokens.begin() + request->sink_tokens + drop);
  request->num_computed_tokens -= drop;
  request->num_dropped_tokens += drop;
  request->first_moved_block = sink_blocks;
  // The moved blocks hold other positions now: they are never named again (they are not what
  // a cold run computes); the sink's are kept.
  request->block_hashes.resize(std::min<size_t>(request->block_hashes.size(), sink_blocks));
  const int computed_blocks = blocks_for(request->num_computed_tokens);
  for (int i = sink_blocks; i < computed_blocks; ++i) {
    const int count = std::min(block, request->num_computed_tokens - i * block);
    if (!move_block(pool_, request->blocks[i], count, drop, false, output)) return false;
    if (local_pool_ != nullptr && request->local_blocks[i] != kNoBlock &&
        !move_block(*local_pool_, request->local_blocks[i], count, drop, true, output)) {
      return false;
    }
  }
  return true;
}

bool Scheduler::move_block(KvBlockPool& pool, BlockId& block_id, int count, int delta,
                           bool local, SchedulerOutput& output) {
  if (pool.reference_count(block_id) > 1) {  // shared: turn a private copy
    std::optional<std::vector<BlockId>> copy = pool.allocate(1);
    if (!copy) return false;
    output.block_copies.push_back({block_id, copy->front(), local});
    pool.release(std::span<const BlockId>(&block_id, 1));
    block_id = copy->front();
  } else {
    pool.forget_hash(block_id);
  }
  output.key_shifts.push_back({block_id, count, delta, local});
  return true;
}

bool Scheduler::schedule_running(Request* request, int num_new, SchedulerOutput& output,
                                 int& budget) {
  if (!drop_for_sink(request, num_new, output)) {
    // No block for a private copy: recompute the request (its tokens are the window) later.
    // The moves it queued touch only blocks it held, now free and unnamed: whoever takes one
    // writes its slots before reading them.
    preempt_for_step(request, output, budget);
    return false;
  }
  while (!grow_blocks(request, request->num_computed_tokens + num_new)) {
    // Make room by preempting the least urgent running request (possibly this one).
    Request* victim = least_urgent_running();
    preempt_for_step(victim, output, budget);
    if (victim == request) return false;
  }
  add_to_step(request, num_new, output, budget);
  return true;
}

void Scheduler::add_to_step(Request* request, int num_new, SchedulerOutput& output, int& budget,
                            int num_drafts) {
  output.scheduled.push_back(
      {request, num_new,
       request->num_computed_tokens + num_new - num_drafts == request->num_tokens(), num_drafts});
  budget -= num_new;
  request->last_scheduled_step = step_;
  step_charge_[request->tenant] += num_new / request->tenant_weight;
}

Request* Scheduler::least_urgent_running() const {
  Request* least = nullptr;
  for (Request* request : running_) {
    if (least == nullptr || ServeOrder()(least, request)) least = request;
  }
  return least;
}

void Scheduler::preempt_for_step(Request* victim, SchedulerOutput& output, int& budget) {
  output.preempted.push_back(victim->id);
  preempt(victim);
  // A victim already scheduled this step loses its place in the batch.
  std::erase_if(output.scheduled, [&](const ScheduledRequest& item) {
    if (item.request != victim) return false;
    budget += item.num_new_tokens;
    step_charge_[victim->tenant] -= item.num_new_tokens / victim->tenant_weight;
    return true;
  });
}

bool Scheduler::admit(Request* request, int budget_share, SchedulerOutput& output, int& budget) {
  const int num_new = std::min(request->num_uncomputed_tokens(), budget_share);
  while (!grow_blocks(request, request->num_computed_tokens + num_new)) {
    // A more urgent request may take the blocks of less urgent running ones.
    Request* victim = least_urgent_running();
    if (victim == nullptr || victim->priority <= request->priority) {
      release_blocks(request);
      return false;
    }
    preempt_for_step(victim, output, budget);
  }
  if (!request->admitted_before) {
    request->admitted_before = true;
    request->num_cached_prompt_tokens = request->num_computed_tokens;
    counters_.prefix_queried_tokens += request->num_prompt_tokens;
    counters_.prefix_hit_tokens += request->num_computed_tokens;
  }
  waiting_.erase(request);
  request->state = RequestState::kRunning;
  running_.push_back(request);
  add_to_step(request, num_new, output, budget);
  return true;
}

SchedulerOutput Scheduler::schedule(double now) {
  now_ = std::max(now_, now);
  SchedulerOutput output;
  int budget = config_.max_batch_tokens;
  ++step_;
  step_charge_.clear();
  std::sort(running_.begin(), running_.end(), ServeOrder());  // decodes go most urgent first

  // 1. Decodes first, one token each, most urgent first: streams never stall behind prompts.
  const std::vector<Request*> decoding = [&] {
    std::vector<Request*> list;
    for (Request* request : running_) {
      if (request->num_uncomputed_tokens() == 1) list.push_back(request);
    }
    return list;
  }();
  const bool speculate = may_speculate(static_cast<int>(decoding.size()));
  for (size_t i = 0; i < decoding.size(); ++i) {
    Request* request = decoding[i];
    if (budget <= 0) break;
    if (request->state != RequestState::kRunning) continue;  // preempted in this loop
    // Drafts ride along only in what the budget leaves after every decode's own token, and
    // only in blocks the pool has free beyond one for each decode still to come: a guess never
    // preempts anyone.
    const int later_decodes = static_cast<int>(decoding.size() - i) - 1;
    int drafts = speculate ? std::min<int>(request->draft_tokens.size(), budget - 1 - later_decodes)
                           : 0;
    if (drafts > 0) {
      const int needed = blocks_for(request->num_computed_slots() + 1 + drafts) -
                         static_cast<int>(request->blocks.size());
      if (pool_.num_available() - std::max(needed, 0) < later_decodes ||
          !grow_blocks(request, request->num_computed_tokens + 1 + drafts)) {
        drafts = 0;
      }
    }
    if (drafts > 0) {
      add_to_step(request, 1 + drafts, output, budget, drafts);
    } else {
      schedule_running(request, 1, output, budget);
    }
  }

  // 2. Prompt work, fairest first: chunks of running prompts and admissions of waiting
  // requests compete by (priority, tenant's virtual time with this step's share, arrival).
  // A prompt that fits in what is left gets all it needs; while others compete, a longer one
  // takes at most half the remaining budget, so a short request is not stuck behind it. Once
  // the step finishes some prompt (its first token comes out of this step), it takes only
  // more prompts that finish too: partial chunks of long prompts would only delay that token.
  // While a lighter tenant is present (or left less than tenant_linger_seconds ago, behind the
  // virtual clock), heavier tenants share contended_prompt_tokens per step: steps stay short,
  // so the light tenant's next request waits little for the step in progress, and then gets
  // the full budget.
  // Nothing is admitted in a step that had to preempt (memory is full), and nothing jumps
  // ahead of a waiting request that does not fit.
  bool admitting = true;
  bool finishing_step = false;
  int contended_left = config_.contended_prompt_tokens;  // for tenants ahead of a lighter one
  while (budget > 0) {
    Request* prompt = nullptr;
    int num_prompts = 0;
    for (Request* request : running_) {
      if (request->num_uncomputed_tokens() <= 1 || request->last_scheduled_step == step_) continue;
      if (finishing_step && request->num_uncomputed_tokens() > budget) continue;
      ++num_prompts;
      if (prompt == nullptr || fairly_before(request, prompt)) prompt = request;
    }
    admitting = admitting && output.preempted.empty() && !waiting_.empty() &&
                static_cast<int>(running_.size()) < config_.max_running_requests;
    Request* waiting = admitting ? *next_waiting() : nullptr;
    if (waiting != nullptr && finishing_step && waiting->num_uncomputed_tokens() > budget) {
      waiting = nullptr;
      admitting = false;
    }
    if (prompt == nullptr && waiting == nullptr) break;
    const bool competition = num_prompts + (waiting != nullptr ? 1 : 0) > 1;
    // What the fairest candidate gets: all it needs if that fits, else (when others compete)
    // half of what is left; and if a lighter tenant is present, no more than what is left of
    // contended_prompt_tokens.
    auto share_for = [&](const Request* request, int needed) {
      int share = (needed <= budget || !competition) ? std::min(needed, budget)
                                                     : std::max(1, (budget + 1) / 2);
      if (yields_to_lighter_tenant(request)) {
        share = std::min(share, contended_left);
        contended_left -= share;
      }
      return share;
    };
    const bool admit_next =
        waiting != nullptr && (prompt == nullptr || fairly_before(waiting, prompt));
    // What a waiting request needs is what the prefix cache does not hold.
    if (admit_next) take_cached_prefix(waiting);
    Request* fairest = admit_next ? waiting : prompt;
    const int share = share_for(fairest, fairest->num_uncomputed_tokens());
    if (share <= 0) {  // the fairest may take no more this step: neither may the rest
      if (admit_next) release_blocks(waiting);
      break;
    }
    if (admit_next) {
      if (!admit(waiting, share, output, budget)) admitting = false;
    } else {
      schedule_running(prompt, share, output, budget);
    }
    if (!output.scheduled.empty() && output.scheduled.back().samples_next_token &&
        output.scheduled.back().num_new_tokens > 1) {
      finishing_step = true;
    }
  }
  output.num_tokens = config_.max_batch_tokens - budget;
  return output;
}

bool Scheduler::may_speculate(int num_decoding) const {
  if (num_decoding == 0 || num_decoding > config_.max_speculative_sequences) return false;
  for (const Request* request : running_) {
    if (request->num_uncomputed_tokens() > 1) return false;  // a prompt chunk is due
  }
  return waiting_.empty() || static_cast<int>(running_.size()) >= config_.max_running_requests;
}

bool Scheduler::may_speculate() const {
  int num_decoding = 0;
  for (const Request* request : running_) num_decoding += request->num_uncomputed_tokens() == 1;
  return may_speculate(num_decoding);
}

void Scheduler::on_step_done(const SchedulerOutput& output, std::vector<NamedBlock>* named) {
  for (const ScheduledRequest& item : output.scheduled) {
    Request* request = item.request;
    TACHYON_CHECK(item.num_rejected_tokens >= 0 &&
                  item.num_rejected_tokens <= item.num_draft_tokens);
    const int num_kept = item.num_new_tokens - item.num_rejected_tokens;
    request->num_computed_tokens += num_kept;
    tenants_[request->tenant].virtual_time += num_kept / request->tenant_weight;
    TACHYON_CHECK(request->num_computed_tokens <= request->num_tokens());
    if (item.num_rejected_tokens > 0) {
      // The rejected drafts' slots hold nothing anyone reads; blocks that only they reached go
      // back, so the request holds exactly what it would had it never drafted.
      const int needed = blocks_for(request->num_computed_slots());
      if (static_cast<int>(request->blocks.size()) > needed) {
        pool_.release(std::span<const BlockId>(request->blocks).subspan(needed));
        request->blocks.resize(needed);
      }
      if (local_pool_ != nullptr && static_cast<int>(request->local_blocks.size()) > needed) {
        local_pool_->release(std::span<const BlockId>(request->local_blocks).subspan(needed));
        request->local_blocks.resize(needed);
      }
    }
    // Name the blocks that became full this step (earlier ones already are); after a sink
    // drop, none past the sink.
    int num_full = request->num_computed_slots() / config_.block_size;
    if (request->first_moved_block >= 0) {
      num_full = std::min(num_full, request->first_moved_block);
    }
    const int first_new = (request->num_computed_slots() - num_kept) / config_.block_size;
    extend_block_hashes(request, num_full);
    for (int i = first_new; i < num_full; ++i) {
      pool_.set_hash(request->blocks[i], request->block_hashes[i]);
      if (local_pool_ != nullptr && request->local_blocks[i] != kNoBlock) {
        local_pool_->set_hash(request->local_blocks[i], request->block_hashes[i]);
      }
      if (named != nullptr) {
        named->push_back({request->blocks[i], request->block_hashes[i],
                          std::span<const int32_t>(request->tokens)
                              .subspan(static_cast<size_t>(i) * config_.block_size,
                                       config_.block_size),
                          local_pool_ != nullptr ? request->local_blocks[i] : kNoBlock});
      }
    }
  }
  advance_virtual_clock();
}

}  // namespace tachyon

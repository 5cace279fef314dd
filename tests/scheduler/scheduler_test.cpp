#include "scheduler/scheduler.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include <gtest/gtest.h>

namespace tachyon {
namespace {

std::unique_ptr<Request> make_request(RequestId id, int num_prompt_tokens,
                                      Priority priority = Priority::kNormal) {
  auto request = std::make_unique<Request>();
  request->id = id;
  request->arrival = id;
  request->priority = priority;
  for (int i = 0; i < num_prompt_tokens; ++i) request->tokens.push_back(100 + i);
  request->num_prompt_tokens = num_prompt_tokens;
  request->hash_root = BlockHash::root("");
  return request;
}

// Runs the schedule and, for requests that sample, appends a token as the engine would. Each
// step takes 0.1 s of the scheduler's clock.
SchedulerOutput step(Scheduler& scheduler) {
  static double now = 0;
  now += 0.1;
  SchedulerOutput output = scheduler.schedule(now);
  scheduler.on_step_done(output);
  for (const ScheduledRequest& item : output.scheduled) {
    if (item.samples_next_token) item.request->tokens.push_back(7);
  }
  return output;
}

TEST(SchedulerTest, ChunksLongPromptsUnderTheTokenBudget) {
  KvBlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 32, .max_running_requests = 8, .block_size = 16}, pool);
  scheduler.add(make_request(1, 10));
  SchedulerOutput first = step(scheduler);
  ASSERT_EQ(first.scheduled.size(), 1u);
  EXPECT_TRUE(first.scheduled[0].samples_next_token);
  // A 70-token prompt arrives while request 1 decodes: it gets the rest of the budget each step.
  scheduler.add(make_request(2, 70));
  SchedulerOutput second = step(scheduler);
  ASSERT_EQ(second.scheduled.size(), 2u);
  EXPECT_EQ(second.scheduled[0].num_new_tokens, 1);   // request 1's decode comes first
  EXPECT_EQ(second.scheduled[1].num_new_tokens, 31);  // a prompt chunk
  EXPECT_FALSE(second.scheduled[1].samples_next_token);
  EXPECT_EQ(second.num_tokens, 32);
  step(scheduler);  // 31 more
  SchedulerOutput last = step(scheduler);  // the final 8
  ASSERT_EQ(last.scheduled.size(), 2u);
  EXPECT_EQ(last.scheduled[1].num_new_tokens, 8);
  EXPECT_TRUE(last.scheduled[1].samples_next_token);
  scheduler.remove(1);
  scheduler.remove(2);
  EXPECT_EQ(pool.num_held(), 0);
}

TEST(SchedulerTest, PreemptsTheLeastUrgentWhenBlocksRunOut) {
  KvBlockPool pool(4, false);
  Scheduler scheduler({.max_batch_tokens = 64, .max_running_requests = 8, .block_size = 16}, pool);
  scheduler.add(make_request(1, 30, Priority::kHigh));  // 2 blocks
  scheduler.add(make_request(2, 30, Priority::kLow));   // 2 blocks
  SchedulerOutput first = step(scheduler);
  EXPECT_EQ(first.scheduled.size(), 2u);
  EXPECT_EQ(pool.num_available(), 0);
  step(scheduler);  // position 30
  step(scheduler);  // position 31: the second block is full
  // Position 32: request 1 needs a third block: the low-priority request is preempted.
  SchedulerOutput third = step(scheduler);
  ASSERT_EQ(third.preempted.size(), 1u);
  EXPECT_EQ(third.preempted[0], 2u);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(scheduler.find(2)->num_computed_tokens, 0);
  EXPECT_EQ(scheduler.counters().preemptions, 1u);
  scheduler.remove(1);
  // With room again the preempted request is recomputed from all its tokens.
  SchedulerOutput resumed = step(scheduler);
  ASSERT_EQ(resumed.scheduled.size(), 1u);
  EXPECT_EQ(resumed.scheduled[0].num_new_tokens, 33);
  scheduler.remove(2);
  EXPECT_EQ(pool.num_held(), 0);
}

TEST(SchedulerTest, TakesCachedPrefixBlocksAtAdmission) {
  KvBlockPool pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 256, .max_running_requests = 8, .block_size = 16}, pool);
  scheduler.add(make_request(1, 40));
  step(scheduler);
  scheduler.remove(1);  // its 2 full blocks stay cached
  EXPECT_EQ(pool.num_cached(), 2);
  scheduler.add(make_request(2, 40));
  SchedulerOutput output = step(scheduler);
  EXPECT_EQ(scheduler.find(2)->num_cached_prompt_tokens, 32);
  EXPECT_EQ(output.scheduled[0].num_new_tokens, 8);
  // A prompt that is exactly cached still computes its last block for the logits.
  scheduler.add(make_request(3, 32));
  SchedulerOutput exact = step(scheduler);
  EXPECT_EQ(scheduler.find(3)->num_cached_prompt_tokens, 16);
  EXPECT_EQ(exact.scheduled.back().num_new_tokens, 16);
  EXPECT_EQ(scheduler.counters().prefix_hit_tokens, 48u);
}

// A stand-in for the disk tier: remembers named blocks' hashes and tokens; fill() checks the
// tokens and marks the block as filled.
class FakeBlockSource : public PrefixBlockSource {
 public:
  bool has(const BlockHash& hash) const override { return saved.contains(hash); }
  bool fill(const BlockHash& hash, std::span<const int32_t> tokens, BlockId block,
            BlockId local_block) override {
    ++fills;
    if (hash == broken || (local_block != kNoBlock && hash == broken_local)) return false;
    EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), saved.at(hash).begin()));
    if (block != kNoBlock) filled.push_back(block);
    if (local_block != kNoBlock) filled_local.push_back(local_block);
    return true;
  }
  std::unordered_map<BlockHash, std::vector<int32_t>, BlockHashHasher> saved;
  std::optional<BlockHash> broken;        // no part of it can be read
  std::optional<BlockHash> broken_local;  // its local layers' part cannot
  std::vector<BlockId> filled, filled_local;
  int fills = 0;
};

TEST(SchedulerTest, PrefixBlocksMissingFromRamComeFromTheSource) {
  KvBlockPool pool(6, true);
  Scheduler scheduler({.max_batch_tokens = 256, .max_running_requests = 8, .block_size = 16}, pool);
  FakeBlockSource source;
  scheduler.set_prefix_block_source(&source);
  scheduler.add(make_request(1, 50));
  SchedulerOutput first = scheduler.schedule(0.1);
  std::vector<NamedBlock> named;
  scheduler.on_step_done(first, &named);
  ASSERT_EQ(named.size(), 3u);  // the 3 full blocks of 50 tokens
  for (const NamedBlock& block : named) {
    EXPECT_EQ(block.tokens.size(), 16u);
    source.saved[block.hash] = std::vector<int32_t>(block.tokens.begin(), block.tokens.end());
  }
  EXPECT_EQ(named[1].tokens[0], 100 + 16);
  scheduler.remove(1);
  // Another long request (other tokens) evicts every cached block from RAM.
  auto other = make_request(2, 6 * 16 - 8);
  for (int32_t& token : other->tokens) token += 1000;
  scheduler.add(std::move(other));
  step(scheduler);
  scheduler.remove(2);
  EXPECT_EQ(source.fills, 0);

  // The first two blocks come back from the source; the third fails and is computed.
  source.broken = named[2].hash;
  scheduler.add(make_request(3, 50));
  SchedulerOutput output = step(scheduler);
  EXPECT_EQ(source.fills, 3);
  EXPECT_EQ(source.filled.size(), 2u);
  EXPECT_EQ(scheduler.find(3)->num_cached_prompt_tokens, 32);
  EXPECT_EQ(output.scheduled[0].num_new_tokens, 50 - 32);
  EXPECT_EQ(scheduler.counters().prefix_source_tokens, 32u);
  EXPECT_EQ(std::vector<BlockId>(scheduler.find(3)->blocks.begin(),
                                 scheduler.find(3)->blocks.begin() + 2),
            source.filled);
  // Filled blocks are named: the next request takes them from RAM.
  scheduler.add(make_request(4, 40));
  step(scheduler);
  EXPECT_EQ(source.fills, 3);
  EXPECT_EQ(scheduler.find(4)->num_cached_prompt_tokens, 32);
}

// The sink policy: a long prompt is cut to its sink block and its last tokens; decoding past
// the window drops the oldest block after the sink and turns the rest's keys back, so the
// request runs on in a bounded number of blocks; blocks shared with another request are
// copied first, and moved blocks are never named.
TEST(SchedulerTest, SinkRequestsRunOnInBoundedBlocks) {
  KvBlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 256, .max_running_requests = 8, .block_size = 16}, pool);
  auto sink_request = [](RequestId id) {
    auto request = make_request(id, 100);
    request->sink_tokens = 16;
    request->max_positions = 96;
    return request;
  };
  scheduler.add(sink_request(1));
  Request* request = scheduler.find(1);
  // Cut to 96 - 16 (one drop chunk of room) = 80: the sink block and the last 64 tokens.
  EXPECT_EQ(request->num_tokens(), 80);
  EXPECT_EQ(request->num_dropped_tokens, 20);
  EXPECT_EQ(request->tokens[15], 115);
  EXPECT_EQ(request->tokens[16], 136);
  step(scheduler);  // the prompt
  scheduler.add(sink_request(2));  // the same prompt: shares request 1's full blocks
  step(scheduler);
  EXPECT_EQ(scheduler.find(2)->num_cached_prompt_tokens, 64);
  int shifts = 0, copies = 0;
  for (int i = 0; i < 100; ++i) {
    SchedulerOutput output = step(scheduler);
    for (const KeyShift& shift : output.key_shifts) {
      EXPECT_EQ(shift.delta, 16);
      EXPECT_GE(shift.count, 1);
      EXPECT_LE(shift.count, 16);
    }
    shifts += static_cast<int>(output.key_shifts.size());
    copies += static_cast<int>(output.block_copies.size());
    for (RequestId id : {1, 2}) {
      const Request* r = scheduler.find(id);
      EXPECT_LE(r->num_computed_tokens, 96);
      EXPECT_LE(static_cast<int>(r->blocks.size()), 6);
    }
  }
  EXPECT_GT(shifts, 0);
  EXPECT_EQ(copies, 2);  // request 1's first drop moved blocks 2-3, shared with request 2
  EXPECT_EQ(scheduler.counters().preemptions, 0u);
  EXPECT_EQ(request->num_dropped_tokens, 20 + 96);  // 100 tokens decoded since
  EXPECT_TRUE(request->first_moved_block >= 0);
  // The sink block is still the prompt's first block, named and shared by both.
  EXPECT_EQ(request->blocks[0], scheduler.find(2)->blocks[0]);
  EXPECT_EQ(pool.reference_count(request->blocks[0]), 2);
  // Moved blocks are not in the prefix cache: the same cut prompt finds the sink block and
  // the block dropped whole (released as computed), not the moved ones.
  scheduler.remove(1);
  scheduler.remove(2);
  scheduler.add(sink_request(3));
  step(scheduler);
  EXPECT_EQ(scheduler.find(3)->num_cached_prompt_tokens, 32);
}

TEST(SchedulerTest, HigherPriorityWaitsLess) {
  KvBlockPool pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 256, .max_running_requests = 1, .block_size = 16}, pool);
  scheduler.add(make_request(1, 4, Priority::kLow));
  scheduler.add(make_request(2, 4, Priority::kHigh));
  SchedulerOutput output = step(scheduler);
  ASSERT_EQ(output.scheduled.size(), 1u);
  EXPECT_EQ(output.scheduled[0].request->id, 2u);
}

// A long prompt that arrived first neither takes the budget from later requests' decodes nor
// keeps a short request waiting.
TEST(SchedulerTest, ShortRequestsAreNotStuckBehindLongPrompts) {
  KvBlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 32, .max_running_requests = 8, .block_size = 16}, pool);
  scheduler.add(make_request(1, 200));  // prefills in chunks
  step(scheduler);
  scheduler.add(make_request(2, 4));
  // The long prompt's chunk leaves half the budget: request 2 is admitted at once.
  SchedulerOutput second = step(scheduler);
  ASSERT_EQ(second.scheduled.size(), 2u);
  EXPECT_EQ(second.scheduled[0].request->id, 1u);
  EXPECT_EQ(second.scheduled[0].num_new_tokens, 16);
  EXPECT_EQ(second.scheduled[1].request->id, 2u);
  EXPECT_TRUE(second.scheduled[1].samples_next_token);
  // Now request 2 decodes, and its token comes before request 1's chunk.
  SchedulerOutput third = step(scheduler);
  ASSERT_EQ(third.scheduled.size(), 2u);
  EXPECT_EQ(third.scheduled[0].request->id, 2u);
  EXPECT_EQ(third.scheduled[0].num_new_tokens, 1);
  EXPECT_EQ(third.scheduled[1].num_new_tokens, 31);
}

// Within a priority, a tenant with many queued requests does not starve a tenant with few:
// admission alternates by tokens served, not by arrival.
TEST(SchedulerTest, TenantsShareByWeightedFairQueuing) {
  KvBlockPool pool(256, false);
  Scheduler scheduler({.max_batch_tokens = 64, .max_running_requests = 1, .block_size = 16}, pool);
  for (RequestId id = 1; id <= 10; ++id) {
    auto request = make_request(id, 20);
    request->tenant = 1;  // heavy tenant: ten requests queued first
    scheduler.add(std::move(request));
  }
  auto light = make_request(11, 20);
  light->tenant = 2;
  scheduler.add(std::move(light));
  // One running slot: serve a request to completion, then see who is admitted next.
  std::vector<uint64_t> admitted_tenants;
  for (int round = 0; round < 3; ++round) {
    SchedulerOutput output = step(scheduler);
    ASSERT_EQ(output.scheduled.size(), 1u);
    admitted_tenants.push_back(output.scheduled[0].request->tenant);
    scheduler.remove(output.scheduled[0].request->id);
  }
  // Tenant 1 goes first (earliest, both at zero), then tenant 2 (less served), then tenant 1.
  EXPECT_EQ(admitted_tenants, (std::vector<uint64_t>{1, 2, 1}));
}

// A tenant returning from idle goes ahead of a busy tenant's backlog, with a bounded credit:
// a tenant that was served far more than the others does not.
TEST(SchedulerTest, ReturningLightTenantGoesFirst) {
  KvBlockPool pool(256, false);
  SchedulerConfig config{.max_batch_tokens = 64, .max_running_requests = 1, .block_size = 16};
  config.burst_credit_tokens = 100;
  Scheduler scheduler(config, pool);
  for (RequestId id = 1; id <= 8; ++id) {  // A floods; one running slot
    auto request = make_request(id, 20);
    request->tenant = 1;
    scheduler.add(std::move(request));
  }
  for (int round = 0; round < 5; ++round) {  // A is served 5 x 21 tokens
    SchedulerOutput output = step(scheduler);
    scheduler.remove(output.scheduled[0].request->id);
  }
  auto light = make_request(20, 20);  // B arrives: served before A's backlog
  light->tenant = 2;
  scheduler.add(std::move(light));
  SchedulerOutput next = step(scheduler);
  ASSERT_EQ(next.scheduled.size(), 1u);
  EXPECT_EQ(next.scheduled[0].request->tenant, 2u);
  scheduler.remove(20);
  // Its credit is bounded: B returning again right away is level with A, and A's earlier
  // request goes first.
  auto again = make_request(21, 20);
  again->tenant = 2;
  scheduler.add(std::move(again));
  // B was served 20 tokens from a start 100 behind the clock; A is at the clock: B still has
  // credit left for one more request.
  SchedulerOutput second = step(scheduler);
  EXPECT_EQ(second.scheduled[0].request->tenant, 2u);
  scheduler.remove(21);
  auto third = make_request(22, 200);  // a long one eats the rest of its credit
  third->tenant = 2;
  scheduler.add(std::move(third));
  SchedulerOutput third_step = step(scheduler);
  EXPECT_EQ(third_step.scheduled[0].request->tenant, 2u);
  while (scheduler.find(22)->num_uncomputed_tokens() > 1) step(scheduler);
  scheduler.remove(22);
  auto fourth = make_request(23, 20);
  fourth->tenant = 2;
  scheduler.add(std::move(fourth));
  SchedulerOutput fourth_step = step(scheduler);
  EXPECT_EQ(fourth_step.scheduled[0].request->tenant, 1u) << "B used up its credit";
}

// Tokens the step gives to `tenant`'s requests.
int tokens_of(const SchedulerOutput& output, uint64_t tenant) {
  int total = 0;
  for (const ScheduledRequest& item : output.scheduled) {
    if (item.request->tenant == tenant) total += item.num_new_tokens;
  }
  return total;
}

// While a lighter tenant is around, a heavy tenant's steps stay short (so the light tenant's
// next request does not wait long for the step in progress) and the light one gets the full
// budget; once it has been gone for tenant_linger_steps, the heavy tenant has it all again.
TEST(SchedulerTest, HeavyTenantStepsStayShortWhileALightTenantIsPresent) {
  KvBlockPool pool(1024, false);
  SchedulerConfig config{.max_batch_tokens = 256, .max_running_requests = 16, .block_size = 16};
  config.contended_prompt_tokens = 64;
  config.tenant_linger_seconds = 0.35;  // 3 steps
  Scheduler scheduler(config, pool);
  for (RequestId id = 1; id <= 6; ++id) {  // A: long prompts
    auto request = make_request(id, 1000);
    request->tenant = 1;
    scheduler.add(std::move(request));
  }
  EXPECT_EQ(tokens_of(step(scheduler), 1), 256) << "alone, A uses the whole budget";

  auto light = make_request(20, 150);
  light->tenant = 2;
  scheduler.add(std::move(light));
  SchedulerOutput shared = step(scheduler);
  EXPECT_EQ(tokens_of(shared, 2), 150) << "B's whole prompt in one step";
  EXPECT_LE(tokens_of(shared, 1), 64);
  scheduler.remove(20);  // B got its answer and left

  for (int i = 0; i < 3; ++i) {  // B may come back: A's steps stay short meanwhile (0.3 s)
    EXPECT_EQ(tokens_of(step(scheduler), 1), 64) << "step " << i << " after B left";
  }
  EXPECT_EQ(tokens_of(step(scheduler), 1), 256) << "B has been gone long enough";

  // Two tenants of different priorities do not cap each other (priority already orders them).
  auto urgent = make_request(30, 40, Priority::kHigh);
  urgent->tenant = 3;
  scheduler.add(std::move(urgent));
  EXPECT_EQ(tokens_of(step(scheduler), 3), 40);
  SchedulerOutput mixed = step(scheduler);
  EXPECT_EQ(tokens_of(mixed, 3), 1);  // its decode
  EXPECT_EQ(tokens_of(mixed, 1), 255);
}

// Under KV pressure a waiting high-priority request preempts low-priority running ones; a
// waiting request of the same priority waits instead.
TEST(SchedulerTest, HighPriorityPreemptsLowerPriorityToBeAdmitted) {
  KvBlockPool pool(4, false);
  Scheduler scheduler({.max_batch_tokens = 256, .max_running_requests = 8, .block_size = 16}, pool);
  scheduler.add(make_request(1, 60, Priority::kLow));  // takes all 4 blocks
  step(scheduler);
  scheduler.add(make_request(2, 20, Priority::kLow));
  SchedulerOutput same = step(scheduler);
  EXPECT_TRUE(same.preempted.empty());
  EXPECT_EQ(scheduler.find(2)->state, RequestState::kWaiting);
  scheduler.add(make_request(3, 20, Priority::kHigh));
  SchedulerOutput urgent = step(scheduler);
  ASSERT_EQ(urgent.preempted.size(), 1u);
  EXPECT_EQ(urgent.preempted[0], 1u);
  EXPECT_EQ(scheduler.find(3)->state, RequestState::kRunning);
  EXPECT_EQ(scheduler.find(1)->state, RequestState::kWaiting);
}

// A decoding request's drafts are computed with its last token; the rejected ones roll back:
// num_computed_tokens, the block table and the pool end exactly where a run that never
// drafted would be, and only blocks of confirmed tokens are named for the prefix cache.
TEST(SchedulerTest, DraftsRideAlongAndRejectedOnesRollBack) {
  KvBlockPool pool(8, true);
  Scheduler scheduler({.max_batch_tokens = 64, .max_running_requests = 8, .block_size = 16,
                       .max_speculative_sequences = 2},
                      pool);
  scheduler.add(make_request(1, 14));
  step(scheduler);  // the prompt; one sampled token makes 15
  Request* request = scheduler.find(1);
  ASSERT_EQ(request->num_computed_tokens, 14);
  request->draft_tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  SchedulerOutput drafted = scheduler.schedule(1.0);
  ASSERT_EQ(drafted.scheduled.size(), 1u);
  EXPECT_EQ(drafted.scheduled[0].num_new_tokens, 21);
  EXPECT_EQ(drafted.scheduled[0].num_draft_tokens, 20);
  EXPECT_TRUE(drafted.scheduled[0].samples_next_token);
  EXPECT_EQ(request->blocks.size(), 3u);  // positions 0..34
  // The engine confirms 2 drafts and samples a third token; 18 are rejected.
  drafted.scheduled[0].num_rejected_tokens = 18;
  request->tokens.insert(request->tokens.end(), {1, 2, 99});
  request->draft_tokens.clear();
  scheduler.on_step_done(drafted);
  EXPECT_EQ(request->num_computed_tokens, 17);  // 14 + the last token + 2 confirmed drafts
  EXPECT_EQ(request->blocks.size(), 2u);        // what 17 computed tokens need
  EXPECT_EQ(pool.num_held(), 2);
  EXPECT_EQ(request->block_hashes.size(), 1u);  // only the full block of confirmed tokens

  // No drafts while a waiting request could be admitted (its prompt makes the step compute-bound).
  request->draft_tokens = {5, 6};
  scheduler.add(make_request(2, 30));
  SchedulerOutput busy = scheduler.schedule(2.0);
  ASSERT_EQ(busy.scheduled.size(), 2u);
  EXPECT_EQ(busy.scheduled[0].num_draft_tokens, 0);
  EXPECT_EQ(busy.scheduled[0].num_new_tokens, 1);
  scheduler.remove(1);
  scheduler.remove(2);
  EXPECT_EQ(pool.num_held(), 0);
}

// Drafts never preempt: without free blocks for them the request decodes its one token, and
// they never take the blocks later decodes of the same step need.
TEST(SchedulerTest, DraftsGetOnlyFreeBlocks) {
  KvBlockPool pool(2, false);
  Scheduler scheduler({.max_batch_tokens = 64, .max_running_requests = 8, .block_size = 16,
                       .max_speculative_sequences = 4},
                      pool);
  scheduler.add(make_request(1, 15));
  scheduler.add(make_request(2, 15));
  step(scheduler);  // both prompts: one block each, none free
  scheduler.find(1)->draft_tokens = {1, 2, 3};
  SchedulerOutput output = scheduler.schedule(1.0);
  ASSERT_EQ(output.scheduled.size(), 2u);
  EXPECT_TRUE(output.preempted.empty());
  EXPECT_EQ(output.scheduled[0].num_draft_tokens, 0);
  EXPECT_EQ(output.scheduled[0].num_new_tokens, 1);

  // Two requests each about to need a new block, and two free blocks: the first's 17 drafts
  // would take both and the second would have to preempt, so the first decodes alone.
  KvBlockPool tight(6, false);
  Scheduler tight_scheduler({.max_batch_tokens = 64, .max_running_requests = 8,
                             .block_size = 16, .max_speculative_sequences = 4},
                            tight);
  tight_scheduler.add(make_request(1, 31));
  tight_scheduler.add(make_request(2, 31));
  step(tight_scheduler);  // 2 blocks each, 2 free
  step(tight_scheduler);  // position 31 fills the second blocks; next is position 32
  tight_scheduler.find(1)->draft_tokens = std::vector<int32_t>(17, 5);
  SchedulerOutput tight_output = tight_scheduler.schedule(2.0);
  EXPECT_TRUE(tight_output.preempted.empty());
  ASSERT_EQ(tight_output.scheduled.size(), 2u);
  EXPECT_EQ(tight_output.scheduled[0].num_draft_tokens, 0);
  EXPECT_EQ(tight.num_available(), 0);  // one new block each
}

// Sliding-window models: the local layers' blocks come from a pool of their own and a request
// holds only those its next tokens can see (the window before its first uncomputed token, and
// the step's tokens); the rest go back, named, to the prefix cache. A later request with the
// same prefix takes the global blocks of the whole prefix and the local blocks of its last
// window; where that window's local blocks were evicted, its hit ends earlier.
TEST(SchedulerTest, SlidingWindowLayersHoldOnlyTheirWindow) {
  constexpr int kWindow = 40;
  KvBlockPool pool(64, true);
  KvBlockPool local_pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 32, .max_running_requests = 4, .block_size = 16,
                       .window = kWindow},
                      pool, &local_pool);
  scheduler.add(make_request(1, 100));
  int most_local = 0;
  for (int i = 0; i < 60; ++i) {
    const SchedulerOutput output = step(scheduler);
    ASSERT_EQ(output.scheduled.size(), 1u);
    const Request& request = *scheduler.find(1);
    ASSERT_EQ(request.local_blocks.size(), request.blocks.size());
    // Held: from the block of the window's first position before this step's first token.
    const int computed_before = request.num_computed_tokens - output.scheduled[0].num_new_tokens;
    const int first = std::max(0, computed_before - kWindow + 1) / 16;
    for (int b = 0; b < static_cast<int>(request.local_blocks.size()); ++b) {
      EXPECT_EQ(request.local_blocks[b] == kNoBlock, b < first) << "block " << b << " step " << i;
    }
    most_local = std::max(most_local, local_pool.num_held());
  }
  // 160 positions: 10 global blocks, but at most (40 - 1 + 32) / 16 + 1 local ones at once.
  EXPECT_EQ(pool.num_held(), 10);
  EXPECT_LE(most_local, (kWindow - 1 + 32 + 15) / 16 + 1);
  EXPECT_GT(local_pool.num_cached(), 0);  // windows that slid out stay reusable
  scheduler.remove(1);
  EXPECT_EQ(pool.num_held(), 0);
  EXPECT_EQ(local_pool.num_held(), 0);

  // The same 100-token prompt again: the hit covers 6 blocks (the last token is computed), its
  // global blocks and the local blocks of the window before position 96 (blocks 3..5).
  auto again = make_request(2, 100);
  step(scheduler);  // (nothing to run)
  scheduler.add(std::move(again));
  step(scheduler);
  const Request& hit = *scheduler.find(2);
  EXPECT_EQ(hit.num_cached_prompt_tokens, 96);
  EXPECT_EQ(hit.local_blocks[0], kNoBlock);
  EXPECT_EQ(hit.local_blocks[2], kNoBlock);
  EXPECT_NE(hit.local_blocks[3], kNoBlock);
  scheduler.remove(2);

  // Evict the cached local windows (a request of other tokens takes every local block): the
  // same prompt finds no window, so no hit at all, though its global blocks are cached.
  auto other = make_request(3, 400);  // 25 blocks' worth of windows through a pool of 16
  for (int32_t& token : other->tokens) token += 1000;
  scheduler.add(std::move(other));
  for (int i = 0; i < 14; ++i) step(scheduler);
  scheduler.remove(3);
  scheduler.add(make_request(4, 100));
  step(scheduler);
  EXPECT_EQ(scheduler.find(4)->num_cached_prompt_tokens, 0);
  scheduler.remove(4);
  EXPECT_EQ(local_pool.num_held(), 0);
}

// The disk tier of a model with a local pool: named blocks carry both parts; after a restart
// (fresh pools, the same source) a hit takes every global block and the local blocks of its
// window from the source; a local part that cannot be read ends the hit where the window
// before it can be had.
TEST(SchedulerTest, SlidingWindowPrefixesComeBackFromTheSource) {
  constexpr int kWindow = 40;
  const SchedulerConfig config{.max_batch_tokens = 128, .max_running_requests = 4,
                               .block_size = 16, .window = kWindow};
  FakeBlockSource source;
  {
    KvBlockPool pool(16, true), local_pool(16, true);
    Scheduler scheduler(config, pool, &local_pool);
    scheduler.set_prefix_block_source(&source);
    scheduler.add(make_request(1, 100));
    SchedulerOutput output = scheduler.schedule(0.1);
    std::vector<NamedBlock> named;
    scheduler.on_step_done(output, &named);
    ASSERT_EQ(named.size(), 6u);
    for (const NamedBlock& block : named) {
      EXPECT_NE(block.local_block, kNoBlock);
      source.saved[block.hash] = std::vector<int32_t>(block.tokens.begin(), block.tokens.end());
    }
    scheduler.remove(1);
  }
  {
    KvBlockPool pool(16, true), local_pool(16, true);
    Scheduler scheduler(config, pool, &local_pool);
    scheduler.set_prefix_block_source(&source);
    scheduler.add(make_request(2, 100));
    step(scheduler);
    const Request& hit = *scheduler.find(2);
    EXPECT_EQ(hit.num_cached_prompt_tokens, 96);
    EXPECT_EQ(source.filled.size(), 6u);
    // The window before position 96 starts in block 3: only blocks 3..5 need local parts.
    ASSERT_EQ(source.filled_local.size(), 3u);
    EXPECT_EQ(hit.local_blocks[2], kNoBlock);
    EXPECT_EQ(std::vector<BlockId>(hit.local_blocks.begin() + 3, hit.local_blocks.begin() + 6),
              source.filled_local);
    scheduler.remove(2);
    EXPECT_EQ(pool.num_held(), 0);
    EXPECT_EQ(local_pool.num_held(), 0);
  }
  {
    KvBlockPool pool(16, true), local_pool(16, true);
    Scheduler scheduler(config, pool, &local_pool);
    scheduler.set_prefix_block_source(&source);
    auto request = make_request(3, 100);
    BlockHash block4 = request->hash_root;
    for (int b = 0; b <= 4; ++b) {
      block4 = BlockHash::chain(block4, std::span<const int32_t>(request->tokens).subspan(b * 16, 16));
    }
    source.broken_local = block4;
    source.filled_local.clear();
    scheduler.add(std::move(request));
    step(scheduler);
    // Block 4's local part fails: a hit of 4 blocks needs the window before position 64,
    // blocks 1..3 (3 read again from the local pool, where its fill left it named).
    const Request& hit = *scheduler.find(3);
    EXPECT_EQ(hit.num_cached_prompt_tokens, 64);
    EXPECT_EQ(hit.local_blocks[0], kNoBlock);
    for (int i = 1; i < 4; ++i) EXPECT_NE(hit.local_blocks[i], kNoBlock) << i;
    EXPECT_EQ(source.filled_local.size(), 3u);  // 3, (4 failed), then 1 and 2
    scheduler.remove(3);
    EXPECT_EQ(pool.num_held(), 0);
    EXPECT_EQ(local_pool.num_held(), 0);
  }
}

}  // namespace
}  // namespace tachyon

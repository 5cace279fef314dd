#include "router/replica_set.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace tachyon::router {
namespace {

namespace json = boost::json;

RouterOptions options_for(int replicas, RoutingPolicy policy) {
  RouterOptions options;
  for (int i = 0; i < replicas; ++i) {
    options.replica_urls.push_back("http://127.0.0.1:" + std::to_string(9000 + i));
  }
  options.policy = policy;
  options.prefix_chunk_bytes = 4;
  options.balance_factor = 2;
  options.balance_slack_tokens = 100;
  return options;
}

// A set whose replicas are all up and serve model "m".
std::unique_ptr<ReplicaSet> make_set(int replicas, RoutingPolicy policy) {
  Result<std::unique_ptr<ReplicaSet>> set = ReplicaSet::create(options_for(replicas, policy));
  EXPECT_TRUE(set.ok()) << set.status().message();
  if (!set.ok()) return nullptr;
  for (auto& replica : (*set)->replicas()) {
    replica->set_up(true);
    replica->set_models({json::object{{"id", "m"}}});
  }
  return std::move(set).value();
}

Replica& replica(ReplicaSet& set, int index) { return *set.replicas()[index]; }

// The index of the replica pick() chooses, or -1 for none.
int pick_index(ReplicaSet& set, std::string_view model, const std::vector<uint64_t>& keys = {},
               const std::vector<int>& tried = {}) {
  std::optional<ReplicaSet::Choice> choice = set.pick(model, keys, tried);
  return choice ? choice->replica->index() : -1;
}

TEST(ReplicaSetCreateTest, NeedsAReplica) {
  Result<std::unique_ptr<ReplicaSet>> set = ReplicaSet::create(RouterOptions{});
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
}

TEST(ReplicaSetCreateTest, DuplicateUrlRefused) {
  RouterOptions options;
  // The same replica spelt two ways: they compare normalised.
  options.replica_urls = {"http://127.0.0.1:9000/", "127.0.0.1:9000"};
  Result<std::unique_ptr<ReplicaSet>> set = ReplicaSet::create(options);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(set.status().message().find("twice"), std::string::npos);
}

TEST(ReplicaSetCreateTest, BadUrlRefused) {
  RouterOptions options;
  options.replica_urls = {"http://127.0.0.1:9000", "https://127.0.0.1:9001"};
  Result<std::unique_ptr<ReplicaSet>> set = ReplicaSet::create(options);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
}

TEST(ReplicaSetCreateTest, ReplicasIndexedInOrderAndStartDown) {
  Result<std::unique_ptr<ReplicaSet>> set =
      ReplicaSet::create(options_for(3, RoutingPolicy::kLeastLoad));
  ASSERT_TRUE(set.ok());
  ReplicaSet& replicas = **set;
  ASSERT_EQ(replicas.replicas().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(replica(replicas, i).index(), i);
    EXPECT_EQ(replica(replicas, i).url(), "http://127.0.0.1:" + std::to_string(9000 + i));
    EXPECT_FALSE(replica(replicas, i).up());
  }
  EXPECT_EQ(replicas.num_up(), 0u);
  EXPECT_EQ(replicas.policy(), RoutingPolicy::kLeastLoad);
  EXPECT_EQ(replicas.prefix_index().chunk_bytes(), 4u);
}

TEST(ReplicaSetPickTest, AllDownGivesNone) {
  Result<std::unique_ptr<ReplicaSet>> set =
      ReplicaSet::create(options_for(2, RoutingPolicy::kCacheAware));
  ASSERT_TRUE(set.ok());
  EXPECT_FALSE((*set)->pick("m", {}, {}).has_value());
  EXPECT_FALSE((*set)->pick("", {}, {}).has_value());
}

TEST(ReplicaSetPickTest, OnlyUpReplicasThatServeTheModel) {
  auto set = make_set(3, RoutingPolicy::kRoundRobin);
  replica(*set, 0).set_up(false);                             // serves m, but down
  replica(*set, 1).set_models({json::object{{"id", "x"}}});  // up, serves only x
  EXPECT_EQ(set->num_up(), 2u);
  for (int i = 0; i < 6; ++i) {
    std::optional<ReplicaSet::Choice> choice = set->pick("m", {}, {});
    ASSERT_TRUE(choice.has_value());
    EXPECT_EQ(choice->replica->index(), 2);
    EXPECT_EQ(choice->reason, RouteReason::kRoundRobin);
  }
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pick_index(*set, "x"), 1);
}

TEST(ReplicaSetPickTest, UnservedModelGoesToAnyUpReplica) {
  for (RoutingPolicy policy :
       {RoutingPolicy::kCacheAware, RoutingPolicy::kLeastLoad, RoutingPolicy::kRoundRobin}) {
    auto set = make_set(3, policy);
    replica(*set, 0).set_up(false);
    replica(*set, 2).set_up(false);
    const std::vector<uint64_t> keys = set->prefix_index().prefix_keys("nobody serves this");
    std::optional<ReplicaSet::Choice> choice = set->pick("unknown", keys, {});
    ASSERT_TRUE(choice.has_value()) << routing_policy_name(policy);
    EXPECT_EQ(choice->replica->index(), 1);
    EXPECT_EQ(choice->reason, RouteReason::kAnyReplica);
    // Its prefixes are not remembered: the replica did not serve them.
    EXPECT_EQ(set->prefix_index().size(), 0u);
  }
}

TEST(ReplicaSetPickTest, EmptyModelMeansAny) {
  auto set = make_set(2, RoutingPolicy::kLeastLoad);
  replica(*set, 0).set_models({});
  std::optional<ReplicaSet::Choice> choice = set->pick("", {}, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->reason, RouteReason::kLoad);  // not kAnyReplica: no model was asked for
}

TEST(ReplicaSetPickTest, TriedReplicasAreSkipped) {
  auto set = make_set(3, RoutingPolicy::kLeastLoad);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pick_index(*set, "m", {}, {0, 2}), 1);
  for (int i = 0; i < 6; ++i) {
    const int index = pick_index(*set, "m", {}, {1});
    EXPECT_TRUE(index == 0 || index == 2) << index;
  }
  EXPECT_EQ(pick_index(*set, "m", {}, {0, 1, 2}), -1);
}

TEST(ReplicaSetPickTest, ServersOfTheModelAllTriedOrDownGiveNone) {
  // A retry must not land on a replica without the model (its 404 would hide an outage).
  auto set = make_set(2, RoutingPolicy::kLeastLoad);
  replica(*set, 1).set_models({});  // only 0 serves m
  EXPECT_EQ(pick_index(*set, "m", {}, {0}), -1);
  replica(*set, 0).set_up(false);
  EXPECT_EQ(pick_index(*set, "m"), -1);
  // A model nobody lists still goes to any replica that is up (it answers 404).
  EXPECT_EQ(pick_index(*set, "unknown"), 1);
}

TEST(ReplicaSetPickTest, LeastLoadPicksFewestOutstandingTokens) {
  auto set = make_set(3, RoutingPolicy::kLeastLoad);
  replica(*set, 0).begin_request(500);
  replica(*set, 1).begin_request(100);
  replica(*set, 2).begin_request(300);
  for (int i = 0; i < 5; ++i) {
    std::optional<ReplicaSet::Choice> choice = set->pick("m", {}, {});
    ASSERT_TRUE(choice.has_value());
    EXPECT_EQ(choice->replica->index(), 1);
    EXPECT_EQ(choice->reason, RouteReason::kLoad);
  }
  replica(*set, 1).begin_request(300);  // now 400: 2 is least
  EXPECT_EQ(pick_index(*set, "m"), 2);
}

TEST(ReplicaSetPickTest, LeastLoadBreaksTokenTiesByRequests) {
  auto set = make_set(2, RoutingPolicy::kLeastLoad);
  replica(*set, 0).begin_request(50);
  replica(*set, 0).begin_request(50);
  replica(*set, 1).begin_request(100);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pick_index(*set, "m"), 1);
}

TEST(ReplicaSetPickTest, LeastLoadSpreadsAnIdleSet) {
  auto set = make_set(2, RoutingPolicy::kLeastLoad);
  const int first = pick_index(*set, "m");
  const int second = pick_index(*set, "m");
  EXPECT_NE(first, -1);
  EXPECT_NE(second, -1);
  EXPECT_NE(first, second);
}

TEST(ReplicaSetPickTest, RoundRobinAlternates) {
  auto set = make_set(2, RoutingPolicy::kRoundRobin);
  // Load does not matter to round-robin.
  replica(*set, 0).begin_request(10000);
  int previous = pick_index(*set, "m");
  ASSERT_NE(previous, -1);
  for (int i = 0; i < 6; ++i) {
    const int next = pick_index(*set, "m");
    EXPECT_EQ(next, 1 - previous);
    previous = next;
  }
  // Round-robin keeps no prefixes.
  EXPECT_EQ(set->pick("m", set->prefix_index().prefix_keys("aaaabbbb"), {})->reason,
            RouteReason::kRoundRobin);
  EXPECT_EQ(set->prefix_index().size(), 0u);
}

TEST(ReplicaSetPickTest, CacheAwareReturnsToThePrefixHolder) {
  auto set = make_set(3, RoutingPolicy::kCacheAware);
  PrefixIndex& index = set->prefix_index();
  index.record(index.prefix_keys("system prompt"), 1);
  // Different questions after the same system prompt (each pick records its own prompt, so
  // reusing one would match all of it the second time; the digit makes each 4th chunk new).
  for (const char* question : {"1: what?", "2: why?", "3: where?", "4: when?"}) {
    std::optional<ReplicaSet::Choice> choice =
        set->pick("m", index.prefix_keys(std::string("system prompt") + question), {});
    ASSERT_TRUE(choice.has_value());
    EXPECT_EQ(choice->replica->index(), 1) << question;
    EXPECT_EQ(choice->reason, RouteReason::kPrefix);
    EXPECT_EQ(choice->prefix_chunks, 3u);  // "system prompt" is 3 whole 4-byte chunks
  }
}

TEST(ReplicaSetPickTest, CacheAwareRecordsTheChoice) {
  auto set = make_set(3, RoutingPolicy::kCacheAware);
  const std::vector<uint64_t> keys = set->prefix_index().prefix_keys("a conversation");
  std::optional<ReplicaSet::Choice> first = set->pick("m", keys, {});
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->reason, RouteReason::kLoad);  // nothing known yet
  EXPECT_EQ(set->prefix_index().size(), keys.size());
  // The conversation goes on: back to the same replica.
  for (int i = 0; i < 5; ++i) {
    std::optional<ReplicaSet::Choice> next =
        set->pick("m", set->prefix_index().prefix_keys("a conversation, continued"), {});
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->replica, first->replica);
    EXPECT_EQ(next->reason, RouteReason::kPrefix);
  }
}

TEST(ReplicaSetPickTest, CacheAwareLongerPrefixWins) {
  auto set = make_set(3, RoutingPolicy::kCacheAware);
  PrefixIndex& index = set->prefix_index();
  index.record(index.prefix_keys("aaaabbbbccccdddd"), 2);
  index.record(index.prefix_keys("aaaabbbb"), 0);  // the shorter prefix now on 0
  // A prompt sharing only the short prefix goes to 0. (Asked first: each pick records its
  // whole prompt for the chosen replica, the short prefix included.)
  std::optional<ReplicaSet::Choice> choice =
      set->pick("m", index.prefix_keys("aaaabbbbzzzz"), {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 0);
  EXPECT_EQ(choice->reason, RouteReason::kPrefix);
  EXPECT_EQ(choice->prefix_chunks, 2u);

  // One sharing the long prefix goes to 2, though 0 holds its first chunks.
  choice = set->pick("m", index.prefix_keys("aaaabbbbccccddddeeee"), {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 2);
  EXPECT_EQ(choice->reason, RouteReason::kPrefix);
  EXPECT_EQ(choice->prefix_chunks, 4u);
}

TEST(ReplicaSetPickTest, CacheAwareGivesWayToLoad) {
  auto set = make_set(2, RoutingPolicy::kCacheAware);
  PrefixIndex& index = set->prefix_index();
  const std::vector<uint64_t> keys = index.prefix_keys("aaaabbbb");
  index.record(keys, 0);
  replica(*set, 1).begin_request(50);
  // The limit is balance_factor (2) × least (50) + slack (100) = 200.
  replica(*set, 0).begin_request(200);
  std::optional<ReplicaSet::Choice> choice = set->pick("m", keys, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 0);  // at the limit: still the holder
  EXPECT_EQ(choice->reason, RouteReason::kPrefix);

  replica(*set, 0).begin_request(1);  // 201: past it
  choice = set->pick("m", keys, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 1);
  EXPECT_EQ(choice->reason, RouteReason::kLoad);
  EXPECT_EQ(choice->prefix_chunks, 0u);
  // The prefix now belongs to the replica that got it.
  EXPECT_EQ(index.longest_match(keys, [](int) { return true; })->replica, 1);
}

TEST(ReplicaSetPickTest, CacheAwareSkipsAHolderThatIsDownOrTried) {
  auto set = make_set(2, RoutingPolicy::kCacheAware);
  PrefixIndex& index = set->prefix_index();
  const std::vector<uint64_t> keys = index.prefix_keys("aaaabbbb");
  index.record(keys, 0);

  std::optional<ReplicaSet::Choice> choice = set->pick("m", keys, {0});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 1);
  EXPECT_EQ(choice->reason, RouteReason::kLoad);

  index.record(keys, 0);
  replica(*set, 0).set_up(false);
  choice = set->pick("m", keys, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 1);
  EXPECT_EQ(choice->reason, RouteReason::kLoad);
}

TEST(ReplicaSetPickTest, CacheAwareSkipsAHolderThatNoLongerServesTheModel) {
  auto set = make_set(2, RoutingPolicy::kCacheAware);
  PrefixIndex& index = set->prefix_index();
  const std::vector<uint64_t> keys = index.prefix_keys("aaaabbbb");
  index.record(keys, 0);
  replica(*set, 0).set_models({json::object{{"id", "other"}}});
  std::optional<ReplicaSet::Choice> choice = set->pick("m", keys, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->replica->index(), 1);
  EXPECT_EQ(choice->reason, RouteReason::kLoad);
}

TEST(ReplicaSetPickTest, FollowsReplicasGoingUpAndDown) {
  auto set = make_set(2, RoutingPolicy::kLeastLoad);
  replica(*set, 0).set_up(false);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pick_index(*set, "m"), 1);
  replica(*set, 1).set_up(false);
  EXPECT_EQ(pick_index(*set, "m"), -1);
  replica(*set, 0).set_up(true);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pick_index(*set, "m"), 0);
}

TEST(ReplicaSetPickTest, FollowsModelChanges) {
  auto set = make_set(2, RoutingPolicy::kLeastLoad);
  replica(*set, 0).set_models({json::object{{"id", "n"}}});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pick_index(*set, "m"), 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pick_index(*set, "n"), 0);
  replica(*set, 1).set_models({json::object{{"id", "n"}}});
  // Now nobody serves m.
  EXPECT_EQ(set->pick("m", {}, {})->reason, RouteReason::kAnyReplica);
  EXPECT_EQ(set->pick("n", {}, {})->reason, RouteReason::kLoad);
}

TEST(ReplicaSetTest, ModelsOfTheUpReplicasOnceEach) {
  auto set = make_set(3, RoutingPolicy::kCacheAware);
  replica(*set, 0).set_models({json::object{{"id", "a"}}, json::object{{"id", "b"}}});
  replica(*set, 1).set_models({json::object{{"id", "b"}}, json::object{{"id", "c"}}});
  replica(*set, 2).set_models({json::object{{"id", "d"}}});
  replica(*set, 2).set_up(false);
  const json::array models = set->models();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].at("id").as_string(), "a");
  EXPECT_EQ(models[1].at("id").as_string(), "b");
  EXPECT_EQ(models[2].at("id").as_string(), "c");
}

TEST(RouteReasonTest, Names) {
  EXPECT_STREQ(route_reason_name(RouteReason::kPrefix), "prefix");
  EXPECT_STREQ(route_reason_name(RouteReason::kLoad), "load");
  EXPECT_STREQ(route_reason_name(RouteReason::kRoundRobin), "round_robin");
  EXPECT_STREQ(route_reason_name(RouteReason::kAnyReplica), "any_replica");
}

}  // namespace
}  // namespace tachyon::router

// ReplicaSet: the replicas behind the router and the choice of one for each request.
//
// Candidates are the replicas that are up and serve the request's model (when no replica, up
// or down, serves it: any replica that is up, which answers the 404 a single server would;
// when those serving it are all down: none, and the client gets 503). Among them:
//   cache-aware: the replica that served the longest prefix of this prompt (PrefixIndex),
//                unless its outstanding tokens exceed balance_factor × the least loaded
//                replica's + balance_slack_tokens; otherwise (or with no prefix known) the
//                least loaded one;
//   least-load:  fewest outstanding tokens (then requests, then in turn);
//   round-robin: in turn.
// The prompt's prefixes are then recorded for the chosen replica. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "router/prefix_index.h"
#include "router/replica.h"
#include "router/router_options.h"

namespace tachyon::router {

// Why a replica was chosen (a /metrics label).
enum class RouteReason { kPrefix, kLoad, kRoundRobin, kAnyReplica };
const char* route_reason_name(RouteReason reason);
inline constexpr int kNumRouteReasons = 4;

class ReplicaSet {
 public:
  // The URLs must parse (parse_replica_url); every replica starts down until checked.
  static Result<std::unique_ptr<ReplicaSet>> create(const RouterOptions& options);

  struct Choice {
    Replica* replica = nullptr;
    RouteReason reason = RouteReason::kLoad;
    size_t prefix_chunks = 0;  // of the matched prefix (cache-aware)
  };
  // A replica for `model` (empty: any), skipping the indices in `tried`; none when no
  // replica is up. `prefix_keys`: PrefixIndex::prefix_keys of the prompt.
  std::optional<Choice> pick(std::string_view model, const std::vector<uint64_t>& prefix_keys,
                             const std::vector<int>& tried);

  std::vector<std::unique_ptr<Replica>>& replicas() { return replicas_; }
  const std::vector<std::unique_ptr<Replica>>& replicas() const { return replicas_; }
  size_t num_up() const;
  // Every model the replicas that are up serve, once each, in replica order.
  boost::json::array models() const;
  PrefixIndex& prefix_index() { return prefix_index_; }
  const PrefixIndex& prefix_index() const { return prefix_index_; }
  RoutingPolicy policy() const { return policy_; }

 private:
  ReplicaSet(const RouterOptions& options, std::vector<std::unique_ptr<Replica>> replicas);

  std::vector<std::unique_ptr<Replica>> replicas_;
  PrefixIndex prefix_index_;
  const RoutingPolicy policy_;
  const double balance_factor_;
  const int64_t balance_slack_tokens_;
  std::atomic<uint64_t> next_turn_{0};
};

}  // namespace tachyon::router

#include "router/replica_set.h"

#include <algorithm>
#include <set>
#include <string>

namespace tachyon::router {

const char* route_reason_name(RouteReason reason) {
  switch (reason) {
    case RouteReason::kPrefix:
      return "prefix";
    case RouteReason::kLoad:
      return "load";
    case RouteReason::kRoundRobin:
      return "round_robin";
    case RouteReason::kAnyReplica:
      return "any_replica";
  }
  return "?";
}

Result<std::unique_ptr<ReplicaSet>> ReplicaSet::create(const RouterOptions& options) {
  if (options.replica_urls.empty()) return invalid_argument("the router needs at least one replica");
  std::vector<std::unique_ptr<Replica>> replicas;
  std::set<std::string> seen;
  for (const std::string& url : options.replica_urls) {
    TACHYON_ASSIGN_OR_RETURN(ReplicaAddress address, parse_replica_url(url));
    if (!seen.insert(address.url).second) {
      return invalid_argument("replica " + address.url + " is given twice");
    }
    replicas.push_back(
        std::make_unique<Replica>(static_cast<int>(replicas.size()), std::move(address)));
  }
  return std::unique_ptr<ReplicaSet>(new ReplicaSet(options, std::move(replicas)));
}

ReplicaSet::ReplicaSet(const RouterOptions& options, std::vector<std::unique_ptr<Replica>> replicas)
    : replicas_(std::move(replicas)),
      prefix_index_(options.prefix_chunk_bytes, options.prefix_table_entries),
      policy_(options.policy),
      balance_factor_(options.balance_factor),
      balance_slack_tokens_(options.balance_slack_tokens) {}

std::optional<ReplicaSet::Choice> ReplicaSet::pick(std::string_view model,
                                                   const std::vector<uint64_t>& prefix_keys,
                                                   const std::vector<int>& tried) {
  std::vector<Replica*> candidates;
  auto usable = [&](const Replica& replica) {
    return replica.up() &&
           std::find(tried.begin(), tried.end(), replica.index()) == tried.end();
  };
  for (const auto& replica : replicas_) {
    if (usable(*replica) && (model.empty() || replica->serves(model))) {
      candidates.push_back(replica.get());
    }
  }
  bool model_served = true;
  if (candidates.empty()) {
    // Replicas serve it but are down or tried: none can answer (503, not a misleading 404).
    const bool model_known = std::any_of(replicas_.begin(), replicas_.end(), [&](const auto& r) {
      return !model.empty() && r->serves(model);
    });
    if (model_known) return std::nullopt;
    // Nobody serves it: any replica answers as a single server would (404 model_not_found,
    // or 401 before that).
    model_served = model.empty();
    for (const auto& replica : replicas_) {
      if (usable(*replica)) candidates.push_back(replica.get());
    }
    if (candidates.empty()) return std::nullopt;
  }
  const uint64_t turn = next_turn_.fetch_add(1, std::memory_order_relaxed);
  Choice choice;
  if (policy_ == RoutingPolicy::kRoundRobin) {
    choice.replica = candidates[turn % candidates.size()];
    choice.reason = RouteReason::kRoundRobin;
  } else {
    // Least loaded; ties go in turn so that an idle set spreads new conversations.
    const size_t start = turn % candidates.size();
    Replica* least = nullptr;
    for (size_t i = 0; i < candidates.size(); ++i) {
      Replica* replica = candidates[(start + i) % candidates.size()];
      if (least == nullptr || replica->outstanding_tokens() < least->outstanding_tokens() ||
          (replica->outstanding_tokens() == least->outstanding_tokens() &&
           replica->outstanding_requests() < least->outstanding_requests())) {
        least = replica;
      }
    }
    choice.replica = least;
    choice.reason = RouteReason::kLoad;
    if (policy_ == RoutingPolicy::kCacheAware && !prefix_keys.empty()) {
      std::optional<PrefixIndex::Match> match =
          prefix_index_.longest_match(prefix_keys, [&](int index) {
            return std::find_if(candidates.begin(), candidates.end(), [&](const Replica* r) {
                     return r->index() == index;
                   }) != candidates.end();
          });
      if (match) {
        Replica* holder = replicas_[match->replica].get();
        const double limit = balance_factor_ * static_cast<double>(least->outstanding_tokens()) +
                             static_cast<double>(balance_slack_tokens_);
        if (static_cast<double>(holder->outstanding_tokens()) <= limit) {
          choice.replica = holder;
          choice.reason = RouteReason::kPrefix;
          choice.prefix_chunks = match->chunks;
        }
      }
    }
  }
  if (!model_served) choice.reason = RouteReason::kAnyReplica;
  if (policy_ == RoutingPolicy::kCacheAware && !prefix_keys.empty() && model_served) {
    prefix_index_.record(prefix_keys, choice.replica->index());
  }
  return choice;
}

size_t ReplicaSet::num_up() const {
  return static_cast<size_t>(std::count_if(replicas_.begin(), replicas_.end(),
                                           [](const auto& replica) { return replica->up(); }));
}

boost::json::array ReplicaSet::models() const {
  boost::json::array models;
  std::set<std::string> seen;
  for (const auto& replica : replicas_) {
    if (!replica->up()) continue;
    for (boost::json::object& model : replica->models()) {
      const boost::json::value* id = model.if_contains("id");
      if (id == nullptr || !id->is_string()) continue;
      if (seen.insert(std::string(id->get_string())).second) models.push_back(std::move(model));
    }
  }
  return models;
}

}  // namespace tachyon::router

#include "router/router_options.h"

#include <fmt/format.h>

namespace tachyon::router {

Result<RoutingPolicy> parse_routing_policy(std::string_view name) {
  if (name == "cache-aware" || name == "cache_aware") return RoutingPolicy::kCacheAware;
  if (name == "least-load" || name == "least_load") return RoutingPolicy::kLeastLoad;
  if (name == "round-robin" || name == "round_robin") return RoutingPolicy::kRoundRobin;
  return invalid_argument(fmt::format(
      "unknown routing policy '{}' (cache-aware, least-load or round-robin)", name));
}

const char* routing_policy_name(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kCacheAware:
      return "cache-aware";
    case RoutingPolicy::kLeastLoad:
      return "least-load";
    case RoutingPolicy::kRoundRobin:
      return "round-robin";
  }
  return "?";
}

}  // namespace tachyon::router

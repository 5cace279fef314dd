// What `tachyon router` (and `tachyon serve --replicas N`) tells the router: the replicas, how
// to pick among them, and the listener's own limits (the same as a server's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/serve_options.h"

namespace tachyon::router {

enum class RoutingPolicy {
  kCacheAware,  // the replica holding the longest prefix, unless much busier; else least load
  kLeastLoad,   // fewest outstanding tokens
  kRoundRobin,  // in turn (for comparison: throws prefix caches away)
};
Result<RoutingPolicy> parse_routing_policy(std::string_view name);
const char* routing_policy_name(RoutingPolicy policy);

struct RouterOptions {
  // host, port, client-side limits and timeouts, --admin-key (guards /metrics when set).
  server::ServeOptions listen;
  std::vector<std::string> replica_urls;
  RoutingPolicy policy = RoutingPolicy::kCacheAware;
  double health_interval_seconds = 1;  // between health checks of each replica
  double connect_timeout_seconds = 2;  // connecting to a replica (and a health check's answer)
  // Prefix routing: the text is cut into chunks of this many bytes (about 32 tokens), and the
  // table remembers this many prefixes.
  size_t prefix_chunk_bytes = 128;
  size_t prefix_table_entries = 1 << 20;
  // The prefix's replica is kept while its outstanding tokens are at most
  // factor × the least loaded replica's + slack; past that the least loaded one gets it.
  double balance_factor = 2;
  int64_t balance_slack_tokens = 4096;
};

}  // namespace tachyon::router

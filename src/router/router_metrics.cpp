#include "router/router_metrics.h"

#include <fmt/format.h>

#include "server/server_metrics.h"

namespace tachyon::router {
namespace {

void append_header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

RouterMetrics::RouterMetrics()
    : forward_overhead_(Histogram::exponential_bounds(0.00005, 2, 16)),
      time_to_first_byte_(Histogram::exponential_bounds(0.001, 2, 18)) {}

std::string RouterMetrics::render(const ReplicaSet& replicas) const {
  std::string out;
  append_header(out, "tachyon:router_requests_total", "counter",
                "Requests sent to a replica, by why it was chosen.");
  for (int i = 0; i < kNumRouteReasons; ++i) {
    out += fmt::format("tachyon:router_requests_total{{reason=\"{}\"}} {}\n",
                       route_reason_name(static_cast<RouteReason>(i)), routed_[i].load());
  }
  const std::pair<const char*, const std::atomic<uint64_t>*> counters[] = {
      {"retries", &retries_},
      {"no_replica", &no_replica_},
      {"client_hangups", &client_hangups_},
      {"broken_responses", &broken_responses_}};
  const char* helps[] = {
      "Requests sent again to another replica after one failed before answering or said 503.",
      "Requests answered 503 because no replica was up.",
      "Clients that hung up before their answer ended (the replica's request was cancelled).",
      "Responses cut by their replica's failure after they started."};
  for (size_t i = 0; i < std::size(counters); ++i) {
    const std::string name = fmt::format("tachyon:router_{}_total", counters[i].first);
    append_header(out, name.c_str(), "counter", helps[i]);
    out += fmt::format("{} {}\n", name, counters[i].second->load());
  }
  struct ReplicaSeries {
    const char* name;
    const char* type;
    const char* help;
    int64_t (*value)(const Replica&);
  };
  const ReplicaSeries series[] = {
      {"tachyon:router_replica_up", "gauge", "1 while the replica is healthy and routed to.",
       [](const Replica& r) -> int64_t { return r.up() ? 1 : 0; }},
      {"tachyon:router_replica_outstanding_requests", "gauge",
       "Requests sent to the replica and not answered yet.",
       [](const Replica& r) { return r.outstanding_requests(); }},
      {"tachyon:router_replica_outstanding_tokens", "gauge",
       "Estimated tokens (prompt + completion cap) of those requests.",
       [](const Replica& r) { return r.outstanding_tokens(); }},
      {"tachyon:router_replica_requests_total", "counter", "Requests sent to the replica.",
       [](const Replica& r) { return static_cast<int64_t>(r.requests_total.load()); }},
      {"tachyon:router_replica_failures_total", "counter",
       "Requests the replica failed to answer (connect, send or read failed).",
       [](const Replica& r) { return static_cast<int64_t>(r.failures_total.load()); }},
  };
  for (const ReplicaSeries& s : series) {
    append_header(out, s.name, s.type, s.help);
    for (const auto& replica : replicas.replicas()) {
      out += fmt::format("{}{{replica=\"{}\"}} {}\n", s.name,
                         server::escape_prometheus_label(replica->url()), s.value(*replica));
    }
  }
  append_header(out, "tachyon:router_prefix_entries", "gauge",
                "Prompt prefixes the cache-aware routing remembers.");
  out += fmt::format("tachyon:router_prefix_entries {}\n",
                     replicas.prefix_index().size());
  server::append_prometheus_histogram(
      out, "tachyon:router_forward_overhead_seconds",
      "Seconds from a request's arrival to its replica having it (parse, route, connect, send).",
      "", forward_overhead_.snapshot());
  server::append_prometheus_histogram(
      out, "tachyon:router_time_to_first_byte_seconds",
      "Seconds from a request's arrival to its replica's first response byte.", "",
      time_to_first_byte_.snapshot());
  return out;
}

}  // namespace tachyon::router

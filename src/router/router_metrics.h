// RouterMetrics: what the router measures (requests by routing reason, retries, refusals,
// hang-ups, its own added latency) and the Prometheus text of its /metrics, with per-replica
// series (up, load, requests, failures). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/histogram.h"
#include "router/replica_set.h"

namespace tachyon::router {

class RouterMetrics {
 public:
  RouterMetrics();

  void count_routed(RouteReason reason) {
    routed_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
  // A request sent again to another replica after one failed before answering (or said 503).
  void count_retry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  // Answered 503 by the router itself: no replica up.
  void count_no_replica() { no_replica_.fetch_add(1, std::memory_order_relaxed); }
  void count_client_hangup() { client_hangups_.fetch_add(1, std::memory_order_relaxed); }
  // A response cut by its replica's failure after it started (streams end with an error event).
  void count_broken_response() { broken_responses_.fetch_add(1, std::memory_order_relaxed); }
  // Seconds the router spent before the replica had the request (parse, pick, connect, send).
  void observe_forward_overhead(double seconds) { forward_overhead_.observe(seconds); }
  // Seconds from the request's arrival to its replica's first response byte.
  void observe_time_to_first_byte(double seconds) { time_to_first_byte_.observe(seconds); }

  std::string render(const ReplicaSet& replicas) const;

 private:
  std::array<std::atomic<uint64_t>, kNumRouteReasons> routed_{};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> no_replica_{0};
  std::atomic<uint64_t> client_hangups_{0};
  std::atomic<uint64_t> broken_responses_{0};
  Histogram forward_overhead_;
  Histogram time_to_first_byte_;
};

}  // namespace tachyon::router

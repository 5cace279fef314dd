// Replica: one `tachyon serve` behind the router: where it listens, what its health checks
// said (up or down, the models it serves), and the load the router has sent it and not seen
// answered yet. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "core/status.h"

namespace tachyon::router {

// "http://host:port" (a trailing slash is fine; "host:port" too) → host and port.
struct ReplicaAddress {
  std::string host;
  std::string port;
  std::string url;  // normalised: http://host:port
};
Result<ReplicaAddress> parse_replica_url(std::string_view url);

class Replica {
 public:
  Replica(int index, ReplicaAddress address) : index_(index), address_(std::move(address)) {}

  int index() const { return index_; }
  const std::string& host() const { return address_.host; }
  const std::string& port() const { return address_.port; }
  const std::string& url() const { return address_.url; }
  // host:port, for the Host header.
  std::string authority() const {
    const bool ipv6 = address_.host.find(':') != std::string::npos;
    return ipv6 ? "[" + address_.host + "]:" + address_.port : address_.host + ":" + address_.port;
  }

  // Up: its last health check answered 200 and no request failed on it since.
  bool up() const { return up_.load(std::memory_order_acquire); }
  // Returns whether it changed.
  bool set_up(bool up) { return up_.exchange(up, std::memory_order_acq_rel) != up; }

  // The model objects its /health listed (as /v1/models lists them).
  void set_models(std::vector<boost::json::object> models);
  std::vector<boost::json::object> models() const;
  bool serves(std::string_view model_id) const;

  // Load: requests and estimated tokens (prompt + completion) sent and not answered yet.
  void begin_request(int64_t tokens);
  void end_request(int64_t tokens);
  int64_t outstanding_requests() const { return outstanding_requests_.load(); }
  int64_t outstanding_tokens() const { return outstanding_tokens_.load(); }

  // Idle keep-alive connections to the replica (socket descriptors), so that a request does
  // not pay a TCP handshake and the replica's close. take_idle_connection() skips and closes
  // those the replica has closed or that idled past kMaxIdle (the replica's own idle timeout
  // is longer); -1 when none is left.
  int take_idle_connection();
  void put_idle_connection(int fd);
  ~Replica();

  // Counters for /metrics.
  std::atomic<uint64_t> requests_total{0};
  std::atomic<uint64_t> failures_total{0};  // no answer: connect, write or read failed

 private:
  const int index_;
  const ReplicaAddress address_;
  std::atomic<bool> up_{false};
  std::atomic<int64_t> outstanding_requests_{0};
  std::atomic<int64_t> outstanding_tokens_{0};
  mutable std::mutex mutex_;
  std::vector<boost::json::object> models_;

  struct IdleConnection {
    int fd;
    std::chrono::steady_clock::time_point since;
  };
  static constexpr std::chrono::seconds kMaxIdle{2};
  static constexpr size_t kMaxIdleConnections = 64;
  std::mutex idle_mutex_;
  std::vector<IdleConnection> idle_;  // most recently used last
};

}  // namespace tachyon::router

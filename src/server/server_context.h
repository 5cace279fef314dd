// ServerContext: the state every connection of one HttpServer shares: options, metrics, the
// served model (null while it loads), the drain flag, and the engine requests in flight (so a
// drain can cancel what is left at its deadline). Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "gateway/gateway.h"
#include "runtime/engine_request.h"
#include "server/serve_options.h"
#include "server/served_model.h"
#include "server/server_metrics.h"

namespace tachyon::server {

class ServerContext {
 public:
  explicit ServerContext(ServeOptions options) : options_(std::move(options)) {}

  const ServeOptions& options() const { return options_; }
  ServerMetrics& metrics() { return metrics_; }
  // API keys, limits and the usage ledger; null when the server needs no key.
  gateway::Gateway* gateway() const { return gateway_.get(); }
  void set_gateway(std::unique_ptr<gateway::Gateway> gateway) { gateway_ = std::move(gateway); }

  std::shared_ptr<const ServedModel> model() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return model_;
  }
  void set_model(std::shared_ptr<const ServedModel> model) {
    std::lock_guard<std::mutex> lock(mutex_);
    model_ = std::move(model);
  }

  bool draining() const { return draining_.load(std::memory_order_acquire); }
  void start_draining() { draining_.store(true, std::memory_order_release); }

  void add_request(RequestId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.insert(id);
  }
  void remove_request(RequestId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.erase(id);
  }
  size_t num_requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_.size();
  }
  std::vector<RequestId> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {requests_.begin(), requests_.end()};
  }

 private:
  const ServeOptions options_;
  ServerMetrics metrics_;
  std::unique_ptr<gateway::Gateway> gateway_;  // set before serving starts, then read-only
  mutable std::mutex mutex_;
  std::shared_ptr<const ServedModel> model_;
  std::unordered_set<RequestId> requests_;
  std::atomic<bool> draining_{false};
};

}  // namespace tachyon::server

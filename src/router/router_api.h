// RouterApi: the router's answer to each request (a server::RequestHandler behind the same
// HttpServer as `tachyon serve`, so clients see the same HTTP behaviour and limits).
//
// Answered here: GET /health (200 while any replica is up, with the models they serve; 503
// no_replica_available otherwise) and GET /metrics (the router's own series; needs the admin
// key when one is set). Everything else goes to a replica through ProxiedRequest, API keys
// included: the replicas check keys, limits and quotas, so their answers (and errors) reach
// the client as from a single server. GET /v1/models goes to a replica too (which checks the
// key) and its 200 is answered with the union of every replica's models.
//
// Each replica's /health is checked every health_interval (its "models" say what it serves);
// a replica that fails a check or a request is out until a check passes again.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <boost/asio/io_context.hpp>

#include "router/proxied_request.h"
#include "router/replica_set.h"
#include "router/router_metrics.h"
#include "router/router_options.h"
#include "server/request_handler.h"
#include "server/server_context.h"

namespace tachyon::router {

class RouterApi : public server::RequestHandler {
 public:
  RouterApi(server::ServerContext& context, RouterOptions options,
            std::unique_ptr<ReplicaSet> replicas);

  asio::awaitable<bool> serve(server::Connection& connection, server::HttpRequest request) override;
  void start(asio::io_context& io_context) override;
  void stop() override { stopping_.store(true); }
  size_t num_in_flight() const override;
  void cancel_in_flight() override;

 private:
  asio::awaitable<void> watch_replica(Replica& replica);
  asio::awaitable<void> check_replica(Replica& replica);
  asio::awaitable<bool> proxy(server::Connection& connection, server::HttpRequest request,
                              std::string route_model, bool union_models);

  server::ServerContext& context_;
  const RouterOptions options_;
  std::unique_ptr<ReplicaSet> replicas_;
  RouterMetrics metrics_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, std::weak_ptr<ProxiedRequest>> in_flight_;
  uint64_t next_id_ = 0;  // under mutex_
};

}  // namespace tachyon::router

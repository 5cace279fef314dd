// ProxiedRequest: one client request through the router, from picking a replica to the last
// byte of the replica's answer on the client's connection.
//
// The request goes to the replica ReplicaSet picks. A replica that cannot be reached, or that
// fails before its first response byte, is marked down and the request goes to the next one
// (the replica wrote no ledger row: usage is recorded when a request finishes); a 503
// (loading, draining, queue full) also moves on, and is what the client gets when no other
// replica does better. Once the replica answers, its status and headers go to the client and
// the body is relayed as it arrives (SSE events one by one). A replica that dies mid-stream
// ends the client's stream with an error event and no [DONE], as a single server does when a
// stream fails after its 200; it is marked down. While the replica works, a read stays pending
// on the client's socket: a client that hangs up closes the replica's connection, and the
// replica cancels the request.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core.hpp>

#include "router/replica_set.h"
#include "router/router_metrics.h"
#include "router/router_options.h"
#include "server/connection.h"
#include "server/hangup_watch.h"

namespace tachyon::router {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

class ProxiedRequest : public std::enable_shared_from_this<ProxiedRequest> {
 public:
  using Clock = std::chrono::steady_clock;

  // `union_models`: GET /v1/models, whose 200 (the replica checked the key) is answered with
  // every replica's models instead of the one replica's.
  ProxiedRequest(const RouterOptions& options, ReplicaSet& replicas, RouterMetrics& metrics,
                 server::Connection& connection, server::HttpRequest request,
                 std::string route_model, bool union_models);

  // Returns whether the client's connection may serve another request.
  asio::awaitable<bool> run();
  // From any thread (the drain's deadline): ends the exchange with the replica.
  void cancel();

 private:
  enum class Outcome {
    kAnswered,    // the client got the replica's answer (or as much as could be relayed)
    kNoAnswer,    // the replica failed before its first response byte: try another
    kRefused,     // the replica said 503: try another, keep its answer in case
    kClientGone,  // the client hung up
    kCancelled,   // the router drains and its deadline passed
  };
  asio::awaitable<Outcome> forward(Replica& replica);
  // Relays the response whose header `parser` holds; sets reusable_.
  template <typename Parser>
  asio::awaitable<Outcome> relay(Replica& replica, Parser& parser,
                                 const server::HangupWatch& watch, bool& client_gone);
  // One piece of the body to the client; false when the client is gone.
  asio::awaitable<bool> write_piece(http::response<http::buffer_body>& response,
                                    http::response_serializer<http::buffer_body>& serializer,
                                    char* data, size_t size);
  server::HttpRequest upstream_request(const Replica& replica) const;
  // upstream_ takes one of the replica's idle connections; false when it has none.
  bool adopt_idle_connection(Replica& replica);
  // The response was read to its end on a keep-alive connection: give it back to the replica.
  void keep_upstream(Replica& replica);
  void close_upstream();

  const RouterOptions& options_;
  ReplicaSet& replicas_;
  RouterMetrics& metrics_;
  server::Connection& connection_;
  server::HttpRequest request_;
  std::string route_model_;  // the model whose replicas are wanted (empty: any)
  bool union_models_;
  Clock::time_point arrival_;

  std::unique_ptr<beast::tcp_stream> upstream_;  // the current replica's connection
  beast::flat_buffer upstream_buffer_;
  std::string failure_;                          // why the last replica gave no answer
  std::optional<server::HttpResponse> refusal_;  // the last 503, sent when nothing better comes
  bool cancelled_ = false;                       // on the connection's strand
  bool reusable_ = false;
};

}  // namespace tachyon::router

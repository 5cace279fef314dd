// HttpServer: the OpenAI-compatible HTTP/1.1 server. Boost.Beast over Asio with C++20
// coroutines: one coroutine per connection on its own strand, so idle and streaming
// connections cost no thread; the io_context runs on ServeOptions::io_threads threads.
//
// Lifecycle: listen() binds (errors come back at once), run() serves until SIGINT/SIGTERM or
// shutdown(); the model may be handed over later with set_model() (routes that need it answer
// 503 until then). A drain closes the listener and idle connections, lets running requests
// finish for up to shutdown_timeout, cancels the rest, and returns from run().
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>

#include "core/status.h"
#include "server/connection.h"
#include "server/request_handler.h"
#include "server/server_context.h"

namespace tachyon::server {

class HttpServer {
 public:
  // Makes the handler of every request; it may keep the context (which outlives it).
  using HandlerFactory = std::function<std::unique_ptr<RequestHandler>(ServerContext&)>;

  // Serves the model (ApiRouter), or whatever `make_handler` makes.
  explicit HttpServer(ServeOptions options, HandlerFactory make_handler = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and starts listening (nothing is accepted before run()).
  Status listen();
  // The bound port (useful with port 0).
  int port() const { return port_; }

  // Serves on io_threads threads until a drain ends; returns the status given to shutdown()
  // (ok after a signal). Call once, after listen().
  Status run();

  // From any thread: the model is ready (nullptr: loading again).
  void set_model(std::shared_ptr<const ServedModel> model) { context_.set_model(std::move(model)); }
  // Before run(): API keys, limits and usage accounting for every request.
  void set_gateway(std::unique_ptr<gateway::Gateway> gateway) {
    context_.set_gateway(std::move(gateway));
  }
  // From any thread: drain and make run() return `status`.
  void shutdown(Status status);

  ServerContext& context() { return context_; }

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve_connection(std::shared_ptr<Connection> connection);
  // Reads one request's header and body within the header and body timeouts; false when the
  // connection must close, with `refusal` set when the client should be told why.
  asio::awaitable<bool> read_request(Connection& connection,
                                     http::request_parser<http::string_body>& parser,
                                     std::optional<ApiError>& refusal);
  // The limits a request's header must keep (version, target length, field count, Expect).
  std::optional<ApiError> check_header(const HttpRequest& request) const;
  // A connection over --max-connections: 503 and close, without reading the request.
  asio::awaitable<void> refuse_connection(asio::ip::tcp::socket socket);
  asio::awaitable<void> drain();
  void wait_for_signals();
  // Posts to every connection's strand: close it when `only_idle` is false or it is idle.
  void close_connections(bool only_idle);
  size_t num_connections();

  ServerContext context_;
  std::unique_ptr<RequestHandler> handler_;  // before io_context_: abandoned coroutines use it
  asio::io_context io_context_;
  // The acceptor, signals and the drain share one strand.
  asio::strand<asio::io_context::executor_type> control_;
  asio::ip::tcp::acceptor acceptor_;
  asio::signal_set signals_;
  int port_ = 0;
  bool draining_ = false;  // on control_
  Status exit_status_;     // on control_

  int max_connections_ = 0;  // ServeOptions::max_connections, as the descriptor limit allows
  // Refusals being answered; past kMaxRefusing a connection over the limit is just closed.
  static constexpr int kMaxRefusing = 64;
  std::atomic<int> num_refusing_{0};

  std::mutex connections_mutex_;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections_;
  std::atomic<uint64_t> next_connection_id_{1};
};

}  // namespace tachyon::server

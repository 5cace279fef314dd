#include "server/http_server.h"

#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "runtime/engine.h"

namespace tachyon::server {
namespace {

using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

template <typename Rep, typename Period>
asio::awaitable<void> sleep_for(std::chrono::duration<Rep, Period> duration) {
  asio::steady_timer timer(co_await asio::this_coro::executor, duration);
  auto [ignored] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  (void)ignored;
}

Clock::duration seconds(double value) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
}

// Logs what escaped a coroutine instead of letting it reach io_context::run.
void log_exception(const char* where, std::exception_ptr exception) {
  if (!exception) return;
  try {
    std::rethrow_exception(exception);
  } catch (const std::exception& error) {
    spdlog::error("{}: {}", where, error.what());
  } catch (...) {
    spdlog::error("{}: unknown exception", where);
  }
}

bool is_http_parse_error(const beast::error_code& error) {
  return error.category() == http::make_error_code(http::error::bad_method).category() &&
         error != http::error::end_of_stream && error != http::error::partial_message;
}

// How long a client still uploading a refused body gets to read our answer.
constexpr std::chrono::milliseconds kDiscardLimit{2000};

}  // namespace

HttpServer::HttpServer(ServeOptions options)
    : context_(std::move(options)),
      router_(context_),
      io_context_(std::max(1, context_.options().io_threads)),
      control_(asio::make_strand(io_context_)),
      acceptor_(control_),
      signals_(control_, SIGINT, SIGTERM) {}

HttpServer::~HttpServer() = default;

Status HttpServer::listen() {
  const ServeOptions& options = context_.options();
  beast::error_code error;
  tcp::resolver resolver(io_context_);
  auto endpoints =
      resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, error);
  if (error || endpoints.empty()) {
    return invalid_argument(fmt::format("cannot resolve host '{}': {}", options.host,
                                        error ? error.message() : "no addresses"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), error);
  if (!error) acceptor_.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor_.bind(endpoint, error);
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return unavailable(
        fmt::format("cannot listen on {}:{}: {}", options.host, options.port, error.message()));
  }
  port_ = acceptor_.local_endpoint(error).port();
  return Status();
}

Status HttpServer::run() {
  asio::co_spawn(control_, accept_loop(),
                 [](std::exception_ptr e) { log_exception("accept loop", e); });
  asio::post(control_, [this] { wait_for_signals(); });
  const int num_threads = std::max(1, context_.options().io_threads);
  std::vector<std::thread> threads;
  for (int i = 1; i < num_threads; ++i) threads.emplace_back([this] { io_context_.run(); });
  io_context_.run();
  for (std::thread& thread : threads) thread.join();
  return exit_status_;
}

void HttpServer::shutdown(Status status) {
  asio::post(control_, [this, status = std::move(status)] {
    if (exit_status_.ok()) exit_status_ = status;
    asio::co_spawn(control_, drain(), [](std::exception_ptr e) { log_exception("drain", e); });
  });
}

void HttpServer::wait_for_signals() {
  signals_.async_wait([this](const beast::error_code& error, int signal_number) {
    if (error) return;
    if (draining_) {
      spdlog::warn("signal {} during shutdown: stopping now", signal_number);
      io_context_.stop();
      return;
    }
    spdlog::info("signal {}: draining (at most {} s)", signal_number,
                 context_.options().shutdown_timeout_seconds);
    asio::co_spawn(control_, drain(), [](std::exception_ptr e) { log_exception("drain", e); });
    wait_for_signals();
  });
}

asio::awaitable<void> HttpServer::accept_loop() {
  for (;;) {
    auto [error, socket] = co_await acceptor_.async_accept(asio::make_strand(io_context_),
                                                           asio::as_tuple(asio::use_awaitable));
    if (draining_ || !acceptor_.is_open()) co_return;
    if (error) {
      // Out of file descriptors and the like: back off instead of spinning.
      spdlog::warn("accept failed: {}", error.message());
      co_await sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto connection = std::make_shared<Connection>(std::move(socket), next_connection_id_++);
    {
      std::lock_guard<std::mutex> lock(connections_mutex_);
      connections_[connection->id()] = connection;
    }
    asio::co_spawn(connection->stream().get_executor(), serve_connection(connection),
                   [](std::exception_ptr e) { log_exception("connection", e); });
  }
}

asio::awaitable<void> HttpServer::serve_connection(std::shared_ptr<Connection> connection) {
  const ServeOptions& options = context_.options();
  try {
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
      parser.body_limit(options.max_body_bytes);
      connection->idle = connection->buffer().size() == 0;
      if (connection->idle && context_.draining()) break;
      connection->stream().expires_after(seconds(options.idle_timeout_seconds));
      auto [error, read] = co_await http::async_read_header(
          connection->stream(), connection->buffer(), parser, asio::as_tuple(asio::use_awaitable));
      connection->idle = false;
      if (!error && parser.get()[http::field::expect] == "100-continue" && !parser.is_done()) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        auto [write_error, written] = co_await asio::async_write(
            connection->stream(), asio::buffer(kContinue), asio::as_tuple(asio::use_awaitable));
        (void)written;
        if (write_error) break;
      }
      if (!error && !parser.is_done()) {
        auto [body_error, body_read] =
            co_await http::async_read(connection->stream(), connection->buffer(), parser,
                                      asio::as_tuple(asio::use_awaitable));
        (void)body_read;
        error = body_error;
      }
      (void)read;
      if (error) {
        // Answer what we can tell the client about; always close afterwards, since the rest
        // of its bytes cannot be framed.
        std::optional<ApiError> api_error;
        if (error == http::error::body_limit) {
          api_error = ApiError::request_too_large(options.max_body_bytes);
        } else if (error == http::error::header_limit) {
          api_error = ApiError::invalid_request("The request headers are too large", std::nullopt,
                                                "headers_too_large");
          api_error->status = 431;
        } else if (is_http_parse_error(error) && parser.got_some()) {
          api_error =
              ApiError::invalid_request(fmt::format("Malformed HTTP request: {}", error.message()),
                                        std::nullopt, "bad_http_request");
        }
        if (api_error) {
          connection->begin_request(parser.get(), /*draining=*/true);
          connection->stream().expires_after(std::chrono::seconds(10));
          if (co_await connection->send_error(*api_error)) {
            co_await connection->discard_input(kDiscardLimit);
          }
        }
        break;
      }
      connection->stream().expires_never();
      if (!co_await router_.serve(*connection, parser.release())) break;
    }
  } catch (const std::exception& error) {
    spdlog::error("connection {}: {}", connection->id(), error.what());
  }
  connection->close();
  std::lock_guard<std::mutex> lock(connections_mutex_);
  connections_.erase(connection->id());
}

void HttpServer::close_connections(bool only_idle) {
  std::vector<std::shared_ptr<Connection>> alive;
  {
    std::lock_guard<std::mutex> lock(connections_mutex_);
    for (auto& [id, weak] : connections_) {
      if (auto connection = weak.lock()) alive.push_back(std::move(connection));
    }
  }
  for (std::shared_ptr<Connection>& connection : alive) {
    // The connection's state belongs to its strand.
    asio::post(connection->stream().get_executor(), [connection, only_idle] {
      if (!only_idle || connection->idle) connection->close();
    });
  }
}

size_t HttpServer::num_connections() {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  return connections_.size();
}

asio::awaitable<void> HttpServer::drain() {
  if (draining_) co_return;
  draining_ = true;
  context_.start_draining();
  beast::error_code ignored;
  acceptor_.close(ignored);
  const Clock::time_point deadline =
      Clock::now() + seconds(context_.options().shutdown_timeout_seconds);
  while (context_.num_requests() > 0 && Clock::now() < deadline) {
    close_connections(/*only_idle=*/true);
    co_await sleep_for(std::chrono::milliseconds(50));
  }
  if (size_t left = context_.num_requests(); left > 0) {
    spdlog::warn("shutdown timeout: cancelling {} running request(s)", left);
    if (std::shared_ptr<const ServedModel> model = context_.model(); model && model->engine) {
      for (RequestId id : context_.requests()) model->engine->cancel(id);
    }
    const Clock::time_point cancel_deadline = Clock::now() + std::chrono::seconds(5);
    while (context_.num_requests() > 0 && Clock::now() < cancel_deadline) {
      co_await sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Give answers just written a moment to leave, then close everything.
  close_connections(/*only_idle=*/true);
  const Clock::time_point close_deadline = Clock::now() + std::chrono::seconds(2);
  while (num_connections() > 0 && Clock::now() < close_deadline) {
    close_connections(/*only_idle=*/false);
    co_await sleep_for(std::chrono::milliseconds(20));
  }
  signals_.cancel(ignored);
  io_context_.stop();
}

}  // namespace tachyon::server

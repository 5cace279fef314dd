#include "server/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <iterator>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "server/api_router.h"

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

// Raises the soft descriptor limit towards the hard one so that `wanted` connections fit,
// and returns how many do fit (keeping some descriptors for the model, the database, logs).
int connection_limit(int wanted) {
  constexpr rlim_t kReserved = 128;
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return wanted;
  const rlim_t needed = static_cast<rlim_t>(wanted) + kReserved;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    struct rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? needed : std::min(needed, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return wanted;
  const int fits = static_cast<int>(std::max<rlim_t>(limit.rlim_cur, 2 * kReserved) - kReserved);
  spdlog::warn("--max-connections {} lowered to {}: the process may open {} descriptors", wanted,
               fits, static_cast<uint64_t>(limit.rlim_cur));
  return fits;
}

bool is_http_parse_error(const beast::error_code& error) {
  return error.category() == http::make_error_code(http::error::bad_method).category() &&
         error != http::error::end_of_stream && error != http::error::partial_message;
}

// How long a client still uploading a refused body gets to read our answer.
constexpr std::chrono::milliseconds kDiscardLimit{2000};
// How long a closed connection waits for the client's own FIN after ours (its unread bytes
// would otherwise turn the close into a reset).
constexpr std::chrono::milliseconds kLingerLimit{2000};
// The first read of a request: small requests arrive in one.
constexpr size_t kFirstReadBytes = 8192;

}  // namespace

HttpServer::HttpServer(ServeOptions options, HandlerFactory make_handler)
    : context_(std::move(options)),
      handler_(make_handler ? make_handler(context_) : std::make_unique<ApiRouter>(context_)),
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
  max_connections_ = connection_limit(options.max_connections);
  return Status();
}

Status HttpServer::run() {
  asio::co_spawn(control_, accept_loop(),
                 [](std::exception_ptr e) { log_exception("accept loop", e); });
  asio::post(control_, [this] { wait_for_signals(); });
  handler_->start(io_context_);
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
    if (context_.options().end_requests_on_signal) {
      spdlog::warn("signal {}: the job is ending (a rank stopped, or mpirun was stopped); "
                   "running requests end now with 503",
                   signal_number);
      handler_->abandon_in_flight(
          cancelled("the job over several processes is ending (a rank stopped, or mpirun was "
                    "stopped)"));
    } else {
      spdlog::info("signal {}: draining (at most {} s)", signal_number,
                   context_.options().shutdown_timeout_seconds);
    }
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
    if (num_connections() >= static_cast<size_t>(max_connections_)) {
      context_.metrics().count_connection_refused();
      if (num_refusing_.load() >= kMaxRefusing) {
        socket.close(ignored);  // a flood: no answer for the rest
        continue;
      }
      num_refusing_.fetch_add(1);
      const asio::any_io_executor executor = socket.get_executor();
      asio::co_spawn(executor, refuse_connection(std::move(socket)), [this](std::exception_ptr e) {
        num_refusing_.fetch_sub(1);
        log_exception("refused connection", e);
      });
      continue;
    }
    context_.metrics().count_connection_opened();
    auto connection = std::make_shared<Connection>(std::move(socket), next_connection_id_++);
    {
      std::lock_guard<std::mutex> lock(connections_mutex_);
      connections_[connection->id()] = connection;
    }
    asio::co_spawn(connection->stream().get_executor(), serve_connection(connection),
                   [](std::exception_ptr e) { log_exception("connection", e); });
  }
}

asio::awaitable<void> HttpServer::refuse_connection(tcp::socket socket) {
  // Answered before the request is read: whatever the client asks, the answer is the same.
  auto connection = std::make_shared<Connection>(std::move(socket), 0);
  connection->begin_request(HttpRequest{}, /*draining=*/true);
  connection->stream().expires_after(std::chrono::seconds(2));
  ApiError error = ApiError::unavailable(
      fmt::format("The server has {} connections open, its limit (--max-connections); try "
                  "again shortly",
                  max_connections_),
      "server_overloaded", 1);
  if (co_await connection->send_error(error)) {
    co_await connection->close_gracefully(std::chrono::milliseconds(500));
  }
  connection->close();
}

asio::awaitable<void> HttpServer::serve_connection(std::shared_ptr<Connection> connection) {
  const ServeOptions& options = context_.options();
  try {
    for (;;) {
      // Between requests: wait for the next one's first byte (a pipelined one may be here).
      connection->idle = connection->buffer().size() == 0;
      if (connection->idle) {
        if (context_.draining()) break;
        connection->arm_read_deadline(seconds(options.idle_timeout_seconds));
        beast::flat_buffer& buffer = connection->buffer();
        auto [error, read] = co_await connection->stream().async_read_some(
            buffer.prepare(kFirstReadBytes), asio::as_tuple(asio::use_awaitable));
        connection->disarm_read_deadline();
        connection->idle = false;
        // Idle too long, hung up, or closed by a drain: nothing was asked, nothing to answer.
        if (error) break;
        buffer.commit(read);
      }
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
      parser.body_limit(options.max_body_bytes);
      std::optional<ApiError> refusal;
      const bool whole = co_await read_request(*connection, parser, refusal);
      if (!whole) {
        // Answer what we can tell the client about; always close afterwards, since the rest
        // of its bytes cannot be framed.
        if (refusal) {
          context_.metrics().count_http_refusal();
          connection->begin_request(parser.get(), /*draining=*/true);
          connection->stream().expires_after(std::chrono::seconds(10));
          if (co_await connection->send_error(*refusal)) {
            co_await connection->discard_input(kDiscardLimit);
          }
        }
        break;
      }
      // The answer may take long (a stream); the engine's deadline bounds it, not the socket.
      connection->stream().expires_never();
      const bool reusable = co_await handler_->serve(*connection, parser.release());
      if (!reusable) break;
      // The client or we said "Connection: close" (or it spoke HTTP/1.0 without keep-alive).
      if (!connection->keep_alive()) {
        co_await connection->close_gracefully(kLingerLimit);
        break;
      }
    }
  } catch (const std::exception& error) {
    spdlog::error("connection {}: {}", connection->id(), error.what());
  }
  connection->close();
  context_.metrics().count_connection_closed();
  std::lock_guard<std::mutex> lock(connections_mutex_);
  connections_.erase(connection->id());
}

asio::awaitable<bool> HttpServer::read_request(Connection& connection,
                                               http::request_parser<http::string_body>& parser,
                                               std::optional<ApiError>& refusal) {
  const ServeOptions& options = context_.options();
  connection.arm_read_deadline(seconds(options.header_timeout_seconds));
  auto [error, read] = co_await http::async_read_header(
      connection.stream(), connection.buffer(), parser, asio::as_tuple(asio::use_awaitable));
  (void)read;
  connection.disarm_read_deadline();
  if (!error) {
    refusal = check_header(parser.get());
    if (refusal) co_return false;
  }
  if (!error && !parser.is_done()) {
    const HttpRequest& request = parser.get();
    // RFC 9110 section 10.1.1: only an HTTP/1.1 client waits for "100 Continue" (a 1.0 one
    // sends its body anyway). A body over the limit was refused from its length already.
    if (request.version() >= 11 && beast::iequals(request[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      auto [write_error, written] = co_await asio::async_write(
          connection.stream(), asio::buffer(kContinue), asio::as_tuple(asio::use_awaitable));
      (void)written;
      if (write_error) co_return false;
    }
    connection.arm_read_deadline(seconds(options.body_timeout_seconds));
    auto [body_error, body_read] = co_await http::async_read(
        connection.stream(), connection.buffer(), parser, asio::as_tuple(asio::use_awaitable));
    (void)body_read;
    connection.disarm_read_deadline();
    error = body_error;
  }
  if (!error) co_return true;
  if (connection.read_timed_out()) {
    const bool in_body = parser.is_header_done();
    refusal = ApiError::http_protocol(
        408,
        fmt::format("The request {} did not arrive within {} seconds", in_body ? "body" : "headers",
                    in_body ? options.body_timeout_seconds : options.header_timeout_seconds),
        "request_timeout");
  } else if (error == http::error::body_limit) {
    refusal = ApiError::request_too_large(options.max_body_bytes);
  } else if (error == http::error::header_limit) {
    refusal = ApiError::http_protocol(
        431, fmt::format("The request headers are larger than {} bytes", options.max_header_bytes),
        "headers_too_large");
  } else if (error == http::error::bad_version) {
    refusal = ApiError::http_protocol(505, "Only HTTP/1.0 and HTTP/1.1 are supported",
                                      "http_version_not_supported");
  } else if (is_http_parse_error(error) && parser.got_some()) {
    refusal = ApiError::http_protocol(
        400, fmt::format("Malformed HTTP request: {}", error.message()), "bad_http_request");
  }
  co_return false;
}

std::optional<ApiError> HttpServer::check_header(const HttpRequest& request) const {
  const ServeOptions& options = context_.options();
  if (request.version() != 10 && request.version() != 11) {
    return ApiError::http_protocol(
        505,
        fmt::format("HTTP/{}.{} is not supported (HTTP/1.0 and HTTP/1.1 are)",
                    request.version() / 10, request.version() % 10),
        "http_version_not_supported");
  }
  if (request.target().size() > options.max_url_bytes) {
    return ApiError::http_protocol(414,
                                   fmt::format("The request target has {} bytes, at most {} are "
                                               "accepted",
                                               request.target().size(), options.max_url_bytes),
                                   "uri_too_long");
  }
  const auto num_fields = std::distance(request.begin(), request.end());
  if (num_fields > options.max_header_count) {
    return ApiError::http_protocol(
        431,
        fmt::format("The request has {} header fields, at most {} are accepted", num_fields,
                    options.max_header_count),
        "headers_too_large");
  }
  const auto expect = request.find(http::field::expect);
  if (expect != request.end() && request.version() >= 11 &&
      !beast::iequals(expect->value(), "100-continue")) {
    return ApiError::http_protocol(
        417, fmt::format("Expect: {} is not supported (only 100-continue is)", expect->value()),
        "expectation_failed");
  }
  return std::nullopt;
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
  handler_->stop();
  beast::error_code ignored;
  acceptor_.close(ignored);
  const Clock::time_point deadline =
      Clock::now() + seconds(context_.options().shutdown_timeout_seconds);
  while (handler_->num_in_flight() > 0 && Clock::now() < deadline) {
    close_connections(/*only_idle=*/true);
    co_await sleep_for(std::chrono::milliseconds(50));
  }
  if (size_t left = handler_->num_in_flight(); left > 0) {
    spdlog::warn("shutdown timeout: cancelling {} running request(s)", left);
    handler_->cancel_in_flight();
    const Clock::time_point cancel_deadline = Clock::now() + std::chrono::seconds(5);
    while (handler_->num_in_flight() > 0 && Clock::now() < cancel_deadline) {
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

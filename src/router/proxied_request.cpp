#include "router/proxied_request.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "router/replica_client.h"
#include "router/request_summary.h"
#include "server/api_error.h"
#include "server/hangup_watch.h"

namespace tachyon::router {
namespace {

using server::ApiError;

// Hop-by-hop fields (RFC 9110 section 7.6.1) and those the router sets itself.
bool is_hop_by_hop(std::string_view name) {
  for (std::string_view hop : {"connection", "keep-alive", "proxy-connection", "te", "trailer",
                               "transfer-encoding", "upgrade", "content-length", "host", "expect",
                               "server", "x-request-id"}) {
    if (beast::iequals(name, hop)) return true;
  }
  return false;
}

template <typename Fields>
void copy_end_to_end_fields(const Fields& from, http::fields& to) {
  for (const auto& field : from) {
    if (!is_hop_by_hop(field.name_string())) to.insert(field.name_string(), field.value());
  }
}

// The longest a replica may take to answer: its own request timeout, plus a margin so that
// its 504 arrives before the router gives up.
std::chrono::steady_clock::duration answer_limit(const RouterOptions& options) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options.listen.request_timeout_seconds + 30));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

constexpr size_t kRelayChunkBytes = 16384;
constexpr size_t kMaxRefusalBytes = 64 << 10;

}  // namespace

ProxiedRequest::ProxiedRequest(const RouterOptions& options, ReplicaSet& replicas,
                               RouterMetrics& metrics, server::Connection& connection,
                               server::HttpRequest request, std::string route_model,
                               bool union_models)
    : options_(options),
      replicas_(replicas),
      metrics_(metrics),
      connection_(connection),
      request_(std::move(request)),
      route_model_(std::move(route_model)),
      union_models_(union_models),
      arrival_(Clock::now()) {}

void ProxiedRequest::cancel() {
  asio::post(connection_.stream().get_executor(), [self = weak_from_this()] {
    if (std::shared_ptr<ProxiedRequest> request = self.lock()) {
      request->cancelled_ = true;
      request->close_upstream();
    }
  });
}

void ProxiedRequest::close_upstream() {
  if (!upstream_) return;
  beast::error_code ignored;
  upstream_->socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  upstream_->socket().close(ignored);
}

asio::awaitable<bool> ProxiedRequest::run() {
  const std::string_view target = request_.target();
  const std::string_view path = target.substr(0, target.find('?'));
  RequestSummary summary;
  if (request_.method() == http::verb::post) summary = summarize_request(path, request_.body());
  if (route_model_.empty()) route_model_ = summary.model;
  std::vector<uint64_t> prefix_keys;
  if (replicas_.policy() == RoutingPolicy::kCacheAware && !summary.model.empty()) {
    prefix_keys = replicas_.prefix_index().prefix_keys(summary.prefix_text);
  }
  std::vector<int> tried;
  for (;;) {
    std::optional<ReplicaSet::Choice> choice = replicas_.pick(route_model_, prefix_keys, tried);
    if (!choice || cancelled_) break;
    Replica& replica = *choice->replica;
    if (!tried.empty()) metrics_.count_retry();
    tried.push_back(replica.index());
    metrics_.count_routed(choice->reason);
    replica.begin_request(summary.estimated_tokens);
    const Outcome outcome = co_await forward(replica);
    replica.end_request(summary.estimated_tokens);
    switch (outcome) {
      case Outcome::kAnswered:
        co_return reusable_;
      case Outcome::kClientGone:
        metrics_.count_client_hangup();
        co_return false;
      case Outcome::kNoAnswer:
        replica.failures_total.fetch_add(1, std::memory_order_relaxed);
        if (replica.set_up(false)) {
          spdlog::warn("replica {} is down ({}); its requests go to the others", replica.url(),
                       failure_);
        }
        continue;
      case Outcome::kRefused:
      case Outcome::kCancelled:
        continue;
    }
  }
  if (cancelled_) {
    co_return co_await connection_.send_error(
        ApiError::unavailable("The router is shutting down", "shutting_down", 1));
  }
  if (refusal_) co_return co_await connection_.send(std::move(*refusal_));
  metrics_.count_no_replica();
  co_return co_await connection_.send_error(ApiError::unavailable(
      tried.empty() ? "No replica is available: none passed its last health check"
                    : fmt::format("No replica could answer: the last one failed ({})", failure_),
      "no_replica_available", 1));
}

server::HttpRequest ProxiedRequest::upstream_request(const Replica& replica) const {
  server::HttpRequest upstream{request_.method(), request_.target(), 11};
  upstream.keep_alive(true);
  copy_end_to_end_fields(request_.base(), upstream.base());
  upstream.set(http::field::host, replica.authority());
  upstream.set("x-request-id", connection_.request_id());
  beast::error_code error;
  const auto client = connection_.stream().socket().remote_endpoint(error);
  if (!error) upstream.set("x-forwarded-for", client.address().to_string());
  upstream.body() = request_.body();
  upstream.prepare_payload();
  return upstream;
}

bool ProxiedRequest::adopt_idle_connection(Replica& replica) {
  const int fd = replica.take_idle_connection();
  if (fd < 0) return false;
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    return false;
  }
  const auto protocol = address.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4();
  beast::error_code error;
  upstream_->socket().assign(protocol, fd, error);
  if (error) {
    ::close(fd);
    return false;
  }
  return true;
}

void ProxiedRequest::keep_upstream(Replica& replica) {
  if (!upstream_ || upstream_buffer_.size() != 0) return;
  upstream_->expires_never();
  beast::error_code error;
  const int fd = upstream_->socket().release(error);
  if (!error && fd >= 0) replica.put_idle_connection(fd);
}

asio::awaitable<ProxiedRequest::Outcome> ProxiedRequest::forward(Replica& replica) {
  const auto connect_timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.connect_timeout_seconds));
  const server::HttpRequest upstream = upstream_request(replica);
  server::HangupWatch watch(connection_, [this] { close_upstream(); });
  std::optional<http::response_parser<http::buffer_body>> parser;
  // An idle connection first; when the replica had closed it (its idle timeout raced our
  // request), once more on a fresh one before the replica counts as failed.
  upstream_ = std::make_unique<beast::tcp_stream>(connection_.stream().get_executor());
  bool reused = adopt_idle_connection(replica);
  for (;;) {
    upstream_buffer_.clear();
    if (!reused) {
      upstream_ = std::make_unique<beast::tcp_stream>(connection_.stream().get_executor());
      if (beast::error_code error =
              co_await connect_to_replica(*upstream_, replica, connect_timeout)) {
        failure_ = "connect: " + error.message();
        co_return cancelled_ ? Outcome::kCancelled : Outcome::kNoAnswer;
      }
    }
    upstream_->expires_after(std::chrono::seconds(60));
    auto [write_error, written] =
        co_await http::async_write(*upstream_, upstream, asio::as_tuple(asio::use_awaitable));
    (void)written;
    if (write_error) {
      if (reused && !cancelled_) {
        reused = false;
        continue;
      }
      failure_ = "send: " + write_error.message();
      co_return cancelled_ ? Outcome::kCancelled : Outcome::kNoAnswer;
    }
    metrics_.observe_forward_overhead(seconds_since(arrival_));

    // From here the client's hang-up ends the exchange (the replica then cancels).
    watch.start();
    upstream_->expires_after(answer_limit(options_));
    parser.emplace();
    parser->body_limit(boost::none);
    auto [read_error, read] = co_await http::async_read_header(
        *upstream_, upstream_buffer_, *parser, asio::as_tuple(asio::use_awaitable));
    (void)read;
    if (!read_error) break;
    co_await watch.stop();
    if (watch.client_gone()) co_return Outcome::kClientGone;
    if (cancelled_) co_return Outcome::kCancelled;
    if (reused && !parser->got_some()) {
      reused = false;
      continue;
    }
    failure_ = "no answer: " + read_error.message();
    co_return Outcome::kNoAnswer;
  }
  metrics_.observe_time_to_first_byte(seconds_since(arrival_));
  bool client_gone = false;
  Outcome outcome = co_await relay(replica, *parser, watch, client_gone);
  co_await watch.stop();
  if (client_gone || watch.client_gone()) co_return Outcome::kClientGone;
  co_return outcome;
}

asio::awaitable<bool> ProxiedRequest::write_piece(
    http::response<http::buffer_body>& response,
    http::response_serializer<http::buffer_body>& serializer, char* data, size_t size) {
  response.body().data = data;
  response.body().size = size;
  response.body().more = true;
  auto [error, written] = co_await http::async_write(connection_.stream(), serializer,
                                                     asio::as_tuple(asio::use_awaitable));
  (void)written;
  co_return !error || error == http::error::need_buffer;  // need_buffer: it took all of it
}

template <typename Parser>
asio::awaitable<ProxiedRequest::Outcome> ProxiedRequest::relay(Replica& replica, Parser& parser,
                                                               const server::HangupWatch& watch,
                                                               bool& client_gone) {
  std::array<char, kRelayChunkBytes> chunk;
  const auto& header = parser.get();
  const bool buffer_whole = header.result() == http::status::service_unavailable ||
                            (union_models_ && header.result() == http::status::ok);
  if (buffer_whole) {
    // A 503 to keep (another replica may do better), or the model list to replace: read it all.
    std::string body;
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      auto [error, n] = co_await http::async_read_some(*upstream_, upstream_buffer_, parser,
                                                       asio::as_tuple(asio::use_awaitable));
      (void)n;
      body.append(chunk.data(), chunk.size() - parser.get().body().size);
      if (error && error != http::error::need_buffer) {
        if (watch.client_gone()) {
          client_gone = true;
          co_return Outcome::kClientGone;
        }
        failure_ = "answer cut: " + error.message();
        co_return cancelled_ ? Outcome::kCancelled : Outcome::kNoAnswer;
      }
      if (body.size() > kMaxRefusalBytes && !union_models_) break;
    }
    server::HttpResponse response{header.result(), 11};
    copy_end_to_end_fields(header.base(), response.base());
    if (header.result() == http::status::service_unavailable) {
      response.body() = std::move(body);
      refusal_ = std::move(response);
      failure_ = "503";
      if (parser.is_done() && parser.keep_alive()) keep_upstream(replica);
      co_return Outcome::kRefused;
    }
    response.body() = boost::json::serialize(
        boost::json::object{{"object", "list"}, {"data", replicas_.models()}});
    if (parser.keep_alive()) keep_upstream(replica);
    reusable_ = co_await connection_.send(std::move(response)) && connection_.keep_alive();
    co_return Outcome::kAnswered;
  }

  // Status and end-to-end headers as the replica sent them, then the body as it arrives.
  http::response<http::buffer_body> response{header.result(), connection_.http_version()};
  copy_end_to_end_fields(header.base(), response.base());
  connection_.add_common_headers(response);
  const boost::optional<std::uint64_t> length = parser.content_length();
  const bool has_length = length.has_value();
  if (has_length) {
    response.content_length(*length);
  } else if (connection_.chunked_allowed()) {
    response.chunked(true);
  } else {
    connection_.set_keep_alive(false);  // HTTP/1.0: the body ends when the connection does
  }
  response.keep_alive(connection_.keep_alive());
  if (!connection_.keep_alive()) response.set(http::field::connection, "close");
  const auto content_type = header[http::field::content_type];
  const bool event_stream = std::string_view(content_type.data(), content_type.size())
                                .starts_with("text/event-stream");
  response.body().data = nullptr;
  response.body().more = !parser.is_done();
  http::response_serializer<http::buffer_body> serializer{response};
  auto [header_error, header_bytes] = co_await http::async_write_header(
      connection_.stream(), serializer, asio::as_tuple(asio::use_awaitable));
  (void)header_bytes;
  if (header_error) {
    client_gone = true;
    co_return Outcome::kClientGone;
  }
  bool broken = false;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    auto [read_error, n] = co_await http::async_read_some(*upstream_, upstream_buffer_, parser,
                                                          asio::as_tuple(asio::use_awaitable));
    (void)n;
    const size_t bytes = chunk.size() - parser.get().body().size;
    if (bytes > 0 && !co_await write_piece(response, serializer, chunk.data(), bytes)) {
      client_gone = true;
      co_return Outcome::kClientGone;
    }
    if (read_error && read_error != http::error::need_buffer) {
      if (watch.client_gone()) {  // we closed the replica's connection: not its failure
        client_gone = true;
        co_return Outcome::kClientGone;
      }
      broken = true;
      failure_ = "stream cut: " + read_error.message();
      break;
    }
  }
  if (broken) {
    metrics_.count_broken_response();
    if (!cancelled_ && replica.set_up(false)) {
      spdlog::warn("replica {} is down ({}); its requests go to the others", replica.url(),
                   failure_);
    }
    if (!event_stream || has_length) {
      // The body cannot be completed: closing is the only honest end.
      reusable_ = false;
      co_return Outcome::kAnswered;
    }
    // As a single server ends a stream that fails after its 200: an error event, no [DONE].
    ApiError error = ApiError::unavailable("The router is shutting down", "shutting_down", 1);
    if (!cancelled_) {
      error = ApiError::internal(fmt::format(
          "The replica serving this request failed ({}); retry the request", failure_));
      error.code = "replica_failed";
    }
    std::string event = "data: " + boost::json::serialize(error.to_json()) + "\n\n";
    if (!co_await write_piece(response, serializer, event.data(), event.size())) {
      client_gone = true;
      co_return Outcome::kClientGone;
    }
  }
  response.body().data = nullptr;
  response.body().size = 0;
  response.body().more = false;
  auto [end_error, end_bytes] = co_await http::async_write(connection_.stream(), serializer,
                                                           asio::as_tuple(asio::use_awaitable));
  (void)end_bytes;
  if (end_error) {
    client_gone = true;
    co_return Outcome::kClientGone;
  }
  if (!broken && parser.keep_alive()) keep_upstream(replica);
  reusable_ = connection_.keep_alive();
  co_return Outcome::kAnswered;
}

}  // namespace tachyon::router

#include "server/connection.h"

#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "server/openai_response.h"

namespace tachyon::server {
namespace {

constexpr size_t kMaxRequestIdLength = 128;

// Echo a client's id only when it is short and printable, so it cannot break our headers.
bool is_acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (char c : id) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace

void Connection::begin_request(const HttpRequest& request, bool draining) {
  auto it = request.find("x-request-id");
  extra_headers_.clear();
  if (it != request.end() && is_acceptable_request_id(it->value())) {
    request_id_ = std::string(it->value());
    // A client may send the same id twice; the usage ledger needs a unique one.
    unique_request_id_ = request_id_ + "#" + random_hex(16);
  } else {
    request_id_ = random_hex(32);
    unique_request_id_ = request_id_;
  }
  http_version_ = request.version() == 10 ? 10 : 11;
  keep_alive_ = request.keep_alive() && !draining;
}

void Connection::arm_read_deadline(std::chrono::steady_clock::duration limit) {
  read_timed_out_ = false;
  const uint64_t generation = ++read_deadline_generation_;
  read_deadline_.expires_after(limit);
  read_deadline_.async_wait([weak = weak_from_this(), generation](const beast::error_code& error) {
    std::shared_ptr<Connection> self = weak.lock();
    if (error || !self || self->read_deadline_generation_ != generation) return;
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
}

void Connection::disarm_read_deadline() {
  ++read_deadline_generation_;
  read_deadline_.cancel();
}

asio::awaitable<bool> Connection::send(HttpResponse response) {
  add_common_headers(response);
  response.version(http_version_);
  response.keep_alive(keep_alive_);
  if (!keep_alive_) response.set(http::field::connection, "close");
  response.prepare_payload();
  auto [error, written] =
      co_await http::async_write(stream_, response, asio::as_tuple(asio::use_awaitable));
  (void)written;
  co_return !error;
}

asio::awaitable<bool> Connection::send_json(http::status status, const boost::json::value& body) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = boost::json::serialize(body);
  co_return co_await send(std::move(response));
}

asio::awaitable<bool> Connection::send_error(const ApiError& error) {
  HttpResponse response{static_cast<http::status>(error.status), 11};
  response.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : error.headers) response.set(name, value);
  response.body() = error.body();
  co_return co_await send(std::move(response));
}

asio::awaitable<void> Connection::discard_input(std::chrono::milliseconds limit) {
  beast::error_code ignored;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  stream_.expires_after(limit);
  std::array<char, 16384> scratch;
  for (;;) {
    auto [error, n] = co_await stream_.async_read_some(asio::buffer(scratch),
                                                       asio::as_tuple(asio::use_awaitable));
    (void)n;
    if (error) break;
  }
}

asio::awaitable<void> Connection::close_gracefully(std::chrono::milliseconds linger) {
  co_await discard_input(linger);
  close();
}

void Connection::close() {
  beast::error_code ignored;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

}  // namespace tachyon::server

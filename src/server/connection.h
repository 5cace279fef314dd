// Connection: one client's TCP connection and its read buffer, plus the state of the request
// being answered on it (request id, HTTP version, keep-alive). All of it is used only from the
// connection's strand (the executor of its socket), so nothing here locks. Always owned by a
// shared_ptr (the read deadline's timer finds it through a weak one).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "server/api_error.h"

namespace tachyon::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::ip::tcp::socket socket, uint64_t id)
      : stream_(std::move(socket)), read_deadline_(stream_.get_executor()), id_(id) {}

  beast::tcp_stream& stream() { return stream_; }
  // Bytes read but not parsed yet (a pipelined next request may sit here).
  beast::flat_buffer& buffer() { return buffer_; }
  uint64_t id() const { return id_; }

  // Waiting for the next request with nothing of it read yet: a drain may close it.
  bool idle = false;

  // Reads started after this and before disarm_read_deadline() are cancelled once `limit`
  // has passed (the socket stays open, so that a 408 can still be written); read_timed_out()
  // then says why they failed. Beast's own stream timeout would close the socket instead.
  void arm_read_deadline(std::chrono::steady_clock::duration limit);
  void disarm_read_deadline();
  bool read_timed_out() const { return read_timed_out_; }

  // Starts answering `request`: takes the client's X-Request-Id (or makes one), its HTTP
  // version, and decides keep-alive (RFC 9112 section 9.3: HTTP/1.1 unless "close", HTTP/1.0
  // only with "keep-alive"; never while the server drains).
  void begin_request(const HttpRequest& request, bool draining);
  // 10 or 11: responses go out in the client's version (no chunked encoding to HTTP/1.0).
  unsigned http_version() const { return http_version_; }
  bool chunked_allowed() const { return http_version_ >= 11; }
  const std::string& request_id() const { return request_id_; }
  // request_id() when the server made it, else the client's id with a random suffix: unique,
  // for the usage ledger.
  const std::string& unique_request_id() const { return unique_request_id_; }
  bool keep_alive() const { return keep_alive_; }
  void set_keep_alive(bool keep_alive) { keep_alive_ = keep_alive; }

  // Adds the common headers, Connection (close when not keeping alive) and Content-Length, and
  // writes; false when the write failed (the client is gone).
  asio::awaitable<bool> send(HttpResponse response);
  asio::awaitable<bool> send_json(http::status status, const boost::json::value& body);
  asio::awaitable<bool> send_error(const ApiError& error);
  // Headers every response carries: x-request-id, Server, and this request's extra headers
  // (the API key's x-ratelimit-*).
  template <typename Fields>
  void add_common_headers(Fields& fields) const {
    fields.set("x-request-id", request_id_);
    fields.set(http::field::server, "tachyon");
    for (const auto& [name, value] : extra_headers_) fields.set(name, value);
  }
  // Replaces the extra headers of the current request's response.
  void set_extra_headers(std::vector<std::pair<std::string, std::string>> headers) {
    extra_headers_ = std::move(headers);
  }
  void add_extra_header(std::string name, std::string value) {
    extra_headers_.emplace_back(std::move(name), std::move(value));
  }

  // Reads and drops whatever the client still sends, for at most `limit` (so that a client
  // still uploading an oversized body reads our 413 instead of a reset connection).
  asio::awaitable<void> discard_input(std::chrono::milliseconds limit);
  // Ends the connection after its last response (RFC 9112 section 9.6): FIN first, then
  // reads and drops what the client still sends until it closes too or `linger` passes, then
  // closes. Closing with unread bytes would reset the connection and could destroy the
  // response before the client read it.
  asio::awaitable<void> close_gracefully(std::chrono::milliseconds linger);
  // Sends FIN and closes. Safe to call twice.
  void close();

 private:
  beast::tcp_stream stream_;
  asio::steady_timer read_deadline_;
  uint64_t read_deadline_generation_ = 0;  // a deadline's handler acts only for its own arming
  bool read_timed_out_ = false;
  unsigned http_version_ = 11;
  beast::flat_buffer buffer_;
  uint64_t id_;
  std::string request_id_;
  std::string unique_request_id_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
  bool keep_alive_ = true;
};

}  // namespace tachyon::server

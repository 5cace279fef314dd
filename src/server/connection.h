// Connection: one client's TCP connection and its read buffer, plus the state of the request
// being answered on it (request id, keep-alive). All of it is used only from the connection's
// strand (the executor of its socket), so nothing here locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
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

class Connection {
 public:
  Connection(asio::ip::tcp::socket socket, uint64_t id) : stream_(std::move(socket)), id_(id) {}

  beast::tcp_stream& stream() { return stream_; }
  // Bytes read but not parsed yet (a pipelined next request may sit here).
  beast::flat_buffer& buffer() { return buffer_; }
  uint64_t id() const { return id_; }

  // Waiting for the next request with nothing of it read yet: a drain may close it.
  bool idle = false;

  // Starts answering `request`: takes the client's X-Request-Id (or makes one) and decides
  // keep-alive (never while the server drains).
  void begin_request(const HttpRequest& request, bool draining);
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

  // Reads and drops whatever the client still sends, for at most `limit` (so that a client
  // still uploading an oversized body reads our 413 instead of a reset connection).
  asio::awaitable<void> discard_input(std::chrono::milliseconds limit);
  // Sends FIN and closes. Safe to call twice.
  void close();

 private:
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  uint64_t id_;
  std::string request_id_;
  std::string unique_request_id_;
  std::vector<std::pair<std::string, std::string>> extra_headers_;
  bool keep_alive_ = true;
};

}  // namespace tachyon::server

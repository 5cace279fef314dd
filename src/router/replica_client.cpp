#include "router/replica_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace tachyon::router {

asio::awaitable<beast::error_code> connect_to_replica(beast::tcp_stream& stream,
                                                      const Replica& replica,
                                                      std::chrono::steady_clock::duration timeout) {
  asio::ip::tcp::resolver resolver(co_await asio::this_coro::executor);
  auto [resolve_error, endpoints] = co_await resolver.async_resolve(
      replica.host(), replica.port(), asio::as_tuple(asio::use_awaitable));
  if (resolve_error) co_return resolve_error;
  stream.expires_after(timeout);
  auto [connect_error, endpoint] =
      co_await stream.async_connect(endpoints, asio::as_tuple(asio::use_awaitable));
  (void)endpoint;
  if (!connect_error) {
    beast::error_code ignored;
    stream.socket().set_option(asio::ip::tcp::no_delay(true), ignored);
  }
  stream.expires_never();
  co_return connect_error;
}

asio::awaitable<std::optional<http::response<http::string_body>>> fetch_from_replica(
    const Replica& replica, std::string target, std::chrono::steady_clock::duration timeout,
    std::string& error) {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  if (beast::error_code connect_error = co_await connect_to_replica(stream, replica, timeout)) {
    error = "connect: " + connect_error.message();
    co_return std::nullopt;
  }
  http::request<http::empty_body> request{http::verb::get, target, 11};
  request.set(http::field::host, replica.authority());
  request.set(http::field::user_agent, "tachyon-router");
  request.keep_alive(false);
  stream.expires_after(timeout);
  auto [write_error, written] =
      co_await http::async_write(stream, request, asio::as_tuple(asio::use_awaitable));
  (void)written;
  if (write_error) {
    error = "send: " + write_error.message();
    co_return std::nullopt;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  auto [read_error, read] =
      co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
  (void)read;
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  if (read_error) {
    error = "answer: " + read_error.message();
    co_return std::nullopt;
  }
  co_return parser.release();
}

}  // namespace tachyon::router

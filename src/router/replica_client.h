// The router's side of a connection to a replica: connecting (with a deadline) and small
// whole exchanges (health checks). Streams of completions are relayed by ProxiedRequest.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "router/replica.h"

namespace tachyon::router {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// Resolves and connects `stream` (on the caller's executor) within `timeout`.
asio::awaitable<beast::error_code> connect_to_replica(beast::tcp_stream& stream,
                                                      const Replica& replica,
                                                      std::chrono::steady_clock::duration timeout);

// GET `target` on a fresh connection; the response, or nothing when the replica did not
// answer within `timeout` (`error` says why).
asio::awaitable<std::optional<http::response<http::string_body>>> fetch_from_replica(
    const Replica& replica, std::string target, std::chrono::steady_clock::duration timeout,
    std::string& error);

}  // namespace tachyon::router

// RequestHandler: what an HttpServer does with each request it reads. The HTTP transport
// (listener, connections, limits, drain) is the same for `tachyon serve` (ApiRouter: the model
// behind it) and `tachyon router` (router::RouterApi: replicas behind it).
#pragma once

#include <cstddef>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "core/status.h"
#include "server/connection.h"

namespace tachyon::server {

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;

  // Answers one request on `connection`; returns whether the connection may serve another.
  virtual asio::awaitable<bool> serve(Connection& connection, HttpRequest request) = 0;

  // Once, when the server starts running: background work on its io_context (health checks).
  virtual void start(asio::io_context& io_context) { (void)io_context; }
  // The server drains: stop background work (requests in flight carry on).
  virtual void stop() {}
  // Requests being answered; a drain waits for them up to its deadline...
  virtual size_t num_in_flight() const = 0;
  // ...then cancels what is left (from the drain's strand; thread-safe).
  virtual void cancel_in_flight() = 0;
  // Ends every request in flight at once with `reason`, without waiting for what computes
  // them (it may never answer again: a distributed job whose rank is gone). Thread-safe.
  virtual void abandon_in_flight(const Status& reason) {
    (void)reason;
    cancel_in_flight();
  }
};

}  // namespace tachyon::server

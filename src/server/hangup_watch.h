// HangupWatch: keeps a read pending on a client's connection while its answer is produced
// elsewhere (a replica behind the router), so that a client that hangs up is noticed at once
// rather than at the next write. Bytes that arrive meanwhile (a pipelined next request) land in
// the connection's buffer and are kept. Used only from the connection's strand.
#pragma once

#include <functional>
#include <memory>

#include <boost/asio/awaitable.hpp>

#include "server/connection.h"

namespace tachyon::server {

class HangupWatch {
 public:
  // `on_hangup` runs on the strand when the client's side ends (EOF or an error).
  HangupWatch(Connection& connection, std::function<void()> on_hangup);
  ~HangupWatch();
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  void start();
  // Cancels the pending read and waits for its handler; call before the next read of the
  // connection.
  asio::awaitable<void> stop();
  bool client_gone() const;

 private:
  struct State;
  void read_more();

  Connection& connection_;
  std::shared_ptr<State> state_;
};

}  // namespace tachyon::server

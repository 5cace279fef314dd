// The per-request mailbox between the engine thread (producer) and whoever waits for the
// answer (an HTTP connection, a test, the CLI). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "runtime/engine_request.h"

namespace tachyon {

class RequestStream {
 public:
  // `notify` (may be empty) is called on the engine thread after each push, without the lock
  // held; it must be cheap and must not block (e.g. post to an event loop).
  RequestStream(RequestId id, std::function<void()> notify)
      : id_(id), notify_(std::move(notify)) {}

  RequestId id() const { return id_; }

  // Engine side. Once an output that finishes the request is in, later ones are dropped (a
  // request Engine::abandon() ended may still get the engine thread's).
  void push(EngineOutput output);

  // Consumer side. try_pop never blocks; pop waits up to `timeout` (nullopt: timed out).
  std::optional<EngineOutput> try_pop();
  std::optional<EngineOutput> pop(std::chrono::milliseconds timeout = std::chrono::hours(24));
  // Pops until the finishing event and merges everything into one output.
  EngineOutput wait_for_all();

 private:
  RequestId id_;
  std::function<void()> notify_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<EngineOutput> outputs_;
  bool finished_ = false;
};

}  // namespace tachyon

// GenerationSession: one chat / text completion on one connection, from Engine::submit to the
// last byte of the answer, either as one JSON response or as a Server-Sent Events stream.
//
// Waiting costs no thread: the engine's notify callback posts to the connection's strand and
// cancels the timer the coroutine sleeps on (the timer's expiry is the next SSE ping). While it
// waits, a read stays pending on the socket so that a client that hangs up cancels its request
// at once; bytes of a pipelined next request land in the connection's buffer and are kept.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/admission.h"
#include "runtime/engine.h"
#include "server/connection.h"
#include "server/engine_request_builder.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/server_context.h"

namespace tachyon::server {

class GenerationSession {
 public:
  GenerationSession(ServerContext& context, Connection& connection,
                    std::shared_ptr<const ServedModel> model, const OpenAiRequest& request,
                    std::optional<gateway::Admission> admission = std::nullopt,
                    PromptTruncation truncation = {});
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Submits and answers; returns whether the connection may serve another request.
  asio::awaitable<bool> run(EngineRequest engine_request);

 private:
  using Clock = std::chrono::steady_clock;
  struct Waker;

  asio::awaitable<bool> answer_whole();
  asio::awaitable<bool> answer_stream();
  // Sleeps until the engine pushes, the socket reader reports, or `until`.
  asio::awaitable<void> wait(Clock::time_point until);
  void start_watching();
  asio::awaitable<void> stop_watching();
  // Engine outputs → latency metrics.
  void observe(const EngineOutput& output);
  void finish_metrics(const EngineOutput& output);
  // Settles the API key's admission (limits, quotas, usage ledger) once: with the finishing
  // event, or with the counts seen so far when the request failed early or was cancelled.
  void settle(const EngineOutput* final_output, const char* status);
  void cancel_request();
  asio::awaitable<bool> write_chunk(std::string data);
  asio::awaitable<bool> end_stream();

  ServerContext& context_;
  Connection& connection_;
  std::shared_ptr<const ServedModel> model_;
  const OpenAiRequest& request_;
  ResponseBuilder builder_;
  PromptTruncation truncation_;  // what context_overflow "truncate" cut from the prompt
  std::shared_ptr<Waker> waker_;
  asio::steady_timer timer_;
  std::shared_ptr<RequestStream> stream_;

  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // expires with the session
  bool watching_ = false;                                       // a read is pending on the socket
  bool stop_watching_ = false;                                  // do not start another one
  bool client_gone_ = false;                                    // the read saw EOF or an error
  bool finished_ = false;  // the finishing event arrived (or we gave up)
  Clock::time_point submit_time_;
  Clock::time_point last_token_time_;
  Clock::time_point first_token_time_;
  std::optional<gateway::Admission> admission_;  // when the server checks API keys
  EngineOutput last_counts_;                     // token counts of the latest event
  bool got_first_token_ = false;
};

}  // namespace tachyon::server

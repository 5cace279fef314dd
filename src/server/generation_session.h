// GenerationSession: one chat / text completion on one connection, from Engine::submit to the
// last byte of the answer, either as one JSON response or as a Server-Sent Events stream.
//
// With n > 1 each choice is an engine request of its own. The first goes in alone; the others
// follow once it has its first token, so that the prompt is computed once and the rest find it
// in the prefix cache. Seeded requests give choice i the seed + i (reproducible). The answer
// fails as a whole when any choice does.
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
#include "chat/tool_call_parser.h"

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

  // Submits and answers; returns whether the connection may serve another request. `grammar`:
  // response_format's compiled grammar, when the request has one (each choice gets its own
  // constraint; engine_request carries the first's).
  asio::awaitable<bool> run(EngineRequest engine_request,
                            std::shared_ptr<const CompiledConstraint> grammar = nullptr);

 private:
  using Clock = std::chrono::steady_clock;
  struct Waker;
  // One choice's engine request and what it produced so far.
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    bool finished = false;
    ResponseBuilder::Choice answer;  // text and logprobs so far (whole answers only)
    EngineOutput counts;             // the latest event's token counts
    Status status;                   // of the finishing event
    Clock::time_point last_token_time;
    bool got_token = false;
    // When the request offers tools: the answer's text split into text and calls.
    std::unique_ptr<ToolCallParser> tool_parser;
    std::vector<std::string> call_ids;
  };

  // Output text of `choice` → text and tool calls: into choice.answer (whole answers), or as
  // SSE chunks appended to `sse` (streams). `final`: the choice's last text (flushes the
  // parser). Returns whether the choice called tools so far.
  bool take_text(Choice& choice, int index, const std::string& text, bool final,
                 std::string* sse, const std::vector<SampleLogprobs>* logprobs);

  // Submits choice `index` (a copy of the first's request, its own seed and constraint).
  Status submit_choice(int index);
  // Once the first choice has a token (or finished), the rest go in.
  Status submit_remaining_choices();
  // Counts over every choice: the prompt once, completion tokens summed.
  EngineOutput total_counts() const;
  bool all_finished() const;

  asio::awaitable<bool> answer_whole();
  asio::awaitable<bool> answer_stream();
  // Sleeps until the engine pushes, the socket reader reports, or `until`.
  asio::awaitable<void> wait(Clock::time_point until);
  void start_watching();
  asio::awaitable<void> stop_watching();
  // Engine outputs → latency metrics.
  void observe(Choice& choice, const EngineOutput& output);
  // Metrics and the usage ledger once every choice finished well (`finish_reason`: the first
  // choice's, for the ledger).
  void finish_metrics(const EngineOutput& counts, FinishReason finish_reason);
  // Settles the API key's admission (limits, quotas, usage ledger) once: with the finishing
  // event, or with the counts seen so far when the request failed early or was cancelled.
  void settle(const EngineOutput* final_output, const char* status,
              FinishReason finish_reason = FinishReason::kNone);
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
  EngineRequest base_request_;  // the first choice's, kept for the others
  std::shared_ptr<const CompiledConstraint> grammar_;
  std::vector<Choice> choices_;   // [n]; a choice without a stream is not submitted yet

  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // expires with the session
  bool watching_ = false;                                       // a read is pending on the socket
  bool stop_watching_ = false;                                  // do not start another one
  bool client_gone_ = false;                                    // the read saw EOF or an error
  bool finished_ = false;  // every choice's finishing event arrived (or we gave up)
  Clock::time_point submit_time_;
  Clock::time_point last_token_time_;
  Clock::time_point first_token_time_;
  std::optional<gateway::Admission> admission_;  // when the server checks API keys
  bool got_first_token_ = false;
};

}  // namespace tachyon::server

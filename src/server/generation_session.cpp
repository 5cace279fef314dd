#include "server/generation_session.h"

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <mutex>

#include <spdlog/spdlog.h>

namespace tachyon::server {
namespace {

// Pipelined bytes we keep while a request runs; beyond this we stop reading (and so stop
// noticing a hang-up until the answer is written).
constexpr size_t kMaxBufferedBytes = 1 << 20;
constexpr size_t kReadChunkBytes = 4096;

}  // namespace

// Shared with the engine's notify callback. After the session ends, notifications are
// dropped: no post to a strand whose io_context may be gone, no touch of a freed timer.
// `timer` is touched only on the strand.
struct GenerationSession::Waker : std::enable_shared_from_this<Waker> {
  explicit Waker(asio::any_io_executor strand) : strand(std::move(strand)) {}

  // On the strand. A wake while the session is not waiting (it is writing) is remembered, so
  // its next wait returns at once: an output pushed during a write is never left until the
  // next ping (the last one of an abandoned stream has no later push to wake it).
  void wake() {
    woken = true;
    if (timer != nullptr) timer->cancel();
  }
  // From the engine thread: cheap and non-blocking, as RequestStream asks.
  void notify() {
    std::lock_guard<std::mutex> lock(mutex);
    if (closed) return;
    asio::post(strand, [self = shared_from_this()] { self->wake(); });
  }
  // On the strand, when the session ends.
  void close() {
    std::lock_guard<std::mutex> lock(mutex);
    closed = true;
    timer = nullptr;
    // The engine may keep this waker after the session (and even the server) is gone: it must
    // not keep the strand alive past its io_context.
    strand = asio::any_io_executor();
  }

  asio::any_io_executor strand;
  asio::steady_timer* timer = nullptr;
  bool woken = false;  // on the strand: a wake since the session last waited
  std::mutex mutex;
  bool closed = false;
};

GenerationSession::GenerationSession(ServerContext& context, Connection& connection,
                                     std::shared_ptr<const ServedModel> model,
                                     const OpenAiRequest& request,
                                     std::optional<gateway::Admission> admission,
                                     PromptTruncation truncation)
    : context_(context),
      connection_(connection),
      model_(std::move(model)),
      request_(request),
      builder_(request.endpoint, model_->id, *model_->tokenizer, request.include_usage),
      truncation_(truncation),
      waker_(std::make_shared<Waker>(connection.stream().get_executor())),
      timer_(connection.stream().get_executor()),
      admission_(std::move(admission)) {
  waker_->timer = &timer_;
}

GenerationSession::~GenerationSession() {
  settle(nullptr, "cancelled");  // only if nothing settled it before
  waker_->close();
  for (Choice& choice : choices_) {
    if (!choice.stream) continue;
    if (!choice.finished) model_->engine->cancel(choice.stream->id());
    context_.remove_request(choice.stream->id());
  }
}

Status GenerationSession::submit_choice(int index) {
  EngineRequest request = base_request_;
  if (index > 0) {
    if (request.sampling.seed) request.sampling.seed = *request.sampling.seed + index;
    if (grammar_) request.constraint = model_->constraints->start(grammar_);
  }
  std::shared_ptr<Waker> waker = waker_;
  Result<std::shared_ptr<RequestStream>> submitted =
      model_->engine->submit(std::move(request), [waker] { waker->notify(); });
  if (!submitted.ok()) return submitted.status();
  Choice& choice = choices_[static_cast<size_t>(index)];
  choice.stream = std::move(*submitted);
  context_.add_request(choice.stream->id());
  return Status();
}

Status GenerationSession::submit_remaining_choices() {
  for (size_t i = 1; i < choices_.size(); ++i) {
    if (!choices_[i].stream) TACHYON_RETURN_IF_ERROR(submit_choice(static_cast<int>(i)));
  }
  return Status();
}

EngineOutput GenerationSession::total_counts() const {
  EngineOutput total;
  if (choices_.empty()) return total;
  total.prompt_tokens = choices_[0].counts.prompt_tokens;
  total.cached_prompt_tokens = choices_[0].counts.cached_prompt_tokens;
  total.queue_seconds = choices_[0].counts.queue_seconds;
  for (const Choice& choice : choices_) {
    total.completion_tokens += choice.counts.completion_tokens;
    total.dropped_tokens = std::max(total.dropped_tokens, choice.counts.dropped_tokens);
  }
  return total;
}

bool GenerationSession::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(),
                     [](const Choice& choice) { return choice.finished; });
}

asio::awaitable<bool> GenerationSession::run(EngineRequest engine_request,
                                             std::shared_ptr<const CompiledConstraint> grammar) {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(context_.options().request_timeout_seconds));
  submit_time_ = Clock::now();
  engine_request.deadline = submit_time_ + timeout;
  if (truncation_.dropped_tokens > 0) {  // streams see it before their first byte too
    connection_.add_extra_header("x-dropped-prompt-tokens",
                                 std::to_string(truncation_.dropped_tokens));
    connection_.add_extra_header("x-dropped-messages",
                                 std::to_string(truncation_.dropped_messages));
  }
  base_request_ = std::move(engine_request);
  grammar_ = std::move(grammar);
  choices_.resize(static_cast<size_t>(std::max(1, request_.n)));
  if (request_.tools) {
    for (Choice& choice : choices_) {
      choice.tool_parser = std::make_unique<ToolCallParser>(model_->tool_format);
    }
  }
  if (Status submitted = submit_choice(0); !submitted.ok()) {
    settle(nullptr, "error");
    const bool chat = request_.endpoint == Endpoint::kChatCompletions;
    co_return co_await connection_.send_error(
        ApiError::from_status(submitted, chat ? "messages" : "prompt"));
  }
  start_watching();
  const bool keep_alive = request_.stream ? co_await answer_stream() : co_await answer_whole();
  co_await stop_watching();
  co_return keep_alive && !client_gone_;
}

asio::awaitable<bool> GenerationSession::answer_whole() {
  Status failure;
  while (!finished_) {
    for (Choice& choice : choices_) {
      if (!choice.stream) continue;
      while (!choice.finished) {
        std::optional<EngineOutput> output = choice.stream->try_pop();
        if (!output) break;
        observe(choice, *output);
        take_text(choice, 0, output->text, output->finished, nullptr, nullptr);
        for (SampleLogprobs& sample : output->logprobs) {
          choice.answer.logprobs.push_back(std::move(sample));
        }
        if (output->finished) {
          choice.finished = true;
          choice.status = output->status;
          choice.answer.finish_reason = output->finish_reason;
          if (!output->status.ok() && failure.ok()) failure = output->status;
        }
      }
    }
    if (!failure.ok()) break;
    if (choices_[0].got_token || choices_[0].finished) {
      if (Status submitted = submit_remaining_choices(); !submitted.ok()) failure = submitted;
    }
    if (!failure.ok()) break;
    if (all_finished()) {
      finished_ = true;
      break;
    }
    if (client_gone_) {
      cancel_request();
      co_return false;
    }
    co_await wait(Clock::now() + std::chrono::hours(24));
  }
  if (!failure.ok()) {
    cancel_request();
    // cancel_request() settled it as cancelled; a failure counts as an error instead.
    co_return co_await connection_.send_error(ApiError::from_status(failure));
  }
  const EngineOutput counts = total_counts();
  finish_metrics(counts, choices_[0].answer.finish_reason);
  const Usage usage{counts.prompt_tokens, counts.completion_tokens, counts.cached_prompt_tokens,
                    truncation_.dropped_tokens + counts.dropped_tokens,
                    truncation_.dropped_messages};
  std::vector<ResponseBuilder::Choice> answers;
  for (Choice& choice : choices_) answers.push_back(std::move(choice.answer));
  co_return co_await connection_.send_json(
      http::status::ok, builder_.response(answers, request_.sampling.logprobs, usage));
}

asio::awaitable<bool> GenerationSession::answer_stream() {
  // To an HTTP/1.0 client the stream is a plain body that ends when the connection does.
  if (!connection_.chunked_allowed()) connection_.set_keep_alive(false);
  http::response<http::empty_body> header{http::status::ok, connection_.http_version()};
  header.set(http::field::content_type, "text/event-stream");
  header.set(http::field::cache_control, "no-cache");
  header.set("X-Accel-Buffering", "no");
  connection_.add_common_headers(header);
  header.set(http::field::connection, connection_.keep_alive() ? "keep-alive" : "close");
  header.chunked(connection_.chunked_allowed());
  http::response_serializer<http::empty_body> serializer{header};
  auto [error, written] = co_await http::async_write_header(connection_.stream(), serializer,
                                                            asio::as_tuple(asio::use_awaitable));
  (void)written;
  if (error) {
    cancel_request();
    co_return false;
  }

  const double ping_seconds = context_.options().sse_ping_interval_seconds;
  const auto ping_interval =
      ping_seconds > 0
          ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ping_seconds))
          : Clock::duration(std::chrono::hours(24));
  const bool want_logprobs = request_.sampling.logprobs;
  std::string pending;
  if (request_.endpoint == Endpoint::kChatCompletions) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      pending += ResponseBuilder::sse_event(builder_.role_chunk(static_cast<int>(i)));
    }
  }
  Clock::time_point last_write = Clock::now();
  for (;;) {
    Status failure;
    for (size_t i = 0; i < choices_.size() && !finished_; ++i) {
      Choice& choice = choices_[i];
      const int index = static_cast<int>(i);
      while (choice.stream && !choice.finished) {
        std::optional<EngineOutput> output = choice.stream->try_pop();
        if (!output) break;
        observe(choice, *output);
        const bool called = take_text(choice, index, output->text, output->finished, &pending,
                                      want_logprobs ? &output->logprobs : nullptr);
        if (!output->finished) continue;
        choice.finished = true;
        choice.status = output->status;
        choice.answer.finish_reason = output->finish_reason;
        if (output->status.ok()) {
          pending += ResponseBuilder::sse_event(
              builder_.finish_chunk(output->finish_reason, index, called));
        } else {
          failure = output->status;
        }
      }
      if (!failure.ok()) break;
    }
    if (failure.ok() && !finished_ && (choices_[0].got_token || choices_[0].finished)) {
      failure = submit_remaining_choices();
    }
    if (!failure.ok()) {
      // The 200 is gone already: the error goes in the stream, and no [DONE] follows, so that
      // clients do not take a failed answer for a complete one.
      cancel_request();
      pending += ResponseBuilder::sse_event(ApiError::from_status(failure).to_json());
    } else if (!finished_ && all_finished()) {
      finished_ = true;
      const EngineOutput counts = total_counts();
      finish_metrics(counts, choices_[0].answer.finish_reason);
      if (request_.include_usage) {
        const Usage usage{counts.prompt_tokens, counts.completion_tokens,
                          counts.cached_prompt_tokens,
                          truncation_.dropped_tokens + counts.dropped_tokens,
                          truncation_.dropped_messages};
        pending += ResponseBuilder::sse_event(builder_.usage_chunk(usage));
      }
      pending += "data: [DONE]\n\n";
    }
    if (!pending.empty()) {
      if (!co_await write_chunk(std::move(pending))) {
        cancel_request();
        co_return false;
      }
      pending.clear();
      last_write = Clock::now();
    }
    if (finished_) {
      // A stream that ended in an error event is still a complete HTTP response: the
      // connection stays usable (pooling clients reuse it).
      co_return co_await end_stream();
    }
    if (client_gone_) {
      cancel_request();
      co_return false;
    }
    const Clock::time_point next_ping = last_write + ping_interval;
    if (Clock::now() >= next_ping) {
      pending = ": ping\n\n";  // an SSE comment: clients skip it, proxies see traffic
      continue;
    }
    co_await wait(next_ping);
  }
}

bool GenerationSession::take_text(Choice& choice, int index, const std::string& text, bool final,
                                  std::string* sse,
                                  const std::vector<SampleLogprobs>* logprobs) {
  const bool with_logprobs = logprobs != nullptr && !logprobs->empty();
  if (!choice.tool_parser) {
    if (sse == nullptr) {
      choice.answer.text += text;
    } else if (!text.empty() || with_logprobs) {
      *sse += ResponseBuilder::sse_event(builder_.text_chunk(
          text, logprobs != nullptr, logprobs ? *logprobs : std::vector<SampleLogprobs>(), index));
    }
    return false;
  }
  std::vector<ToolCallEvent> events;
  choice.tool_parser->push(text, events);
  if (final) choice.tool_parser->finish(events);
  bool logprobs_sent = !with_logprobs;
  for (ToolCallEvent& event : events) {
    switch (event.kind) {
      case ToolCallEvent::Kind::kText:
        if (sse == nullptr) {
          choice.answer.text += event.text;
        } else {
          *sse += ResponseBuilder::sse_event(builder_.text_chunk(
              event.text, logprobs != nullptr,
              logprobs_sent ? std::vector<SampleLogprobs>() : *logprobs, index));
          logprobs_sent = true;
        }
        break;
      case ToolCallEvent::Kind::kCallStart: {
        // The model's own id (Kimi-K2 numbers its calls) unless it repeats an earlier one.
        const bool repeated = std::find(choice.call_ids.begin(), choice.call_ids.end(),
                                        event.id) != choice.call_ids.end();
        std::string id = event.id.empty() || repeated ? "call_" + random_hex(24) : event.id;
        choice.call_ids.push_back(id);
        if (sse == nullptr) {
          choice.answer.tool_calls.push_back(boost::json::object{
              {"id", id},
              {"type", "function"},
              {"function", boost::json::object{{"name", event.name}, {"arguments", ""}}}});
        } else {
          *sse += ResponseBuilder::sse_event(
              builder_.tool_call_chunk(index, event.index, &id, &event.name, ""));
        }
        break;
      }
      case ToolCallEvent::Kind::kArguments:
        if (sse == nullptr) {
          if (!choice.answer.tool_calls.empty()) {
            choice.answer.tool_calls.back().at("function").at("arguments").as_string().append(
                event.text);
          }
        } else {
          *sse += ResponseBuilder::sse_event(
              builder_.tool_call_chunk(index, event.index, nullptr, nullptr, event.text));
        }
        break;
    }
  }
  if (sse != nullptr && !logprobs_sent) {
    *sse += ResponseBuilder::sse_event(builder_.text_chunk("", true, *logprobs, index));
  }
  return !choice.call_ids.empty();  // every call started, finished or not
}

asio::awaitable<bool> GenerationSession::write_chunk(std::string data) {
  if (!connection_.chunked_allowed()) {
    auto [error, written] = co_await asio::async_write(connection_.stream(), asio::buffer(data),
                                                       asio::as_tuple(asio::use_awaitable));
    (void)written;
    co_return !error;
  }
  auto [error, written] =
      co_await asio::async_write(connection_.stream(), http::make_chunk(asio::buffer(data)),
                                 asio::as_tuple(asio::use_awaitable));
  (void)written;
  co_return !error;
}

asio::awaitable<bool> GenerationSession::end_stream() {
  if (!connection_.chunked_allowed()) co_return true;  // closing the connection ends the body
  auto [error, written] = co_await asio::async_write(connection_.stream(), http::make_chunk_last(),
                                                     asio::as_tuple(asio::use_awaitable));
  (void)written;
  co_return !error;
}

asio::awaitable<void> GenerationSession::wait(Clock::time_point until) {
  if (!waker_->woken) {
    timer_.expires_at(until);
    auto [error] = co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)error;  // cancelled = woken up
  }
  waker_->woken = false;
}

void GenerationSession::start_watching() {
  if (stop_watching_ || client_gone_) return;
  beast::flat_buffer& buffer = connection_.buffer();
  if (buffer.size() >= kMaxBufferedBytes) return;
  watching_ = true;
  // The handler runs on the strand; stop_watching() waits for it before the session ends.
  connection_.stream().async_read_some(
      buffer.prepare(kReadChunkBytes),
      [this, alive = std::weak_ptr<bool>(alive_)](beast::error_code error, size_t bytes) {
        if (alive.expired()) return;  // only if an exception skipped stop_watching()
        watching_ = false;
        if (!error) {
          connection_.buffer().commit(bytes);
          start_watching();
        } else if (error != asio::error::operation_aborted) {
          client_gone_ = true;  // EOF or reset: nobody will read the answer
        }
        if (!watching_) waker_->wake();
      });
}

asio::awaitable<void> GenerationSession::stop_watching() {
  stop_watching_ = true;
  if (!watching_) co_return;
  beast::error_code ignored;
  connection_.stream().socket().cancel(ignored);
  while (watching_) co_await wait(Clock::now() + std::chrono::seconds(1));
}

void GenerationSession::settle(const EngineOutput* final_output, const char* status,
                               FinishReason finish_reason) {
  if (!admission_ || admission_->finished()) return;
  const EngineOutput counts = final_output != nullptr ? *final_output : total_counts();
  gateway::UsageRecord record;
  record.request_id = connection_.unique_request_id();
  record.model = request_.model;
  record.prompt_tokens = counts.prompt_tokens;
  record.cached_tokens = counts.cached_prompt_tokens;
  record.completion_tokens = counts.completion_tokens;
  record.queue_seconds = counts.queue_seconds;
  if (got_first_token_) {
    record.ttft_seconds = std::chrono::duration<double>(first_token_time_ - submit_time_).count();
  }
  record.duration_seconds = std::chrono::duration<double>(Clock::now() - submit_time_).count();
  record.status = status;
  if (final_output != nullptr) record.finish_reason = finish_reason_name(finish_reason);
  // Written before the answer's last bytes go out: a request the client saw finish is in the
  // ledger even if the process dies right after.
  Status written = admission_->finish(std::move(record));
  if (!written.ok()) spdlog::error("usage ledger: {}", written.message());
}

void GenerationSession::observe(Choice& choice, const EngineOutput& output) {
  choice.counts.prompt_tokens = output.prompt_tokens;
  choice.counts.cached_prompt_tokens = output.cached_prompt_tokens;
  choice.counts.completion_tokens = output.completion_tokens;
  choice.counts.queue_seconds = output.queue_seconds;
  choice.counts.dropped_tokens = output.dropped_tokens;
  if (output.tokens.empty()) return;
  const Clock::time_point now = Clock::now();
  if (!got_first_token_) {
    got_first_token_ = true;
    first_token_time_ = now;
    context_.metrics().observe_time_to_first_token(
        std::chrono::duration<double>(now - submit_time_).count());
  }
  if (!choice.got_token) {
    choice.got_token = true;
    for (size_t i = 1; i < output.tokens.size(); ++i) {
      context_.metrics().observe_inter_token_latency(0.0);
    }
  } else {
    // Tokens that arrive together (speculative decoding, a slow reader) share the gap.
    const double gap = std::chrono::duration<double>(now - choice.last_token_time).count() /
                       static_cast<double>(output.tokens.size());
    for (size_t i = 0; i < output.tokens.size(); ++i) {
      context_.metrics().observe_inter_token_latency(gap);
    }
  }
  choice.last_token_time = now;
}

void GenerationSession::finish_metrics(const EngineOutput& counts, FinishReason finish_reason) {
  settle(&counts, "ok", finish_reason);
  for (const Choice& choice : choices_) context_.metrics().count_tool_calls(choice.call_ids.size());
  context_.metrics().observe_e2e_latency(
      std::chrono::duration<double>(Clock::now() - submit_time_).count());
  context_.metrics().count_request_end(finish_reason == FinishReason::kLength ? RequestEnd::kLength
                                                                            : RequestEnd::kStop);
}

void GenerationSession::cancel_request() {
  if (finished_) return;
  finished_ = true;
  Status failure;
  for (Choice& choice : choices_) {
    if (!choice.finished && choice.stream) model_->engine->cancel(choice.stream->id());
    if (failure.ok() && !choice.status.ok() && choice.status.code() != StatusCode::kCancelled) {
      failure = choice.status;
    }
  }
  const RequestEnd end = failure.ok() ? RequestEnd::kAbort : RequestEnd::kError;
  settle(nullptr, end == RequestEnd::kAbort ? "cancelled" : "error");
  context_.metrics().observe_e2e_latency(
      std::chrono::duration<double>(Clock::now() - submit_time_).count());
  context_.metrics().count_request_end(end);
}

}  // namespace tachyon::server

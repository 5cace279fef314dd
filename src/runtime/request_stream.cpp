#include "runtime/request_stream.h"

namespace tachyon {

void RequestStream::push(EngineOutput output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    finished_ = output.finished;
    outputs_.push_back(std::move(output));
  }
  ready_.notify_all();
  if (notify_) notify_();
}

std::optional<EngineOutput> RequestStream::try_pop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (outputs_.empty()) return std::nullopt;
  EngineOutput output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

std::optional<EngineOutput> RequestStream::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !outputs_.empty(); })) return std::nullopt;
  EngineOutput output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

EngineOutput RequestStream::wait_for_all() {
  EngineOutput all;
  while (true) {
    EngineOutput next = *pop();
    all.tokens.insert(all.tokens.end(), next.tokens.begin(), next.tokens.end());
    all.text += next.text;
    all.logprobs.insert(all.logprobs.end(), next.logprobs.begin(), next.logprobs.end());
    all.prompt_tokens = next.prompt_tokens;
    all.cached_prompt_tokens = next.cached_prompt_tokens;
    all.completion_tokens = next.completion_tokens;
    all.queue_seconds = next.queue_seconds;
    all.draft_tokens = next.draft_tokens;
    all.accepted_draft_tokens = next.accepted_draft_tokens;
    all.dropped_tokens = next.dropped_tokens;
    if (next.finished) {
      all.finished = true;
      all.finish_reason = next.finish_reason;
      all.status = next.status;
      return all;
    }
  }
}

}  // namespace tachyon

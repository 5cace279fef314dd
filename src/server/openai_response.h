// ResponseBuilder: the JSON of one completion's answer, either as a whole
// (chat.completion / text_completion) or as the SSE chunks of a stream. One builder per
// request, so that every chunk carries the same id and created time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "sampling/sampler.h"
#include "sampling/stop_condition.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::server {

inline constexpr const char* kSystemFingerprint = "fp_tachyon";

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache
  // What context_overflow "truncate" dropped, or "sink" cut from the prompt and dropped from
  // the cache (reported in prompt_tokens_details when any).
  int64_t dropped_tokens = 0;
  int dropped_messages = 0;

  boost::json::object to_json() const;
};

class ResponseBuilder {
 public:
  // `tokenizer` spells the tokens of logprobs; it must outlive the builder.
  ResponseBuilder(Endpoint endpoint, std::string model_id, const Tokenizer& tokenizer,
                  bool include_usage);

  const std::string& id() const { return id_; }
  int64_t created() const { return created_; }

  // One choice of a whole answer.
  struct Choice {
    std::string text;
    std::vector<SampleLogprobs> logprobs;  // one entry per token, used when want_logprobs
    FinishReason finish_reason = FinishReason::kNone;
    // Tool calls ({id, type, function: {name, arguments}}); with any, a stop is reported as
    // finish_reason "tool_calls" and empty content as null.
    boost::json::array tool_calls;
  };

  // The whole answer. `logprobs` is used when `want_logprobs` (one entry per token).
  boost::json::object response(const std::string& text, bool want_logprobs,
                               const std::vector<SampleLogprobs>& logprobs,
                               FinishReason finish_reason, const Usage& usage);
  // With several choices (n > 1), `index` 0, 1, ... in order.
  boost::json::object response(const std::vector<Choice>& choices, bool want_logprobs,
                               const Usage& usage);

  // Stream chunks, in order per choice: role_chunk (chat only), text_chunk…, finish_chunk; then
  // one usage_chunk (only when include_usage). `index`: the choice (n > 1).
  boost::json::object role_chunk(int index = 0) const;
  boost::json::object text_chunk(const std::string& text, bool want_logprobs,
                                 const std::vector<SampleLogprobs>& logprobs, int index = 0);
  // `tool_calls`: the choice called tools (a stop becomes finish_reason "tool_calls").
  boost::json::object finish_chunk(FinishReason finish_reason, int index = 0,
                                   bool tool_calls = false) const;
  // A streamed tool call: its first delta carries `id`, type and `name` (arguments ""), the
  // next ones argument fragments only (id and name null).
  boost::json::object tool_call_chunk(int index, int call_index, const std::string* id,
                                      const std::string* name,
                                      const std::string& arguments) const;
  boost::json::object usage_chunk(const Usage& usage) const;

  // "data: <json>\n\n"
  static std::string sse_event(const boost::json::value& value);

 private:
  boost::json::object header(const char* object) const;
  boost::json::object chunk_with_choice(boost::json::object choice) const;
  boost::json::value logprobs_json(const std::vector<SampleLogprobs>& logprobs, int index);
  boost::json::object chat_token_json(const TokenLogprob& entry) const;

  Endpoint endpoint_;
  std::string model_id_;
  const Tokenizer& tokenizer_;
  bool include_usage_;
  std::string id_;
  int64_t created_;
  // Completions logprobs: per choice, the characters before its next token.
  std::vector<int64_t> text_offsets_;
};

// `count` random lowercase hex digits (ids, request ids).
std::string random_hex(int count);

// `bytes` as a JSON-safe string: valid UTF-8 stays, every other byte becomes the text "\xNN".
std::string printable_token_text(const std::string& bytes);

}  // namespace tachyon::server

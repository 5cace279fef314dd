// build_engine_request: an OpenAiRequest becomes the engine's EngineRequest. Chat messages go
// through the model's chat template; the prompt is tokenized; the context limit is checked
// with OpenAI's context_length_exceeded wording, or the prompt truncated to fit (the request's
// or the server's context_overflow); sampling values are validated against the vocabulary.
// Every failure is a 400 ApiError naming the field.
#pragma once

#include <optional>

#include "runtime/engine_request.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/served_model.h"

namespace tachyon::server {

// What the `truncate` overflow policy cut from a prompt.
struct PromptTruncation {
  int64_t dropped_tokens = 0;
  int dropped_messages = 0;  // chat only
};

// Fills everything but `deadline`. Default max_tokens: 16 for completions (as OpenAI), until
// the context is full for chat; a max_tokens the client gave that does not fit is an error (or,
// with `truncate`, makes room for itself), a default is clipped. `truncate` leaves room for
// max_tokens when given, else for a quarter of the context.
std::optional<ApiError> build_engine_request(const OpenAiRequest& request, const ServedModel& model,
                                             EngineRequest& out,
                                             PromptTruncation* truncation = nullptr);

// The field a SamplingParams::validate message is about ("top_p must be ..." → "top_p",
// "stop[0] must ..." → "stop").
std::string param_of_validation_message(const std::string& message);

}  // namespace tachyon::server

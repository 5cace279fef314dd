// fit_conversation: a chat that has outgrown the context, cut to fit by dropping its oldest
// turns (the `truncate` overflow policy of the server and of `tachyon chat`). What always stays:
// the leading system messages and the last user message with everything after it (tool results,
// a prefilled assistant reply). What goes, oldest first: whole turns, each a user message and
// everything up to the next one, so the roles still alternate as templates expect.
#pragma once

#include <cstdint>
#include <vector>

#include <boost/json.hpp>

#include "core/function_ref.h"
#include "core/status.h"

namespace tachyon {

struct FittedConversation {
  std::vector<int32_t> prompt;  // token ids of the kept messages, rendered
  int dropped_messages = 0;
  int64_t dropped_tokens = 0;  // the whole conversation's prompt tokens minus the kept ones
};

// Renders and tokenizes a list of messages (the caller's template and tokenizer).
using RenderTokens = FunctionRef<Result<std::vector<int32_t>>(const boost::json::array&)>;

// The fewest oldest turns dropped so that the prompt has at most `max_prompt_tokens` tokens
// (none when it fits already: one render). An out_of_range error, naming both counts, when even
// the messages that always stay do not fit; the renderer's error when it fails.
Result<FittedConversation> fit_conversation(const boost::json::array& messages,
                                            int64_t max_prompt_tokens, RenderTokens render_tokens);

}  // namespace tachyon

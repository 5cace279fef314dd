// Tool calling between the OpenAI API and a model: the conversation and tools as the model's
// chat template gets them, the grammar that enforces tool_choice, and the calls parsed back out
// of the answer (chat/tool_call_format.h and chat/tool_call_parser.h have the formats and the parser).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "structured/constraint_spec.h"
#include "core/status.h"
#include "server/openai_request.h"
#include "chat/tool_call_format.h"
#include "tokenizer/vocabulary.h"

namespace tachyon::server {

// Rewrites `messages` (and sets `template_tools`) for a model writing `format`. Templates that
// render tools themselves get the tools and the messages as they are. For kGeneric the tools
// are described in the system message, assistant turns' tool_calls become <tool_call> blocks in
// their content and tool results user turns in <tool_response> blocks, so any template renders
// them. `tools` is null when the model may not call tools (past calls are still rewritten).
void prepare_tool_conversation(ToolCallFormat format, const ToolRequest* tools,
                               boost::json::array& messages, boost::json::value& template_tools);

// The grammar enforcing tool_choice and the calls' arguments: required / named choices make
// the answer the calls (one call for a named function or parallel_tool_calls false), auto lets
// text come first and constrains the calls once their first marker is written. Markers that
// `vocabulary` (may be null) holds as control tokens are matched as those tokens (the constraint
// compiler must have been given tool_marker_tokens()). `response` (may be null): the
// request's response_format; with auto the answer is then the calls or that (a JSON schema in it
// must have passed check_json_schema). nullopt when nothing is enforced (auto on Llama 3 without
// <|python_tag|> as a token: a bare JSON call cannot be told from text).
Result<std::optional<ConstraintSpec>> tool_call_constraint(ToolCallFormat format,
                                                           const ToolRequest& tools,
                                                           const Vocabulary* vocabulary,
                                                           const ConstraintSpec* response = nullptr);

// The format's markers that `vocabulary` holds as control tokens: the tokens structural tags
// name by id (ConstraintCompiler::create's marker_tokens).
std::vector<TokenId> tool_marker_tokens(ToolCallFormat format, const Vocabulary& vocabulary);

// Whether the answer's special tokens must stay in the text for the parser (markers that are
// special tokens: [TOOL_CALLS], <|python_tag|>, DeepSeek's and Kimi's).
bool tool_markers_are_special(ToolCallFormat format);

}  // namespace tachyon::server

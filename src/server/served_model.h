// ServedModel: what the HTTP layer needs of the loaded model. The objects it points to are
// owned by the serve command and outlive every request.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "structured/constraint_compiler.h"
#include "chat/tool_call_format.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace tachyon {
class DecoderModel;
class Engine;
}

namespace tachyon::server {

struct ServedModel {
  std::string id;       // what "model" must say
  int64_t created = 0;  // unix seconds, for /v1/models
  Engine* engine = nullptr;
  // Read-only views for reports (expert load and cache: thread-safe counters).
  const DecoderModel* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: the model has none (chat answers 400)
  std::string bos_token, eos_token;             // texts the chat template may print
  int max_context = 0;                          // Engine::max_context()
  // For requests that do not say (--context-overflow).
  ContextOverflow context_overflow = ContextOverflow::kError;
  // response_format's grammars (null: the model cannot constrain its output), and how long a
  // request's grammar may take to compile (--grammar-compile-timeout).
  ConstraintCompiler* constraints = nullptr;
  // How the model writes tool calls (from its chat template; kGeneric without one).
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  std::chrono::milliseconds grammar_compile_limit{10000};
};

}  // namespace tachyon::server

// ChatTemplate: a model's Jinja chat template, parsed once and rendered per request the way
// Hugging Face transformers renders it (jinja2 sandbox, trim_blocks, lstrip_blocks,
// loopcontrols, raise_exception, strftime_now, json.dumps-based tojson).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "core/status.h"

namespace tachyon {

namespace jinja {
struct Stmt;
struct RenderLimits;
}  // namespace jinja

struct ChatTemplateInputs {
  boost::json::array messages;  // [{"role":..., "content":..., "tool_calls":[...], ...}]
  boost::json::value tools;     // null when there are none
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  boost::json::object extra_context;  // anything else a template reads (e.g. enable_thinking)
};

class ChatTemplate {
 public:
  // Syntax errors come back as a Status naming the construct and the line.
  static Result<ChatTemplate> parse(std::string_view source);

  // Runtime errors (raise_exception, unknown filter, type errors, limits) come back as a Status
  // with the message and line. Thread-safe: a parsed template is immutable.
  Result<std::string> render(const ChatTemplateInputs& inputs) const;
  // The same with explicit bounds on output size, steps and nesting.
  Result<std::string> render(const ChatTemplateInputs& inputs,
                             const jinja::RenderLimits& limits) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program);

  std::shared_ptr<const Program> program_;
};

}  // namespace tachyon

#include "chat/chat_template.h"

#include <new>

#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"
#include "chat/python_text.h"

namespace tachyon {

struct ChatTemplate::Program {
  jinja::StmtList body;
};

namespace {

Status to_status(const jinja::TemplateError& error) {
  std::string message = "chat template";
  if (error.line() > 0) message += " line " + std::to_string(error.line());
  message += ": " + error.message();
  return Status(error.code(), std::move(message));
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  if (auto offset = jinja::find_invalid_utf8(source)) {
    return invalid_argument("chat template is not valid UTF-8 (byte offset " +
                            std::to_string(*offset) + ")");
  }
  try {
    auto program = std::make_shared<Program>();
    program->body = jinja::JinjaParser::parse(jinja::JinjaLexer::tokenize(source));
    return ChatTemplate(std::move(program));
  } catch (const jinja::TemplateError& error) {
    return to_status(error);
  } catch (const std::bad_alloc&) {
    return out_of_range("chat template: out of memory while parsing");
  } catch (const std::exception& error) {
    return Status(StatusCode::kInternal, std::string("chat template: ") + error.what());
  }
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  return render(inputs, jinja::RenderLimits{});
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs,
                                         const jinja::RenderLimits& limits) const {
  try {
    // The keyword arguments Hugging Face passes to Template.render().
    jinja::DictData context;
    std::string error;
    auto add = [&](std::string_view name, const boost::json::value& json) -> bool {
      jinja::Value value;
      if (!jinja::value_from_json(json, value, error)) {
        error = "chat template input '" + std::string(name) + "': " + error;
        return false;
      }
      context.set(jinja::Value::string(std::string(name)), std::move(value));
      return true;
    };
    if (!add("messages", inputs.messages) || !add("tools", inputs.tools)) {
      return invalid_argument(error);
    }
    context.set(jinja::Value::string("documents"), jinja::Value::none());
    context.set(jinja::Value::string("add_generation_prompt"),
                jinja::Value::boolean(inputs.add_generation_prompt));
    context.set(jinja::Value::string("bos_token"), jinja::Value::string(inputs.bos_token));
    context.set(jinja::Value::string("eos_token"), jinja::Value::string(inputs.eos_token));
    for (const auto& [key, json] : inputs.extra_context) {
      if (!add(std::string_view(key.data(), key.size()), json)) return invalid_argument(error);
    }
    jinja::JinjaInterpreter interpreter(limits, std::move(context));
    return interpreter.render(program_->body);
  } catch (const jinja::TemplateError& error) {
    return to_status(error);
  } catch (const std::bad_alloc&) {
    return out_of_range("chat template: out of memory while rendering");
  } catch (const std::exception& error) {
    return Status(StatusCode::kInternal, std::string("chat template: ") + error.what());
  }
}

}  // namespace tachyon

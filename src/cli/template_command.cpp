// `tachyon template`: renders a conversation with a model's chat template (or a template file),
// printing exactly the text the model would be prompted with.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "chat/chat_template.h"

namespace tachyon::cli {
namespace {

struct TemplateOptions {
  std::string model;
  std::string messages_path;
  std::string template_path;
  std::string tools_path;
  std::string bos;
  std::string eos;
  std::string context;
  bool add_generation_prompt = false;
  bool bos_given = false;
  bool eos_given = false;
};

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot open {}", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Parses JSON text, naming `what` and the line:column of the first error.
Result<boost::json::value> parse_json(const std::string& text, const std::string& what) {
  boost::json::stream_parser parser;
  boost::system::error_code error;
  const size_t consumed = parser.write(text.data(), text.size(), error);
  if (!error) parser.finish(error);
  if (error) {
    const size_t offset = std::min(consumed, text.size());
    size_t line = 1;
    size_t column = 1;
    for (size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return invalid_argument(fmt::format("{}: not valid JSON at line {}, column {}: {}", what, line,
                                        column, error.message()));
  }
  return parser.release();
}

Result<boost::json::value> read_json_file(const std::string& path) {
  TACHYON_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, path);
}

Status run(const TemplateOptions& options, std::string& rendered) {
  ChatTemplateInputs inputs;
  inputs.add_generation_prompt = options.add_generation_prompt;

  TACHYON_ASSIGN_OR_RETURN(boost::json::value messages, read_json_file(options.messages_path));
  if (messages.is_array()) {
    inputs.messages = std::move(messages.as_array());
  } else if (messages.is_object()) {
    boost::json::object& object = messages.as_object();
    const boost::json::value* list = object.if_contains("messages");
    if (list == nullptr || !list->is_array()) {
      return invalid_argument(
          fmt::format("{}: the object has no \"messages\" array", options.messages_path));
    }
    inputs.messages = list->as_array();
    for (const auto& [key, value] : object) {
      if (key == "messages") continue;
      if (key == "tools") {
        inputs.tools = value;
      } else {
        inputs.extra_context[key] = value;
      }
    }
  } else {
    return invalid_argument(
        fmt::format("{}: expected a JSON array of messages or an object with \"messages\"",
                    options.messages_path));
  }
  if (!options.tools_path.empty()) {
    TACHYON_ASSIGN_OR_RETURN(inputs.tools, read_json_file(options.tools_path));
  }
  if (!options.context.empty()) {
    TACHYON_ASSIGN_OR_RETURN(boost::json::value context, parse_json(options.context, "--context"));
    if (!context.is_object()) return invalid_argument("--context: expected a JSON object");
    for (const auto& [key, value] : context.as_object()) inputs.extra_context[key] = value;
  }

  // The model supplies the template (unless --template) and the bos/eos texts (unless given).
  std::optional<ModelFiles> model;
  if (options.template_path.empty() || !options.model.empty()) {
    TACHYON_ASSIGN_OR_RETURN(model, open_model(options.model));
  } else if (!options.bos_given || !options.eos_given) {
    Result<ModelFiles> fallback = open_model("");
    if (fallback.ok()) model = std::move(fallback.value());
  }
  std::string source;
  std::string template_name;
  if (!options.template_path.empty()) {
    TACHYON_ASSIGN_OR_RETURN(source, read_file(options.template_path));
    template_name = options.template_path;
  } else {
    Result<std::string> embedded = model->chat_template_source();
    if (!embedded.ok()) {
      return Status(embedded.status().code(),
                    embedded.status().message() + "; pass --template FILE");
    }
    source = std::move(*embedded);
    template_name = model->path;
  }
  if (model) {
    inputs.bos_token = model->special_token_text("bos_token");
    inputs.eos_token = model->special_token_text("eos_token");
  }
  if (options.bos_given) inputs.bos_token = options.bos;
  if (options.eos_given) inputs.eos_token = options.eos;

  Result<ChatTemplate> chat_template = ChatTemplate::parse(source);
  if (!chat_template.ok()) {
    return Status(chat_template.status().code(),
                  template_name + ": " + chat_template.status().message());
  }
  Result<std::string> text = chat_template->render(inputs);
  if (!text.ok()) {
    return Status(text.status().code(), template_name + ": " + text.status().message());
  }
  rendered = std::move(text.value());
  return Status();
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto options = std::make_shared<TemplateOptions>();
  CLI::App* command = app.add_subcommand("template", "Render a conversation with a chat template");
  add_model_option(*command, options->model);
  command
      ->add_option("--messages", options->messages_path,
                   "JSON file: an array of messages, or {\"messages\": [...], \"tools\": [...], "
                   "...extra context}")
      ->required();
  command->add_flag("--add-generation-prompt", options->add_generation_prompt,
                    "End with the assistant prompt");
  command->add_option("--template", options->template_path,
                      "Jinja template file (default: the model's tokenizer.chat_template)");
  command->add_option("--tools", options->tools_path, "JSON file with the tools list");
  CLI::Option* bos = command->add_option("--bos", options->bos, "bos_token text");
  CLI::Option* eos = command->add_option("--eos", options->eos, "eos_token text");
  command->add_option("--context", options->context,
                      "JSON object of extra template variables, e.g. '{\"enable_thinking\":true}'");
  command->callback([options, bos, eos] {
    options->bos_given = bos->count() > 0;
    options->eos_given = eos->count() > 0;
    std::string rendered;
    const Status status = run(*options, rendered);
    if (!status.ok()) return fail(status.message());
    std::fwrite(rendered.data(), 1, rendered.size(), stdout);
    std::fflush(stdout);
  });
}

}  // namespace tachyon::cli

// `tachyon generate`: completes a prompt (raw, or as one chat turn with --chat) and prints the
// generated text as it comes.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/model_session.h"
#include "cli/sampling_options.h"
#include "cli/speculation_flags.h"
#include "runtime/generator.h"
#include "structured/constraint_compiler.h"

namespace tachyon::cli {
namespace {

struct GenerateOptions {
  ModelOptions model;
  SamplingOptions sampling;
  SpeculationFlags speculation;
  std::string prompt;
  std::string system;
  int max_tokens = 256;
  bool chat = false;
  bool json = false;
  bool add_special = true;
  std::string context_overflow = "error";  // or sink
  // At most one: the output must match it (as the server's response_format).
  std::string json_schema;  // a JSON Schema, or @FILE
  std::string regex;
  std::string grammar;  // XGrammar EBNF, or @FILE
  bool json_object = false;
};

// "@path" → the file's contents; anything else as it is.
Result<std::string> text_or_file(const std::string& value) {
  if (value.empty() || value[0] != '@') return value;
  std::ifstream in(value.substr(1), std::ios::binary);
  if (!in) return not_found(fmt::format("cannot read {}", value.substr(1)));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The --json-schema / --regex / --grammar / --json-object request, if any.
Result<std::optional<ConstraintSpec>> constraint_spec(const GenerateOptions& options) {
  using Kind = ConstraintSpec::Kind;
  const int given = !options.json_schema.empty() + !options.regex.empty() +
                    !options.grammar.empty() + options.json_object;
  if (given > 1) {
    return invalid_argument("--json-schema, --regex, --grammar and --json-object exclude each other");
  }
  if (!options.json_schema.empty()) {
    TACHYON_ASSIGN_OR_RETURN(std::string schema, text_or_file(options.json_schema));
    return std::optional<ConstraintSpec>(ConstraintSpec{Kind::kJsonSchema, schema});
  }
  if (!options.regex.empty()) {
    return std::optional<ConstraintSpec>(ConstraintSpec{Kind::kRegex, options.regex});
  }
  if (!options.grammar.empty()) {
    TACHYON_ASSIGN_OR_RETURN(std::string grammar, text_or_file(options.grammar));
    return std::optional<ConstraintSpec>(ConstraintSpec{Kind::kGrammar, grammar});
  }
  if (options.json_object) {
    return std::optional<ConstraintSpec>(ConstraintSpec{Kind::kJsonObject, ""});
  }
  return std::optional<ConstraintSpec>();
}

Status run_generate(GenerateOptions& options) {
  TACHYON_RETURN_IF_ERROR(options.sampling.finish());
  TACHYON_RETURN_IF_ERROR(options.speculation.finish());
  SamplingParams params = options.sampling.params;
  if (options.max_tokens >= 0) params.max_tokens = options.max_tokens;
  TACHYON_ASSIGN_OR_RETURN(ModelSession session, open_session(options.model));
  if (session.follows()) return session.follow();
  TACHYON_RETURN_IF_ERROR(params.validate(session.tokenizer->vocabulary_size()));

  std::string text = options.prompt;
  bool add_special = options.add_special;
  if (options.chat) {
    TACHYON_ASSIGN_OR_RETURN(ChatTemplate chat_template, session.chat_template());
    boost::json::array messages;
    if (!options.system.empty()) messages.push_back({{"role", "system"}, {"content", options.system}});
    messages.push_back({{"role", "user"}, {"content", options.prompt}});
    TACHYON_ASSIGN_OR_RETURN(text, session.render_chat(chat_template, messages, true));
    add_special = false;  // the template spells out BOS where the model wants one
  }
  const std::vector<TokenId> prompt =
      session.tokenizer->encode(text, {.parse_special = true, .add_special = add_special});
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  TACHYON_ASSIGN_OR_RETURN(std::optional<ConstraintSpec> spec, constraint_spec(options));
  std::unique_ptr<ConstraintCompiler> compiler;
  std::unique_ptr<TokenConstraint> constraint;
  if (spec) {
    TACHYON_ASSIGN_OR_RETURN(
        compiler, ConstraintCompiler::create(
                      *session.tokenizer,
                      Generator::end_of_generation_tokens(session.tokenizer->vocabulary()),
                      session.model->config().vocab_size));
    TACHYON_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledConstraint> grammar,
                             compiler->compile(*spec, std::chrono::seconds(60)));
    constraint = compiler->start(grammar);
  }

  Generator generator(*session.model, *session.tokenizer, *session.pool, session.context_size,
                      options.model.batch_size, session.cache_type);
  TACHYON_ASSIGN_OR_RETURN(DraftSession draft, open_draft_model(options.speculation));
  std::unique_ptr<DraftModelRunner> draft_runner;
  if (draft.model) {
    TACHYON_ASSIGN_OR_RETURN(draft_runner, make_draft_runner(draft, session));
  }
  TACHYON_RETURN_IF_ERROR(generator.set_speculation(options.speculation.options, draft_runner.get()));
  generator.set_sink(options.context_overflow == "sink");
  generator.set_snapkv(options.model.snapkv_budget());
  InterruptGuard interrupt;
  TACHYON_ASSIGN_OR_RETURN(
      GenerationOutput output,
      generator.generate(prompt, params,
                         [&](std::string_view piece) {
                           if (options.json) return;
                           std::fwrite(piece.data(), 1, piece.size(), stdout);
                           std::fflush(stdout);
                         },
                         &interrupt.flag(), constraint.get()));
  if (!options.json) {
    std::fputc('\n', stdout);
    return Status();
  }
  const int completion_tokens = static_cast<int>(output.tokens.size());
  // The first generated token comes out of the prompt pass; the rest each took one step.
  const double decode_rate = completion_tokens > 1 && output.generation_seconds > 0
                                 ? (completion_tokens - 1) / output.generation_seconds
                                 : 0.0;
  boost::json::array completion_ids;
  for (TokenId id : output.tokens) completion_ids.push_back(id);
  boost::json::object result{
      {"text", output.text},
      {"completion_ids", completion_ids},
      {"finish_reason", output.cancelled ? "cancelled" : finish_reason_name(output.finish_reason)},
      {"prompt_tokens", output.prompt_tokens},
      {"completion_tokens", completion_tokens},
      {"dropped_tokens", output.dropped_tokens},
      {"prompt_seconds", output.prompt_seconds},
      {"generation_seconds", output.generation_seconds},
      {"prompt_tokens_per_second",
       output.prompt_seconds > 0 ? output.prompt_tokens / output.prompt_seconds : 0.0},
      {"generation_tokens_per_second", decode_rate},
      {"seed", params.seed ? boost::json::value(*params.seed) : boost::json::value(nullptr)},
      {"speculative", speculation_json(options.speculation.options.mode, output.drafts,
                                       output.draft_tokens, output.accepted_draft_tokens)},
  };
  std::printf("%s\n", boost::json::serialize(result).c_str());
  return Status();
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* command = app.add_subcommand("generate", "Complete a prompt");
  add_model_options(*command, options->model);
  add_numerics_option(*command, options->model);
  add_kv_evict_options(*command, options->model);
  add_sampling_options(*command, options->sampling);
  add_speculation_flags(*command, options->speculation);
  command->add_option("-p,--prompt", options->prompt, "The text to continue")->required();
  command
      ->add_option("--context-overflow", options->context_overflow,
                   "At a full context: error (default: a longer prompt is refused, generation "
                   "stops) or sink (StreamingLLM: keep the first 4 tokens and a recent window, "
                   "generate on)")
      ->check(CLI::IsMember({"error", "sink"}));
  command->add_option("-n,--max-tokens", options->max_tokens,
                      "Most tokens to generate, -1 = until the context is full (default 256)");
  command->add_flag("--chat", options->chat, "Wrap the prompt in the model's chat template");
  command->add_option("--system", options->system, "With --chat: a system message");
  command->add_flag("--add-special,!--no-add-special", options->add_special,
                    "Add BOS/EOS as the vocabulary asks (default; raw prompts only: a chat "
                    "template spells them out)");
  command->add_flag("--json", options->json, "Print one JSON object with text, counts and timings");
  command->add_option("--json-schema", options->json_schema,
                      "The output is JSON valid against this JSON Schema (text, or @FILE)");
  command->add_flag("--json-object", options->json_object, "The output is a JSON object");
  command->add_option("--regex", options->regex, "The output matches this regular expression");
  command->add_option("--grammar", options->grammar,
                      "The output is in this EBNF grammar (XGrammar's GBNF dialect, rule root "
                      "first; text, or @FILE)");
  command->callback([options] {
    Status status = run_generate(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli

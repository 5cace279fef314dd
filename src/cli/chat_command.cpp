// `tachyon chat`: an interactive conversation with the model's chat template. History is
// kept within the context window (oldest turns drop out first); the KV cache of the previous
// turn is reused, so only the new turn is computed.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "chat/conversation_fit.h"
#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/model_session.h"
#include "cli/remote_chat.h"
#include "cli/sampling_options.h"
#include "cli/speculation_flags.h"
#include "runtime/generator.h"

namespace tachyon::cli {
namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingOptions sampling;
  SpeculationFlags speculation;
  std::string system;
  int max_tokens = -1;  // per reply; -1: until the model stops or the context is full
  int min_reply_room = 128;
  std::string context_overflow = "truncate";  // or sink
  RemoteChatOptions remote;                    // --url: a server instead of a model file
};

struct Turn {
  std::string user;
  std::string assistant;
};

class ChatSession {
 public:
  ChatSession(ModelSession& session, ChatTemplate chat_template, const ChatOptions& options,
              SamplingParams params)
      : session_(session),
        template_(std::move(chat_template)),
        options_(options),
        params_(std::move(params)),
        system_(options.system),
        generator_(*session.model, *session.tokenizer, *session.pool, session.context_size,
                   options.model.batch_size, session.cache_type) {
    generator_.set_sink(options.context_overflow == "sink");
    generator_.set_snapkv(options.model.snapkv_budget());
  }

  // Speculation as the flags ask (the draft model, if any, loaded by the caller).
  Status speculate(DraftModelRunner* draft) {
    return generator_.set_speculation(options_.speculation.options, draft);
  }

  void run() {
    const bool interactive = isatty(STDIN_FILENO);
    if (interactive) {
      std::printf("tachyon chat with %s (context %d tokens)\n"
                  "/reset clears the conversation, /system TEXT sets the system message, /exit "
                  "quits. Ctrl-C stops a reply, Ctrl-D quits.\n",
                  session_.files.path.c_str(), session_.context_size);
    }
    InterruptGuard interrupt;
    while (true) {
      if (interactive) {
        std::printf("\n> ");
        std::fflush(stdout);
      }
      std::string line;
      if (!std::getline(std::cin, line)) {
        if (interrupt.interrupted() && !std::cin.eof()) {  // Ctrl-C at the prompt
          std::cin.clear();
          interrupt.clear();
          std::printf("\n(Ctrl-D or /exit quits)");
          continue;
        }
        break;  // end of input
      }
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        turns_.clear();
        if (interactive) std::printf("(conversation cleared)\n");
        continue;
      }
      if (line.starts_with("/system")) {
        system_ = line.size() > 8 ? line.substr(8) : "";
        turns_.clear();
        if (interactive) std::printf("(system message set; conversation cleared)\n");
        continue;
      }
      interrupt.clear();
      reply(line, interrupt);
    }
  }

 private:
  boost::json::array messages(bool with_last_reply) const {
    boost::json::array out;
    if (!system_.empty()) out.push_back({{"role", "system"}, {"content", system_}});
    for (size_t i = 0; i < turns_.size(); ++i) {
      out.push_back({{"role", "user"}, {"content", turns_[i].user}});
      if (i + 1 < turns_.size() || with_last_reply) {
        out.push_back({{"role", "assistant"}, {"content", turns_[i].assistant}});
      }
    }
    return out;
  }

  void reply(const std::string& user_text, const InterruptGuard& interrupt) {
    turns_.push_back({user_text, ""});
    // The oldest turns dropped until the prompt leaves room for a reply (the server's
    // context_overflow "truncate"), or with sink the whole conversation given to the
    // generator, which keeps its first tokens and a recent window: either way the
    // conversation goes on however long it gets.
    const int64_t max_prompt =
        options_.context_overflow == "sink"
            ? std::numeric_limits<int64_t>::max()
            : session_.context_size - std::min(options_.min_reply_room, session_.context_size / 4);
    auto render_tokens = [&](const boost::json::array& list) -> Result<std::vector<int32_t>> {
      TACHYON_ASSIGN_OR_RETURN(std::string rendered, session_.render_chat(template_, list, true));
      return session_.tokenizer->encode(rendered);
    };
    Result<FittedConversation> fitted = fit_conversation(messages(false), max_prompt, render_tokens);
    if (!fitted.ok()) {
      std::fprintf(stderr, "tachyon: error: %s\n", fitted.status().message().c_str());
      turns_.pop_back();
      return;
    }
    // Each dropped turn was a user message and the reply to it.
    turns_.erase(turns_.begin(), turns_.begin() + fitted->dropped_messages / 2);
    const std::vector<TokenId> prompt = std::move(fitted->prompt);
    SamplingParams params = params_;
    if (options_.max_tokens >= 0) params.max_tokens = options_.max_tokens;
    Result<GenerationOutput> output = generator_.generate(
        prompt, params,
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        &interrupt.flag());
    std::printf("\n");
    std::fflush(stdout);
    if (!output.ok()) {
      std::fprintf(stderr, "tachyon: error: %s\n", output.status().message().c_str());
      turns_.pop_back();
      return;
    }
    if (output->cancelled) std::fprintf(stderr, "(reply stopped)\n");
    turns_.back().assistant = output->text;
  }

  ModelSession& session_;
  ChatTemplate template_;
  const ChatOptions& options_;
  SamplingParams params_;
  std::string system_;
  Generator generator_;
  std::vector<Turn> turns_;
};

Status run_chat(ChatOptions& options) {
  TACHYON_RETURN_IF_ERROR(options.sampling.finish());
  TACHYON_RETURN_IF_ERROR(options.speculation.finish());
  TACHYON_ASSIGN_OR_RETURN(ModelSession session, open_session(options.model));
  if (session.follows()) return session.follow();
  TACHYON_RETURN_IF_ERROR(options.sampling.params.validate(session.tokenizer->vocabulary_size()));
  TACHYON_ASSIGN_OR_RETURN(ChatTemplate chat_template, session.chat_template());
  ChatSession chat(session, std::move(chat_template), options, options.sampling.params);
  TACHYON_ASSIGN_OR_RETURN(DraftSession draft, open_draft_model(options.speculation));
  std::unique_ptr<DraftModelRunner> draft_runner;
  if (draft.model) {
    TACHYON_ASSIGN_OR_RETURN(draft_runner, make_draft_runner(draft, session));
  }
  TACHYON_RETURN_IF_ERROR(chat.speculate(draft_runner.get()));
  chat.run();
  return Status();
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto options = std::make_shared<ChatOptions>();
  CLI::App* command = app.add_subcommand("chat", "Talk with the model");
  add_model_options(*command, options->model);
  add_numerics_option(*command, options->model);
  add_kv_evict_options(*command, options->model);
  add_sampling_options(*command, options->sampling);
  add_speculation_flags(*command, options->speculation);
  command->add_option("--system", options->system, "System message");
  command->add_option("-n,--max-tokens", options->max_tokens,
                      "Most tokens per reply, -1 = until the model stops (default)");
  command
      ->add_option("--context-overflow", options->context_overflow,
                   "When the chat outgrows the context: truncate (default: drop the oldest "
                   "turns) or sink (StreamingLLM: keep the first 4 tokens and a recent window "
                   "in the KV cache)")
      ->check(CLI::IsMember({"truncate", "sink"}));
  command->add_option("--url", options->remote.url,
                      "Chat with an OpenAI-compatible server instead (http(s)://host:port): "
                      "streamed, retried on 429/5xx as the server says, oldest turns left out "
                      "when the conversation outgrows its context; -m then names the server's "
                      "model (default: its first)");
  command->add_option("--api-key", options->remote.api_key,
                      "With --url: the server's API key (default $OPENAI_API_KEY)");
  command->add_option("--max-retries", options->remote.max_retries,
                      "With --url: retries of a failed request (default 5)")
      ->check(CLI::Range(0, 100));
  command->callback([options, command] {
    Status status;
    if (!options->remote.url.empty()) {
      RemoteChatOptions remote = options->remote;
      remote.system = options->system;
      remote.max_tokens = options->max_tokens;
      remote.model = options->model.model_path;
      if (command->get_option("--temperature")->count() > 0) {
        remote.temperature = options->sampling.params.temperature;
      }
      status = run_remote_chat(remote);
    } else {
      status = run_chat(*options);
    }
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli

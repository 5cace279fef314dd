// `tachyon chat --url`: turns stream from the server as they come; rate limits and outages are
// waited out with the client's retries (each one noted on stderr); before each turn the
// conversation is measured with the server's /tokenize (when it has one) and its oldest turns
// dropped so that it fits the model's context (max_model_len of /v1/models).
#include "cli/remote_chat.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <vector>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/interrupt.h"
#include "client/api_client.h"

namespace tachyon::cli {
namespace {

namespace json = boost::json;

struct Turn {
  std::string user;
  std::string assistant;
};

// Server-Sent Events split into data payloads as bytes arrive.
class EventReader {
 public:
  template <typename Handler>
  void feed(std::string_view bytes, Handler&& handle) {
    pending_.append(bytes);
    size_t end;
    while ((end = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, end);
      pending_.erase(0, end + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.starts_with("data: ")) handle(std::string_view(line).substr(6));
    }
  }

 private:
  std::string pending_;
};

class RemoteChat {
 public:
  RemoteChat(const RemoteChatOptions& options, std::unique_ptr<client::ApiClient> api)
      : options_(options), api_(std::move(api)), system_(options.system) {}

  Status start() {
    TACHYON_ASSIGN_OR_RETURN(json::value models, api_->get_json("/v1/models"));
    const json::value* data = models.is_object() ? models.get_object().if_contains("data") : nullptr;
    if (data == nullptr || !data->is_array() || data->get_array().empty()) {
      return unavailable(fmt::format("{}/v1/models lists no model", api_->base_url()));
    }
    const json::object* chosen = nullptr;
    for (const json::value& entry : data->get_array()) {
      if (!entry.is_object()) continue;
      const json::value* id = entry.get_object().if_contains("id");
      if (id == nullptr || !id->is_string()) continue;
      if (options_.model.empty() || id->get_string() == options_.model) {
        chosen = &entry.get_object();
        break;
      }
    }
    if (chosen == nullptr) {
      return invalid_argument(fmt::format("{} does not serve model '{}'", api_->base_url(),
                                          options_.model));
    }
    model_ = std::string(chosen->at("id").get_string());
    if (const json::value* length = chosen->if_contains("max_model_len"); length && length->is_int64()) {
      context_ = length->get_int64();
    }
    return Status();
  }

  void run() {
    const bool interactive = isatty(STDIN_FILENO);
    if (interactive) {
      std::printf("tachyon chat with %s at %s%s\n/reset clears the conversation, /exit quits. "
                  "Ctrl-C stops a reply, Ctrl-D quits.\n",
                  model_.c_str(), api_->base_url().c_str(),
                  context_ > 0 ? fmt::format(" (context {} tokens)", context_).c_str() : "");
    }
    InterruptGuard interrupt;
    std::string line;
    while (true) {
      if (interactive) {
        std::printf("\n> ");
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, line)) {
        if (interrupt.interrupted() && !std::cin.eof()) {
          std::cin.clear();
          interrupt.clear();
          continue;
        }
        break;
      }
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        turns_.clear();
        continue;
      }
      if (line.empty()) continue;
      interrupt.clear();
      reply(line, interrupt);
    }
  }

 private:
  json::array messages(const std::string& user, size_t first_turn) const {
    json::array out;
    if (!system_.empty()) out.push_back(json::object{{"role", "system"}, {"content", system_}});
    for (size_t i = first_turn; i < turns_.size(); ++i) {
      out.push_back(json::object{{"role", "user"}, {"content", turns_[i].user}});
      out.push_back(json::object{{"role", "assistant"}, {"content", turns_[i].assistant}});
    }
    out.push_back(json::object{{"role", "user"}, {"content", user}});
    return out;
  }

  // Tokens of the messages' text by the server's /tokenize; nothing when it has none.
  std::optional<int64_t> count_tokens(const json::array& conversation) {
    if (!tokenize_available_) return std::nullopt;
    std::string text;
    for (const json::value& message : conversation) {
      text += message.at("content").get_string();
      text += "\n";
    }
    Result<client::ApiResponse> response =
        api_->send("/tokenize", json::serialize(json::object{{"content", text}, {"model", model_}}));
    if (!response.ok() || response->status != 200) {
      tokenize_available_ = false;  // not every server has it
      return std::nullopt;
    }
    boost::system::error_code error;
    json::value body = json::parse(response->body, error);
    const json::value* tokens = !error && body.is_object() ? body.get_object().if_contains("tokens") : nullptr;
    if (tokens == nullptr || !tokens->is_array()) return std::nullopt;
    // A few tokens per message for the template's role markers.
    return static_cast<int64_t>(tokens->get_array().size() + 8 * conversation.size());
  }

  // The first turn to send: the oldest dropped until the conversation and the reply's room fit.
  size_t fit(const std::string& user) {
    if (context_ <= 0) return 0;
    const int64_t room = options_.max_tokens > 0 ? options_.max_tokens : 256;
    size_t first = 0;
    while (true) {
      std::optional<int64_t> tokens = count_tokens(messages(user, first));
      if (!tokens || *tokens + room <= context_ || first >= turns_.size()) break;
      ++first;
    }
    if (first > 0) {
      std::fprintf(stderr, "(the %zu oldest turn(s) no longer fit the %lld-token context and were "
                           "left out)\n",
                   first, static_cast<long long>(context_));
    }
    return first;
  }

  void reply(const std::string& user, const InterruptGuard& interrupt) {
    const size_t first = fit(user);
    json::object body{{"model", model_}, {"messages", messages(user, first)}, {"stream", true}};
    if (options_.max_tokens > 0) body["max_tokens"] = options_.max_tokens;
    if (options_.temperature) body["temperature"] = *options_.temperature;
    std::string answer, failure;
    EventReader events;
    auto sink = [&](std::string_view bytes) {
      events.feed(bytes, [&](std::string_view data) {
        if (data == "[DONE]") return;
        boost::system::error_code error;
        json::value chunk = json::parse(data, error);
        if (error || !chunk.is_object()) return;
        const json::object& fields = chunk.get_object();
        if (const json::value* problem = fields.if_contains("error")) {
          failure = json::serialize(*problem);
          return;
        }
        const json::value* choices = fields.if_contains("choices");
        if (choices == nullptr || !choices->is_array() || choices->get_array().empty()) return;
        const json::value* delta = choices->get_array()[0].get_object().if_contains("delta");
        const json::value* content = delta && delta->is_object() ? delta->get_object().if_contains("content") : nullptr;
        if (content && content->is_string()) {
          answer += content->get_string();
          std::fwrite(content->get_string().data(), 1, content->get_string().size(), stdout);
          std::fflush(stdout);
        }
      });
      return !interrupt.interrupted();
    };
    auto note = [](const client::RetryDecision& decision) {
      std::fprintf(stderr, "(retrying in %.1f s: %s)\n", decision.wait_seconds, decision.why.c_str());
    };
    Result<client::ApiResponse> response = api_->send("/v1/chat/completions", json::serialize(body), sink, note);
    std::printf("\n");
    if (!response.ok()) {
      std::fprintf(stderr, "tachyon: error: %s\n", response.status().message().c_str());
      return;
    }
    if (response->status != 200) {
      std::fprintf(stderr, "tachyon: error: HTTP %d: %s\n", response->status,
                   client::describe_error(*response).c_str());
      return;
    }
    if (!failure.empty()) std::fprintf(stderr, "tachyon: error: the stream failed: %s\n", failure.c_str());
    turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(first));
    turns_.push_back({user, answer});
  }

  const RemoteChatOptions& options_;
  std::unique_ptr<client::ApiClient> api_;
  std::string system_;
  std::string model_;
  int64_t context_ = 0;  // 0: unknown
  bool tokenize_available_ = true;
  std::vector<Turn> turns_;
};

}  // namespace

Status run_remote_chat(const RemoteChatOptions& options) {
  client::ClientOptions client;
  client.url = options.url;
  client.api_key = options.api_key;
  if (client.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) client.api_key = key;
  }
  client.max_retries = options.max_retries;
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<client::ApiClient> api, client::ApiClient::create(client));
  RemoteChat chat(options, std::move(api));
  TACHYON_RETURN_IF_ERROR(chat.start());
  chat.run();
  return Status();
}

}  // namespace tachyon::cli

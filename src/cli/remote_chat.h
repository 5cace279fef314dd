// `tachyon chat --url URL`: the same conversation against any OpenAI-compatible server.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace tachyon::cli {

struct RemoteChatOptions {
  std::string url;
  std::string api_key;  // default: $OPENAI_API_KEY
  std::string model;    // default: the server's first model
  std::string system;
  int max_tokens = -1;  // -1: the server's default
  std::optional<double> temperature;
  int max_retries = 5;
};

Status run_remote_chat(const RemoteChatOptions& options);

}  // namespace tachyon::cli

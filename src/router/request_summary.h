// RequestSummary: what the router reads from a request body to route it: the model, the
// prompt's text in order (for prefix routing), and a guess of the tokens it will cost (for
// load). A body that does not parse gives an empty summary: the request still goes to a
// replica, whose 400 the client then gets, as from a single server.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tachyon::router {

struct RequestSummary {
  std::string model;        // empty: the body names none
  // The model, then the tools and each message's role and content (or the prompt).
  std::string prefix_text;
  int64_t estimated_tokens = 0;  // prompt bytes / 4 + the completion's cap (n choices)
};

// `path`: /v1/chat/completions, /v1/completions, anything else (only "model" is read).
RequestSummary summarize_request(std::string_view path, std::string_view body);

}  // namespace tachyon::router

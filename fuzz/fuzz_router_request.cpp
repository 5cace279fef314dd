// What the router reads from untrusted input: a request body (summarize_request), the prompt
// prefix keys of its text, a replica URL. Never crashes; the summary's invariants hold.
// Input: byte 0 picks the path, the rest is the body (and the URL).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "router/prefix_index.h"
#include "router/replica.h"
#include "router/request_summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr std::string_view kPaths[] = {"/v1/chat/completions", "/v1/completions",
                                                "/tokenize", "/v1/models"};
  const std::string_view path = kPaths[data[0] % 4];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const tachyon::router::RequestSummary summary = tachyon::router::summarize_request(path, body);
  if (summary.estimated_tokens < 0) std::abort();
  if (!summary.prefix_text.empty() && !summary.prefix_text.starts_with(summary.model)) std::abort();
  tachyon::router::PrefixIndex index(16, 64);
  const auto keys = index.prefix_keys(summary.prefix_text);
  if (keys.size() != summary.prefix_text.size() / 16) std::abort();
  index.record(keys, 1);
  const auto match = index.longest_match(keys, [](int) { return true; });
  if (!keys.empty() && (!match || match->chunks == 0)) std::abort();
  (void)tachyon::router::parse_replica_url(body);
  return 0;
}

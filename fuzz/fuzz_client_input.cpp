// What the client reads from files and servers: a batch input line (parse_batch_line), a
// Retry-After value, a --url. Never crashes; a parsed line is a request or says why not.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <boost/json.hpp>

#include "client/api_client.h"
#include "client/batch_job.h"
#include "client/retry_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const tachyon::client::BatchLine line = tachyon::client::parse_batch_line(text, 1, "m");
  if (line.error.empty()) {
    // A request: the body is a JSON object with stream false.
    boost::system::error_code error;
    boost::json::value body = boost::json::parse(line.body, error);
    if (error || !body.is_object() || body.get_object().at("stream") != false) std::abort();
    if (line.url != "/v1/chat/completions" && line.url != "/v1/completions") std::abort();
  }
  if (auto seconds = tachyon::client::parse_retry_after(text); seconds && *seconds < 0) std::abort();
  tachyon::client::ClientOptions options;
  options.url = text;
  (void)tachyon::client::ApiClient::create(options);
  return 0;
}

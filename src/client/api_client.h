// ApiClient: the client side of any OpenAI-compatible server (tachyon's own, vLLM, llama.cpp,
// api.openai.com): HTTP or HTTPS (OpenSSL, certificates checked), JSON bodies, bodies read as
// they arrive (streams), and retries by RetryPolicy for whatever failed before any of the body
// was handed over. One request at a time; one client per thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "client/retry_policy.h"
#include "core/status.h"

namespace tachyon::client {

struct ClientOptions {
  std::string url;      // http(s)://host[:port][/v1]
  std::string api_key;  // sent as "Authorization: Bearer ..." when not empty
  double connect_timeout_seconds = 10;
  double read_timeout_seconds = 600;  // without a byte from the server
  int max_retries = 5;
};

struct ApiResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;  // when no body callback took it
  std::string header(const std::string& name) const;
};

class ApiClient {
 public:
  static Result<std::unique_ptr<ApiClient>> create(ClientOptions options);
  ~ApiClient();

  // Body bytes as they arrive; return false to stop reading (the connection is closed).
  using BodySink = std::function<bool(std::string_view)>;
  // Before each retry: why, and how long it waits.
  using RetryNote = std::function<void(const RetryDecision&)>;

  // GET or POST (`body` not empty: JSON) to `path` ("/v1/models", "/tokenize"), retried as
  // RetryPolicy says until a response that is not retryable. With `sink`, the body of a 2xx
  // response goes there (and is no longer retried once some did); other bodies are kept.
  // kUnavailable: the server could not be reached (after the retries).
  Result<ApiResponse> send(const std::string& path, const std::string& body,
                           const BodySink& sink = nullptr, const RetryNote& note = nullptr);

  Result<boost::json::value> get_json(const std::string& path);

  const std::string& base_url() const { return base_url_; }

 private:
  struct Endpoint;
  ApiClient(ClientOptions options, std::unique_ptr<Endpoint> endpoint, std::string base_url);
  // One attempt. `delivered`: set once some body went to `sink`.
  Result<ApiResponse> exchange(const std::string& path, const std::string& body,
                               const BodySink& sink, bool& delivered);

  ClientOptions options_;
  std::unique_ptr<Endpoint> endpoint_;
  std::string base_url_;  // scheme://host:port, without /v1
  RetryPolicy retry_;
};

// {"error": {"message", "code"}} of a response body, as "message (code)"; the body itself when
// it is not an OpenAI error.
std::string describe_error(const ApiResponse& response);
std::string error_code(const ApiResponse& response);

}  // namespace tachyon::client

// ApiError: one failed HTTP request as OpenAI-compatible clients expect it, i.e. a status code
// and the body {"error": {"message", "type", "param", "code"}} (code a string or null), plus
// the headers that steer client retries (Retry-After, x-should-retry).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "core/status.h"
#include "gateway/rejection.h"

namespace tachyon::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;
  std::optional<std::string> code;
  std::vector<std::pair<std::string, std::string>> headers;  // extra response headers

  // {"error": {...}}
  boost::json::object to_json() const;
  std::string body() const;

  // 400 invalid_request_error.
  static ApiError invalid_request(std::string message, std::optional<std::string> param = {},
                                  std::optional<std::string> code = {});
  // 400 for a field of the wrong JSON type: "'temperature' must be a number, got string".
  static ApiError wrong_type(const std::string& param, const std::string& expected,
                             const boost::json::value& got);
  // 404 for an unknown route.
  static ApiError route_not_found(const std::string& method, const std::string& target);
  // 405 for a known route asked with another method.
  static ApiError method_not_allowed(const std::string& method, const std::string& target);
  // 404 model_not_found.
  static ApiError model_not_found(const std::string& model);
  // 503 unavailable_error with Retry-After (whole seconds). Codes: "model_loading",
  // "server_overloaded", "shutting_down".
  static ApiError unavailable(std::string message, std::string code, int retry_after_seconds);
  // 413 request_too_large.
  static ApiError request_too_large(size_t limit_bytes);
  // 500 server_error.
  static ApiError internal(std::string message);
  // A request refused at the HTTP level before any route saw it (408 request_timeout, 414
  // uri_too_long, 417 expectation_failed, 431 headers_too_large, 505 http_version, 400
  // bad_http_request): invalid_request_error with `code`.
  static ApiError http_protocol(int status, std::string message, std::string code);

  // 401 invalid_api_key (the Gateway's message says what was wrong with the key).
  static ApiError invalid_api_key(std::string message);
  // The Gateway's refusal: 429 with Retry-After (whole seconds, rounded up) and retry-after-ms,
  // x-should-retry: false when retrying cannot help; 403 / 400 for model and max_tokens.
  static ApiError from_rejection(const gateway::Rejection& rejection);

  // Maps an engine / tokenizer Status. kInvalidArgument → 400 (param when known);
  // kOutOfRange → 400 context_length_exceeded; kUnavailable → 503 server_overloaded with
  // Retry-After: 1; kDeadlineExceeded → 504 timeout (x-should-retry: false, retrying a request
  // that ran out of time will run out again); kCancelled → 503 shutting_down; kNotFound → 404;
  // kUnsupported → 400; anything else → 500.
  static ApiError from_status(const Status& status, std::optional<std::string> param = {});
};

// Short JSON type name of a value, for messages: "string", "number", "boolean", ...
const char* json_type_name(const boost::json::value& value);

}  // namespace tachyon::server

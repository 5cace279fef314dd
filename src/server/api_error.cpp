#include "server/api_error.h"

#include <cmath>

#include <fmt/format.h>

namespace tachyon::server {

boost::json::object ApiError::to_json() const {
  boost::json::object error{
      {"message", message},
      {"type", type},
      {"param", param ? boost::json::value(*param) : boost::json::value(nullptr)},
      {"code", code ? boost::json::value(*code) : boost::json::value(nullptr)},
  };
  return {{"error", std::move(error)}};
}

std::string ApiError::body() const {
  return boost::json::serialize(to_json());
}

ApiError ApiError::invalid_request(std::string message, std::optional<std::string> param,
                                   std::optional<std::string> code) {
  ApiError error;
  error.status = 400;
  error.message = std::move(message);
  error.param = std::move(param);
  error.code = std::move(code);
  return error;
}

const char* json_type_name(const boost::json::value& value) {
  switch (value.kind()) {
    case boost::json::kind::null:
      return "null";
    case boost::json::kind::bool_:
      return "boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_:
      return "number";
    case boost::json::kind::string:
      return "string";
    case boost::json::kind::array:
      return "array";
    case boost::json::kind::object:
      return "object";
  }
  return "value";
}

ApiError ApiError::wrong_type(const std::string& param, const std::string& expected,
                              const boost::json::value& got) {
  return invalid_request(
      fmt::format("'{}' must be {}, got {}", param, expected, json_type_name(got)), param,
      "invalid_type");
}

ApiError ApiError::http_protocol(int status, std::string message, std::string code) {
  ApiError error = invalid_request(std::move(message), std::nullopt, std::move(code));
  error.status = status;
  return error;
}

ApiError ApiError::route_not_found(const std::string& method, const std::string& target) {
  ApiError error;
  error.status = 404;
  error.message = fmt::format("Invalid URL ({} {})", method, target);
  error.code = "not_found";
  return error;
}

ApiError ApiError::method_not_allowed(const std::string& method, const std::string& target) {
  ApiError error;
  error.status = 405;
  error.message = fmt::format("Method {} is not allowed for {}", method, target);
  error.code = "method_not_allowed";
  return error;
}

ApiError ApiError::model_not_found(const std::string& model) {
  ApiError error;
  error.status = 404;
  error.message =
      fmt::format("The model `{}` does not exist or you do not have access to it.", model);
  error.param = "model";
  error.code = "model_not_found";
  return error;
}

ApiError ApiError::unavailable(std::string message, std::string code, int retry_after_seconds) {
  ApiError error;
  error.status = 503;
  error.message = std::move(message);
  error.type = "unavailable_error";
  error.code = std::move(code);
  error.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds));
  return error;
}

ApiError ApiError::request_too_large(size_t limit_bytes) {
  ApiError error;
  error.status = 413;
  error.message = fmt::format("The request body is larger than the limit of {} bytes", limit_bytes);
  error.code = "request_too_large";
  error.headers.emplace_back("x-should-retry", "false");
  return error;
}

ApiError ApiError::internal(std::string message) {
  ApiError error;
  error.status = 500;
  error.message = std::move(message);
  error.type = "server_error";
  error.code = "internal_error";
  return error;
}

ApiError ApiError::from_status(const Status& status, std::optional<std::string> param) {
  switch (status.code()) {
    case StatusCode::kOk:
    case StatusCode::kInternal:
    case StatusCode::kIoError:
    case StatusCode::kCorruptData:
      return internal(status.message());
    case StatusCode::kInvalidArgument:
      return invalid_request(status.message(), std::move(param));
    case StatusCode::kUnsupported:
      return invalid_request(status.message(), std::move(param), "unsupported");
    case StatusCode::kOutOfRange:
      return invalid_request(status.message(), std::move(param), "context_length_exceeded");
    case StatusCode::kNotFound: {
      ApiError error = invalid_request(status.message(), std::move(param), "not_found");
      error.status = 404;
      return error;
    }
    case StatusCode::kUnavailable:
      return unavailable(status.message(), "server_overloaded", 1);
    case StatusCode::kDeadlineExceeded: {
      ApiError error;
      error.status = 504;
      error.message = status.message();
      error.type = "timeout_error";
      error.code = "request_timeout";
      error.headers.emplace_back("x-should-retry", "false");
      return error;
    }
    case StatusCode::kCancelled:
      // Only a drain cancels a request whose client is still there.
      return unavailable("The server is shutting down: " + status.message(), "shutting_down", 1);
  }
  return internal(status.message());
}

ApiError ApiError::invalid_api_key(std::string message) {
  ApiError error;
  error.status = 401;
  error.message = std::move(message);
  error.type = "invalid_request_error";  // what OpenAI sends with 401
  error.code = "invalid_api_key";
  return error;
}

ApiError ApiError::from_rejection(const gateway::Rejection& rejection) {
  ApiError error;
  error.status = rejection.http_status;
  error.message = rejection.message;
  error.type = rejection.type;
  if (!rejection.code.empty()) error.code = rejection.code;
  if (!rejection.param.empty()) error.param = rejection.param;
  if (rejection.retry_after_seconds) {
    const double seconds = *rejection.retry_after_seconds;
    error.headers.emplace_back("Retry-After",
                               std::to_string(static_cast<int64_t>(std::ceil(seconds))));
    error.headers.emplace_back("retry-after-ms", fmt::format("{:.0f}", std::ceil(seconds * 1000)));
  }
  error.headers.emplace_back("x-should-retry", rejection.should_retry ? "true" : "false");
  return error;
}

}  // namespace tachyon::server

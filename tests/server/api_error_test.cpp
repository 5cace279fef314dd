#include "server/api_error.h"

#include <gtest/gtest.h>

namespace tachyon::server {
namespace {

std::string header(const ApiError& error, const std::string& name) {
  for (const auto& [key, value] : error.headers) {
    if (key == name) return value;
  }
  return "<none>";
}

TEST(ApiErrorTest, JsonShapeHasAllFourFields) {
  EXPECT_EQ(ApiError::invalid_request("bad", "temperature", "invalid_value").body(),
            R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature",)"
            R"("code":"invalid_value"}})");
  EXPECT_EQ(ApiError::invalid_request("bad").body(),
            R"({"error":{"message":"bad","type":"invalid_request_error","param":null,)"
            R"("code":null}})");
}

TEST(ApiErrorTest, Constructors) {
  const ApiError not_found = ApiError::model_not_found("gpt-4");
  EXPECT_EQ(not_found.status, 404);
  EXPECT_EQ(not_found.code.value_or(""), "model_not_found");
  EXPECT_EQ(not_found.message, "The model `gpt-4` does not exist or you do not have access to it.");

  const ApiError loading = ApiError::unavailable("Loading model", "model_loading", 2);
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.type, "unavailable_error");
  EXPECT_EQ(header(loading, "Retry-After"), "2");

  const ApiError too_large = ApiError::request_too_large(1024);
  EXPECT_EQ(too_large.status, 413);
  EXPECT_EQ(too_large.code.value_or(""), "request_too_large");
  EXPECT_EQ(header(too_large, "x-should-retry"), "false");

  EXPECT_EQ(ApiError::route_not_found("GET", "/nope").status, 404);
  EXPECT_EQ(ApiError::method_not_allowed("GET", "/v1/completions").status, 405);
  const ApiError wrong = ApiError::wrong_type("n", "an integer", boost::json::value("2"));
  EXPECT_EQ(wrong.message, "'n' must be an integer, got string");
  EXPECT_EQ(wrong.param.value_or(""), "n");
}

TEST(ApiErrorTest, FromStatus) {
  ApiError error = ApiError::from_status(invalid_argument("x"), "prompt");
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param.value_or(""), "prompt");

  error = ApiError::from_status(out_of_range("too long"), "messages");
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.code.value_or(""), "context_length_exceeded");

  error = ApiError::from_status(unavailable("queue full"));
  EXPECT_EQ(error.status, 503);
  EXPECT_EQ(error.code.value_or(""), "server_overloaded");
  EXPECT_EQ(header(error, "Retry-After"), "1");

  error = ApiError::from_status(deadline_exceeded("took too long"));
  EXPECT_EQ(error.status, 504);
  EXPECT_EQ(error.code.value_or(""), "request_timeout");
  EXPECT_EQ(header(error, "x-should-retry"), "false");

  error = ApiError::from_status(cancelled("stopping"));
  EXPECT_EQ(error.status, 503);
  EXPECT_EQ(error.code.value_or(""), "shutting_down");

  error = ApiError::from_status(Status(StatusCode::kInternal, "boom"));
  EXPECT_EQ(error.status, 500);
  EXPECT_EQ(error.type, "server_error");
}

}  // namespace
}  // namespace tachyon::server

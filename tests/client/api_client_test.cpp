#include "client/api_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "local_server.h"

namespace tachyon::client {
namespace {

namespace json = boost::json;

std::unique_ptr<ApiClient> created(const std::string& url) {
  ClientOptions options;
  options.url = url;
  Result<std::unique_ptr<ApiClient>> client = ApiClient::create(options);
  EXPECT_TRUE(client.ok()) << url << ": " << client.status().message();
  return client.ok() ? std::move(*client) : nullptr;
}

void expect_refused(const std::string& url) {
  ClientOptions options;
  options.url = url;
  Result<std::unique_ptr<ApiClient>> client = ApiClient::create(options);
  EXPECT_FALSE(client.ok()) << url << " accepted as " << (client.ok() ? (*client)->base_url() : "");
  if (!client.ok()) {
    EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument) << url;
  }
}

std::unique_ptr<ApiClient> client_for(const std::string& url, int max_retries,
                                      const std::string& api_key = "") {
  ClientOptions options;
  options.url = url;
  options.max_retries = max_retries;
  options.api_key = api_key;
  options.connect_timeout_seconds = 5;
  options.read_timeout_seconds = 5;
  Result<std::unique_ptr<ApiClient>> client = ApiClient::create(options);
  EXPECT_TRUE(client.ok()) << url << ": " << client.status().message();
  return client.ok() ? std::move(*client) : nullptr;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---------------------------------------------------------------------------------------------
// ApiClient::create

TEST(ApiClientCreateTest, HttpHostPort) {
  std::unique_ptr<ApiClient> client = created("http://127.0.0.1:8080");
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->base_url(), "http://127.0.0.1:8080");
}

TEST(ApiClientCreateTest, HttpsHostWithoutPort) {
  std::unique_ptr<ApiClient> client = created("https://api.openai.com");
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->base_url(), "https://api.openai.com");
}

TEST(ApiClientCreateTest, HttpsHostWithPort) {
  std::unique_ptr<ApiClient> client = created("https://example.com:8443");
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->base_url(), "https://example.com:8443");
}

TEST(ApiClientCreateTest, V1SuffixMeansTheRoot) {
  for (const char* url : {"http://localhost:8000/v1", "http://localhost:8000/v1/",
                          "http://localhost:8000/", "http://localhost:8000"}) {
    std::unique_ptr<ApiClient> client = created(url);
    ASSERT_NE(client, nullptr) << url;
    EXPECT_EQ(client->base_url(), "http://localhost:8000") << url;
  }
  std::unique_ptr<ApiClient> https = created("https://api.openai.com/v1");
  ASSERT_NE(https, nullptr);
  EXPECT_EQ(https->base_url(), "https://api.openai.com");
}

TEST(ApiClientCreateTest, BracketedIpv6) {
  std::unique_ptr<ApiClient> client = created("http://[::1]:8080");
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->base_url(), "http://[::1]:8080");
  std::unique_ptr<ApiClient> with_v1 = created("http://[::1]:8080/v1");
  ASSERT_NE(with_v1, nullptr);
  EXPECT_EQ(with_v1->base_url(), "http://[::1]:8080");
}

TEST(ApiClientCreateTest, OtherSchemesAreRefused) {
  expect_refused("ftp://x");
  expect_refused("localhost:8080");
  expect_refused("HTTP//localhost");
  expect_refused("");
}

TEST(ApiClientCreateTest, PathPrefixIsRefused) {
  expect_refused("http://host/api");
  expect_refused("http://host:8000/api/v1");
  expect_refused("http://host/v2");
}

TEST(ApiClientCreateTest, NoHostIsRefused) {
  expect_refused("http://");
  expect_refused("http://:8080");
  expect_refused("https:///v1");
  expect_refused("http://host:");
  expect_refused("http://[::1");
}

TEST(ApiClientCreateTest, BadPortsAndJunkAfterBracketsAreRefused) {
  expect_refused("http://host:abc");
  expect_refused("http://host:99999");
  expect_refused("http://host:0");
  expect_refused("http://[::1]junk");
  expect_refused("http://[::1]8080");
}

// A server that accepts and never answers: the read timeout ends the request.
TEST(ApiClientSendTest, SilentServerHitsTheReadTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);  // the kernel accepts; nobody ever reads or answers
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  ClientOptions options;
  options.url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  options.max_retries = 0;
  options.read_timeout_seconds = 0.5;
  Result<std::unique_ptr<ApiClient>> client = ApiClient::create(options);
  ASSERT_TRUE(client.ok());
  const auto start = std::chrono::steady_clock::now();
  Result<ApiResponse> response = (*client)->send("/v1/models", "");
  const double elapsed = seconds_since(start);
  ::close(listener);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kUnavailable);
  EXPECT_GE(elapsed, 0.4);
  EXPECT_LT(elapsed, 3.0);
}

// ---------------------------------------------------------------------------------------------
// ApiClient against nothing listening

TEST(ApiClientSendTest, NothingListeningIsUnavailable) {
  std::unique_ptr<ApiClient> client =
      client_for("http://127.0.0.1:" + std::to_string(free_port()), 0);
  ASSERT_NE(client, nullptr);
  int notes = 0;
  const auto start = std::chrono::steady_clock::now();
  Result<ApiResponse> response = client->send(
      "/v1/completions", R"({"prompt": "x"})", nullptr, [&](const RetryDecision&) { ++notes; });
  EXPECT_LT(seconds_since(start), 3.0);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(response.status().message().find("127.0.0.1"), std::string::npos)
      << response.status().message();
  EXPECT_EQ(notes, 0);
}

TEST(ApiClientSendTest, NothingListeningIsRetriedWithBackoff) {
  std::unique_ptr<ApiClient> client =
      client_for("http://127.0.0.1:" + std::to_string(free_port()), 1);
  ASSERT_NE(client, nullptr);
  std::vector<RetryDecision> notes;
  const auto start = std::chrono::steady_clock::now();
  Result<ApiResponse> response =
      client->send("/v1/models", "", nullptr, [&](const RetryDecision& d) { notes.push_back(d); });
  const double elapsed = seconds_since(start);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kUnavailable);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(notes[0].retry);
  EXPECT_GE(notes[0].wait_seconds, 0.375);
  EXPECT_LE(notes[0].wait_seconds, 0.5);
  EXPECT_FALSE(notes[0].why.empty());
  EXPECT_GE(elapsed, 0.37);  // it did wait
  EXPECT_LT(elapsed, 4.0);
}

TEST(ApiClientSendTest, GetJsonNothingListeningIsUnavailable) {
  std::unique_ptr<ApiClient> client =
      client_for("http://127.0.0.1:" + std::to_string(free_port()), 0);
  ASSERT_NE(client, nullptr);
  Result<json::value> value = client->get_json("/v1/models");
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), StatusCode::kUnavailable);
}

// ---------------------------------------------------------------------------------------------
// ApiClient against a canned local server

TEST(ApiClientSendTest, GetWithHeadersAndAuthorization) {
  LocalServer server({http_response(200, "Content-Type: application/json\r\nX-Request-Id: req-42\r\n",
                                    R"({"data": []})")});
  std::unique_ptr<ApiClient> client = client_for(server.url() + "/v1", 0, "sk-test");
  ASSERT_NE(client, nullptr);
  Result<ApiResponse> response = client->send("/v1/models", "");
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, R"({"data": []})");
  EXPECT_EQ(response->header("x-request-id"), "req-42");  // names in lower case
  EXPECT_EQ(response->header("content-type"), "application/json");
  EXPECT_EQ(response->header("x-absent"), "");
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].rfind("GET /v1/models HTTP/1.1\r\n", 0), 0u) << requests[0];
  EXPECT_NE(requests[0].find("Authorization: Bearer sk-test\r\n"), std::string::npos) << requests[0];
}

TEST(ApiClientSendTest, PostSendsJsonBody) {
  LocalServer server({http_response(200, "", R"({"ok": true})")});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 0);
  ASSERT_NE(client, nullptr);
  const std::string body = R"({"prompt": "hello", "max_tokens": 2})";
  Result<ApiResponse> response = client->send("/v1/completions", body);
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 200);
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].rfind("POST /v1/completions HTTP/1.1\r\n", 0), 0u) << requests[0];
  EXPECT_NE(requests[0].find("Content-Type: application/json\r\n"), std::string::npos);
  EXPECT_EQ(requests[0].find("Authorization"), std::string::npos);  // no key, no header
  EXPECT_TRUE(requests[0].ends_with("\r\n\r\n" + body)) << requests[0];
}

TEST(ApiClientSendTest, RetriesA503AfterTheServersWait) {
  LocalServer server({http_response(503, "Retry-After-Ms: 20\r\n",
                                    R"({"error": {"message": "busy", "code": "overloaded"}})"),
                      http_response(200, "", "done")});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 3);
  ASSERT_NE(client, nullptr);
  std::vector<RetryDecision> notes;
  Result<ApiResponse> response =
      client->send("/v1/models", "", nullptr, [&](const RetryDecision& d) { notes.push_back(d); });
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "done");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_DOUBLE_EQ(notes[0].wait_seconds, 0.02);
  EXPECT_EQ(notes[0].why, "HTTP 503 overloaded");
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(ApiClientSendTest, ShouldRetryFalseStopsAt503) {
  LocalServer server({http_response(503, "x-should-retry: false\r\n", "down")});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 3);
  ASSERT_NE(client, nullptr);
  int notes = 0;
  Result<ApiResponse> response =
      client->send("/v1/models", "", nullptr, [&](const RetryDecision&) { ++notes; });
  ASSERT_TRUE(response.ok()) << response.status().message();  // a final answer, not a failure
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(response->body, "down");
  EXPECT_EQ(notes, 0);
}

TEST(ApiClientSendTest, ClientErrorIsNotRetried) {
  const std::string error_body =
      R"({"error": {"message": "max_tokens is too large", "code": "invalid_value"}})";
  LocalServer server({http_response(400, "", error_body)});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 3);
  ASSERT_NE(client, nullptr);
  int notes = 0;
  Result<ApiResponse> response = client->send("/v1/completions", R"({"prompt": "x"})", nullptr,
                                              [&](const RetryDecision&) { ++notes; });
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 400);
  EXPECT_EQ(response->body, error_body);
  EXPECT_EQ(notes, 0);
  EXPECT_EQ(error_code(*response), "invalid_value");
  EXPECT_EQ(describe_error(*response), "max_tokens is too large (invalid_value)");
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(ApiClientSendTest, SinkTakesTheBodyOfA2xx) {
  const std::string stream = "data: {\"a\": 1}\n\ndata: [DONE]\n\n";
  LocalServer server({http_response(200, "Content-Type: text/event-stream\r\n", stream)});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 0);
  ASSERT_NE(client, nullptr);
  std::string received;
  Result<ApiResponse> response = client->send("/v1/completions", R"({"stream": true})",
                                              [&](std::string_view bytes) {
                                                received.append(bytes);
                                                return true;
                                              });
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(received, stream);
  EXPECT_EQ(response->body, "");  // the sink took it
}

TEST(ApiClientSendTest, SinkDoesNotTakeAnErrorBody) {
  LocalServer server({http_response(404, "", "no such model")});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 0);
  ASSERT_NE(client, nullptr);
  std::string received;
  Result<ApiResponse> response = client->send("/v1/completions", R"({"stream": true})",
                                              [&](std::string_view bytes) {
                                                received.append(bytes);
                                                return true;
                                              });
  ASSERT_TRUE(response.ok()) << response.status().message();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(received, "");
  EXPECT_EQ(response->body, "no such model");
}

TEST(ApiClientSendTest, GetJsonParsesA200) {
  LocalServer server({http_response(200, "", R"({"data": [{"id": "m1"}]})")});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 0);
  ASSERT_NE(client, nullptr);
  Result<json::value> value = client->get_json("/v1/models");
  ASSERT_TRUE(value.ok()) << value.status().message();
  EXPECT_EQ(value->at("data").at(0).at("id"), "m1");
}

TEST(ApiClientSendTest, GetJsonRefusesNonJsonAndErrors) {
  LocalServer server({http_response(200, "", "<html>"), http_response(404, "", "missing")});
  std::unique_ptr<ApiClient> client = client_for(server.url(), 0);
  ASSERT_NE(client, nullptr);
  Result<json::value> not_json = client->get_json("/v1/models");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.status().code(), StatusCode::kIoError);
  Result<json::value> missing = client->get_json("/v1/models");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("404"), std::string::npos) << missing.status().message();
}

// ---------------------------------------------------------------------------------------------
// describe_error, error_code

TEST(DescribeErrorTest, OpenAiErrorBody) {
  ApiResponse response;
  response.status = 429;
  response.body = R"({"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}})";
  EXPECT_EQ(error_code(response), "insufficient_quota");
  EXPECT_EQ(describe_error(response), "You exceeded your quota (insufficient_quota)");
}

TEST(DescribeErrorTest, ErrorWithoutCode) {
  ApiResponse response;
  response.body = R"({"error": {"message": "nope", "code": null}})";
  EXPECT_EQ(error_code(response), "");
  EXPECT_EQ(describe_error(response), "nope");
}

TEST(DescribeErrorTest, NotAnOpenAiErrorIsTheBodyCut) {
  ApiResponse response;
  response.body = std::string(500, 'x');
  EXPECT_EQ(error_code(response), "");
  EXPECT_EQ(describe_error(response), std::string(300, 'x'));
  response.body = R"({"detail": "not found"})";
  EXPECT_EQ(describe_error(response), response.body);
}

}  // namespace
}  // namespace tachyon::client

#include "client/batch_job.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "local_server.h"

namespace tachyon::client {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

json::object body_of(const BatchLine& line) {
  boost::system::error_code error;
  json::value value = json::parse(line.body, error);
  EXPECT_FALSE(error) << line.body;
  EXPECT_TRUE(value.is_object()) << line.body;
  return value.is_object() ? value.get_object() : json::object();
}

// ---------------------------------------------------------------------------------------------
// parse_batch_line

TEST(ParseBatchLineTest, OpenAiBatchLine) {
  const BatchLine line = parse_batch_line(
      R"({"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions",)"
      R"( "body": {"model": "gpt-x", "messages": [{"role": "user", "content": "Hi"}],)"
      R"( "max_tokens": 5}})",
      1, "default-model");
  EXPECT_EQ(line.error, "");
  EXPECT_EQ(line.custom_id, "request-1");
  EXPECT_EQ(line.url, "/v1/chat/completions");
  const json::object body = body_of(line);
  EXPECT_EQ(body.at("model"), "gpt-x");  // not replaced by the default
  ASSERT_TRUE(body.at("messages").is_array());
  EXPECT_EQ(body.at("messages").at(0).at("content"), "Hi");
  EXPECT_EQ(body.at("max_tokens"), 5);
  EXPECT_EQ(body.at("stream"), false);
  // Only the body is sent, not the envelope.
  EXPECT_FALSE(body.contains("custom_id"));
  EXPECT_FALSE(body.contains("url"));
  EXPECT_FALSE(body.contains("method"));
}

TEST(ParseBatchLineTest, OpenAiBatchLineCompletionsUrlIsKept) {
  const BatchLine line = parse_batch_line(
      R"({"custom_id": "c7", "method": "POST", "url": "/v1/completions",)"
      R"( "body": {"prompt": "Once", "max_tokens": 3}})",
      4, "m");
  EXPECT_EQ(line.error, "");
  EXPECT_EQ(line.custom_id, "c7");
  EXPECT_EQ(line.url, "/v1/completions");
  const json::object body = body_of(line);
  EXPECT_EQ(body.at("prompt"), "Once");
  EXPECT_EQ(body.at("model"), "m");
}

TEST(ParseBatchLineTest, OpenAiBatchLineWithoutUrlOrIdUsesDefaults) {
  const BatchLine line = parse_batch_line(R"({"body": {"messages": []}})", 9, "");
  EXPECT_EQ(line.error, "");
  EXPECT_EQ(line.custom_id, "line-9");
  EXPECT_EQ(line.url, "/v1/chat/completions");
}

TEST(ParseBatchLineTest, BareChatBody) {
  const BatchLine line =
      parse_batch_line(R"({"messages": [{"role": "user", "content": "Hello"}]})", 3, "");
  EXPECT_EQ(line.error, "");
  EXPECT_EQ(line.custom_id, "line-3");
  EXPECT_EQ(line.url, "/v1/chat/completions");
  const json::object body = body_of(line);
  EXPECT_EQ(body.at("messages").at(0).at("content"), "Hello");
  EXPECT_EQ(body.at("stream"), false);
  EXPECT_FALSE(body.contains("model"));  // no default: none added
}

TEST(ParseBatchLineTest, BareCompletionBody) {
  const BatchLine line = parse_batch_line(R"({"prompt": "The sky is", "max_tokens": 4})", 12, "");
  EXPECT_EQ(line.error, "");
  EXPECT_EQ(line.custom_id, "line-12");
  EXPECT_EQ(line.url, "/v1/completions");
  const json::object body = body_of(line);
  EXPECT_EQ(body.at("prompt"), "The sky is");
  EXPECT_EQ(body.at("max_tokens"), 4);
}

TEST(ParseBatchLineTest, StreamIsForcedOff) {
  const BatchLine bare = parse_batch_line(R"({"prompt": "x", "stream": true})", 1, "");
  EXPECT_EQ(bare.error, "");
  EXPECT_EQ(body_of(bare).at("stream"), false);

  const BatchLine wrapped = parse_batch_line(
      R"({"custom_id": "s", "url": "/v1/chat/completions", "body": {"messages": [], "stream": true,)"
      R"( "stream_options": {"include_usage": true}}})",
      1, "");
  EXPECT_EQ(wrapped.error, "");
  EXPECT_EQ(body_of(wrapped).at("stream"), false);
}

TEST(ParseBatchLineTest, ModelFilledOnlyWhenMissing) {
  const BatchLine missing = parse_batch_line(R"({"prompt": "x"})", 1, "default-model");
  EXPECT_EQ(body_of(missing).at("model"), "default-model");

  const BatchLine present = parse_batch_line(R"({"prompt": "x", "model": "mine"})", 1, "default-model");
  EXPECT_EQ(body_of(present).at("model"), "mine");

  const BatchLine no_default = parse_batch_line(R"({"prompt": "x"})", 1, "");
  EXPECT_FALSE(body_of(no_default).contains("model"));
}

TEST(ParseBatchLineTest, NotJsonIsAnError) {
  const BatchLine line = parse_batch_line("{this is not json", 5, "m");
  EXPECT_NE(line.error, "");
  EXPECT_NE(line.error.find("5"), std::string::npos) << line.error;
  EXPECT_EQ(line.custom_id, "line-5");
  EXPECT_EQ(line.body, "");
}

TEST(ParseBatchLineTest, NotAnObjectIsAnError) {
  for (const char* text : {"[1, 2, 3]", "42", "\"prompt\"", "null"}) {
    const BatchLine line = parse_batch_line(text, 2, "m");
    EXPECT_NE(line.error, "") << text;
    EXPECT_EQ(line.custom_id, "line-2") << text;
  }
}

TEST(ParseBatchLineTest, BodyNotAnObjectIsAnError) {
  for (const char* text :
       {R"({"custom_id": "b", "url": "/v1/completions", "body": "prompt"})",
        R"({"custom_id": "b", "url": "/v1/completions", "body": [1]})",
        R"({"custom_id": "b", "url": "/v1/completions", "body": null})"}) {
    const BatchLine line = parse_batch_line(text, 6, "");
    EXPECT_NE(line.error, "") << text;
    EXPECT_EQ(line.custom_id, "b") << text;  // still named, so its error line can say which
  }
}

TEST(ParseBatchLineTest, OtherUrlIsAnError) {
  const BatchLine line = parse_batch_line(
      R"({"custom_id": "e1", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}})",
      8, "");
  EXPECT_NE(line.error, "");
  EXPECT_NE(line.error.find("/v1/embeddings"), std::string::npos) << line.error;
  EXPECT_EQ(line.custom_id, "e1");
}

// ---------------------------------------------------------------------------------------------
// BatchJob::load

class BatchJobTest : public testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() /
                 ("client_batch_job_test_" + std::to_string(getpid()) + "_" +
                  testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  static void write(const std::string& file, const std::string& content) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << content;
    ASSERT_TRUE(out.good()) << file;
  }

  static std::string read(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    return content.str();
  }

  BatchOptions options() const {
    BatchOptions options;
    options.input_path = path("input.jsonl");
    options.output_path = path("output.jsonl");
    options.model = "test-model";
    return options;
  }

  fs::path directory_;
};

std::string request_line(const std::string& id) {
  return R"({"custom_id": ")" + id +
         R"(", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}})" + "\n";
}

std::string result_line(const std::string& id, int index) {
  return R"({"id":"batch_req_)" + std::to_string(index) +
         R"(","response":{"status_code":200,"request_id":"","body":{}},"error":null,"custom_id":")" +
         id + "\"}\n";
}

TEST_F(BatchJobTest, CountsRequests) {
  write(path("input.jsonl"), request_line("a") + request_line("b") + R"({"prompt": "bare"})" "\n");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 3u);
  EXPECT_EQ(job->progress().skipped, 0u);
  EXPECT_EQ(job->progress().succeeded, 0u);
  EXPECT_EQ(job->progress().failed, 0u);
  EXPECT_FALSE(fs::exists(path("output.jsonl")));  // loading writes nothing
}

TEST_F(BatchJobTest, LastLineWithoutNewlineCounts) {
  write(path("input.jsonl"), request_line("a") + R"({"prompt": "no newline"})");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 2u);
}

TEST_F(BatchJobTest, InvalidLinesCountAsRequests) {
  // A line that is not a request is still a line to report on.
  write(path("input.jsonl"), request_line("a") + "not json\n" + "[1]\n");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 3u);
}

TEST_F(BatchJobTest, DuplicateCustomIdIsAnError) {
  write(path("input.jsonl"), request_line("same") + request_line("other") + request_line("same"));
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("same"), std::string::npos) << job.status().message();
  EXPECT_NE(job.status().message().find("line 3"), std::string::npos) << job.status().message();
}

TEST_F(BatchJobTest, BlankLinesAreSkipped) {
  write(path("input.jsonl"),
        request_line("a") + "\n" + "   \n" + "\t\r\n" + request_line("b") + "\n");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 2u);
}

TEST_F(BatchJobTest, BareLinesAreNamedByTheirLineNumberCountingBlankLines) {
  // line-1 is blank; the bare body on line 3 is "line-3", which the output already holds.
  write(path("input.jsonl"), "\n" + request_line("a") + R"({"prompt": "x"})" "\n");
  write(path("output.jsonl"), result_line("line-3", 0));
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 2u);
  EXPECT_EQ(job->progress().skipped, 1u);
}

TEST_F(BatchJobTest, ResumeSkipsDoneAndCutsPartialLine) {
  write(path("input.jsonl"), request_line("a") + request_line("b") + request_line("c") +
                                 request_line("d"));
  const std::string complete = result_line("a", 0) + result_line("c", 2);
  write(path("output.jsonl"), complete + R"({"id":"batch_req_1","response":{"status_co)");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 4u);
  EXPECT_EQ(job->progress().skipped, 2u);
  EXPECT_EQ(read(path("output.jsonl")), complete);
}

TEST_F(BatchJobTest, PartialLineNamingAnIdDoesNotCountAsDone) {
  write(path("input.jsonl"), request_line("a") + request_line("b"));
  const std::string complete = result_line("a", 0);
  // Cut after the custom_id was written: the result is still incomplete.
  write(path("output.jsonl"), complete + R"({"custom_id":"b","id":"batch_req_1")");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().skipped, 1u);
  EXPECT_EQ(read(path("output.jsonl")), complete);
}

TEST_F(BatchJobTest, OnlyAPartialLineIsCutToEmpty) {
  write(path("input.jsonl"), request_line("a"));
  write(path("output.jsonl"), R"({"id":"batch_req_0","custom)");
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().skipped, 0u);
  EXPECT_TRUE(fs::exists(path("output.jsonl")));
  EXPECT_EQ(fs::file_size(path("output.jsonl")), 0u);
}

TEST_F(BatchJobTest, CompleteOutputIsLeftAlone) {
  write(path("input.jsonl"), request_line("a") + request_line("b"));
  const std::string complete = result_line("a", 0) + "not json at all\n" + result_line("b", 1);
  write(path("output.jsonl"), complete);
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().skipped, 2u);  // the unreadable line in between is ignored
  EXPECT_EQ(read(path("output.jsonl")), complete);
}

TEST_F(BatchJobTest, OutputIdsNotInTheInputAreNotSkipped) {
  write(path("input.jsonl"), request_line("a") + request_line("b"));
  write(path("output.jsonl"), result_line("zzz", 0) + result_line("b", 1));
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->progress().total, 2u);
  EXPECT_EQ(job->progress().skipped, 1u);
}

TEST_F(BatchJobTest, MissingInputIsAnError) {
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_NE(job.status().message().find("input.jsonl"), std::string::npos) << job.status().message();
}

TEST_F(BatchJobTest, RunAgainstNothingWritesErrorLinesThenResumesPastThem) {
  write(path("input.jsonl"), request_line("a") + "not json\n" + request_line("b"));
  BatchOptions batch = options();
  batch.concurrency = 2;
  Result<BatchJob> job = BatchJob::load(batch);
  ASSERT_TRUE(job.ok()) << job.status().message();

  ClientOptions client;
  client.url = "http://127.0.0.1:" + std::to_string(free_port());
  client.max_retries = 0;
  client.connect_timeout_seconds = 5;
  size_t calls = 0;
  const Status status = job->run(client, [&](const BatchProgress&) { ++calls; });
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(job->progress().failed, 3u);
  EXPECT_EQ(job->progress().succeeded, 0u);

  std::ifstream output(path("output.jsonl"));
  std::string line;
  std::map<std::string, std::string> codes;  // custom_id → error code
  while (std::getline(output, line)) {
    boost::system::error_code error;
    json::value value = json::parse(line, error);
    ASSERT_FALSE(error) << line;
    ASSERT_TRUE(value.is_object()) << line;
    const json::object& result = value.get_object();
    ASSERT_TRUE(result.at("error").is_object()) << line;
    EXPECT_TRUE(result.at("response").is_null()) << line;
    codes[std::string(result.at("custom_id").as_string())] =
        std::string(result.at("error").at("code").as_string());
  }
  EXPECT_EQ(codes.size(), 3u);
  EXPECT_EQ(codes["a"], "connection_error");
  EXPECT_EQ(codes["b"], "connection_error");
  EXPECT_EQ(codes["line-2"], "invalid_request");

  // Next time the line that was not a request stays done; the two that never reached a server
  // are cut out of the output and sent again.
  Result<BatchJob> again = BatchJob::load(batch);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->progress().total, 3u);
  EXPECT_EQ(again->progress().skipped, 1u);
  std::ifstream kept(path("output.jsonl"));
  std::string first, rest;
  std::getline(kept, first);
  EXPECT_NE(first.find("\"line-2\""), std::string::npos) << first;
  EXPECT_FALSE(std::getline(kept, rest)) << rest;
}

TEST_F(BatchJobTest, RunWithBadUrlFails) {
  write(path("input.jsonl"), request_line("a"));
  Result<BatchJob> job = BatchJob::load(options());
  ASSERT_TRUE(job.ok()) << job.status().message();
  ClientOptions client;
  client.url = "ftp://example.com";
  const Status status = job->run(client, nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tachyon::client

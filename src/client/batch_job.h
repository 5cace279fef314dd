// BatchJob: `tachyon complete --input FILE.jsonl`: many requests to a server, N at a time, each
// result a JSONL line as it finishes; resumable (a second run skips what the output already
// holds).
//
// Input lines are OpenAI batch lines ({"custom_id", "method": "POST", "url":
// "/v1/chat/completions", "body": {...}}) or bare request bodies (custom_id "line-N"; the URL
// from the body: "messages" → chat, else completions). Output lines are OpenAI's batch output:
// {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}, with `error`
// {"code", "message"} when the request failed for good (after the client's retries) or its line
// was not a request. Lines are appended and flushed one by one; a run killed mid-line leaves a
// partial last line, which the next run cuts off before it resumes; results of requests that
// never reached the server (connection_error) are cut out too and those requests sent again.
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "client/api_client.h"
#include "core/status.h"

namespace tachyon::client {

struct BatchOptions {
  std::string input_path;
  std::string output_path;
  int concurrency = 4;
  std::string model;  // for bodies without "model"
};

struct BatchProgress {
  size_t total = 0;      // requests in the input
  size_t skipped = 0;    // already in the output (resumed)
  size_t succeeded = 0;  // this run
  size_t failed = 0;     // this run
};

class BatchJob {
 public:
  // Reads the input and what the output already holds.
  static Result<BatchJob> load(BatchOptions options);

  // Runs what is left; `progress` after each result (from worker threads, one at a time).
  Status run(const ClientOptions& client, const std::function<void(const BatchProgress&)>& progress);

  const BatchProgress& progress() const { return progress_; }

 private:
  struct Item {
    std::string custom_id;
    std::string url;
    std::string body;        // JSON
    std::string input_error; // the line is not a request: reported, not sent
  };
  explicit BatchJob(BatchOptions options) : options_(std::move(options)) {}

  BatchOptions options_;
  std::vector<Item> items_;  // not done yet
  BatchProgress progress_;
};

// One input line → custom_id, url and body (or why it is not a request).
struct BatchLine {
  std::string custom_id;
  std::string url;
  std::string body;
  std::string error;
};
BatchLine parse_batch_line(const std::string& line, size_t number, const std::string& model);

}  // namespace tachyon::client

// `tachyon complete --url URL --input FILE.jsonl`: a batch of requests to any OpenAI-compatible
// server, N at a time, results as JSONL (OpenAI's batch format), retried as the server asks,
// resumable (run it again after a kill: finished lines are skipped). See client/batch_job.h.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "client/batch_job.h"

namespace tachyon::cli {
namespace {

struct CompleteOptions {
  client::ClientOptions client;
  client::BatchOptions batch;
};

// "[##########----------]  50/100, 2 failed, 10 from an earlier run" on one line of a
// terminal; elsewhere a line at every tenth.
void show_progress(const client::BatchProgress& progress, bool terminal, size_t& last_tenth) {
  const size_t finished = progress.skipped + progress.succeeded + progress.failed;
  const size_t total = std::max<size_t>(1, progress.total);
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * finished / total);
  const std::string text = fmt::format(
      "[{}{}] {}/{}, {} failed{}", std::string(filled, '#'), std::string(kWidth - filled, '-'),
      finished, progress.total, progress.failed,
      progress.skipped ? fmt::format(", {} from an earlier run", progress.skipped) : "");
  if (terminal) {
    std::fprintf(stderr, "\r%s", text.c_str());
    if (finished == progress.total) std::fprintf(stderr, "\n");
  } else if (const size_t tenth = finished * 10 / total; tenth != last_tenth || finished == progress.total) {
    last_tenth = tenth;
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

Status run_complete(CompleteOptions& options) {
  if (options.client.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) options.client.api_key = key;
  }
  if (options.batch.output_path.empty()) {
    std::string base = options.batch.input_path;
    if (base.ends_with(".jsonl")) base.resize(base.size() - 6);
    options.batch.output_path = base + ".results.jsonl";
  }
  // The URL is checked before anything is read or written.
  TACHYON_RETURN_IF_ERROR(client::ApiClient::create(options.client).status());
  TACHYON_ASSIGN_OR_RETURN(client::BatchJob job, client::BatchJob::load(options.batch));
  const bool terminal = isatty(STDERR_FILENO);
  size_t last_tenth = 11;
  std::fprintf(stderr, "tachyon: %zu request(s) in %s, %zu done earlier; results in %s\n",
               job.progress().total, options.batch.input_path.c_str(), job.progress().skipped,
               options.batch.output_path.c_str());
  show_progress(job.progress(), terminal, last_tenth);
  TACHYON_RETURN_IF_ERROR(job.run(options.client, [&](const client::BatchProgress& progress) {
    show_progress(progress, terminal, last_tenth);
  }));
  if (job.progress().failed > 0) {
    return unavailable(fmt::format("{} of {} request(s) failed (see \"error\" in {}); running the "
                                   "same command again retries only lines missing from it",
                                   job.progress().failed, job.progress().total,
                                   options.batch.output_path));
  }
  return Status();
}

}  // namespace

void add_complete_command(CLI::App& app) {
  auto options = std::make_shared<CompleteOptions>();
  CLI::App* command = app.add_subcommand(
      "complete", "Send a JSONL file of requests to an OpenAI-compatible server, results as JSONL");
  command->add_option("--url", options->client.url, "The server: http(s)://host[:port]")->required();
  command->add_option("--input", options->batch.input_path,
                      "Requests, one per line: OpenAI batch lines or bare request bodies")
      ->required();
  command->add_option("--output", options->batch.output_path,
                      "Results (default: INPUT.results.jsonl); lines already there are skipped");
  command->add_option("--api-key", options->client.api_key, "API key (default $OPENAI_API_KEY)");
  command->add_option("--model", options->batch.model, "Model for requests that name none");
  command->add_option("-j,--concurrency", options->batch.concurrency,
                      "Requests in flight at once (default 4)")
      ->check(CLI::Range(1, 1024));
  command->add_option("--max-retries", options->client.max_retries,
                      "Retries of a failed request (default 5)")
      ->check(CLI::Range(0, 100));
  command->add_option("--timeout", options->client.read_timeout_seconds,
                      "Seconds without a byte from the server before a request fails (default 600)")
      ->check(CLI::Range(0.1, 1e6));
  command->callback([options] {
    Status status = run_complete(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli

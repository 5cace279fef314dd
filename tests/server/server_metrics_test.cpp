#include "server/server_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "runtime/engine.h"

namespace tachyon::server {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every line is a comment (# HELP / # TYPE) or `name{labels} value`; each family has one
// TYPE line before its samples.
void expect_valid_exposition(const std::string& text) {
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\} (-?[0-9.eE+-]+|\+Inf|NaN)$)");
  static const std::regex kType(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  static const std::regex kHelp(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)");
  std::istringstream lines(text);
  std::string line;
  std::map<std::string, std::string> types;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, kType)) {
      EXPECT_FALSE(types.contains(match[1])) << "second TYPE for " << match[1];
      types[match[1]] = match[2];
    } else if (std::regex_match(line, match, kHelp)) {
    } else if (std::regex_match(line, match, kSample)) {
      std::string family = match[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (family.size() > s.size() && family.ends_with(s) &&
            types.contains(family.substr(0, family.size() - s.size()))) {
          family = family.substr(0, family.size() - s.size());
        }
      }
      EXPECT_TRUE(types.contains(family)) << "sample before its TYPE: " << line;
    } else {
      ADD_FAILURE() << "not a valid exposition line: '" << line << "'";
    }
  }
  EXPECT_TRUE(text.ends_with("\n"));
}

TEST(ServerMetricsTest, WhileLoadingOnlyServerSideMetrics) {
  ServerMetrics metrics;
  const std::string text = metrics.render(nullptr, "m");
  expect_valid_exposition(text);
  EXPECT_TRUE(contains(text, "tachyon:model_loaded{model_name=\"m\"} 0\n"));
  EXPECT_FALSE(contains(text, "num_requests_running"));
  EXPECT_TRUE(contains(text, "# TYPE tachyon:time_to_first_token_seconds histogram\n"));
}

TEST(ServerMetricsTest, EngineAndServerMetrics) {
  ServerMetrics metrics;
  metrics.observe_time_to_first_token(0.0015);
  metrics.observe_time_to_first_token(0.5);
  metrics.observe_inter_token_latency(0.02);
  metrics.observe_e2e_latency(1.25);
  metrics.count_request_end(RequestEnd::kStop);
  metrics.count_request_end(RequestEnd::kStop);
  metrics.count_request_end(RequestEnd::kAbort);

  EngineMetrics engine;
  engine.num_running = 3;
  engine.num_waiting = 1;
  engine.kv_blocks_total = 100;
  engine.kv_blocks_used = 25;
  engine.prompt_tokens_total = 1234;
  engine.generation_tokens_total = 99;
  engine.prefix_cache_queried_tokens_total = 200;
  engine.prefix_cache_hit_tokens_total = 50;
  engine.preemptions_total = 2;
  engine.kv_bytes_per_token = 480;
  Histogram steps({1, 8, 64});
  steps.observe(1);
  steps.observe(40);
  engine.tokens_per_step = steps.snapshot();

  const std::string text = metrics.render(&engine, "my \"model\"");
  expect_valid_exposition(text);
  const std::string label = "model_name=\"my \\\"model\\\"\"";
  EXPECT_TRUE(contains(text, "# TYPE tachyon:num_requests_running gauge\n"));
  EXPECT_TRUE(contains(text, "tachyon:num_requests_running{" + label + "} 3\n"));
  EXPECT_TRUE(contains(text, "tachyon:num_requests_waiting{" + label + "} 1\n"));
  EXPECT_TRUE(contains(text, "# TYPE tachyon:prompt_tokens_total counter\n"));
  EXPECT_TRUE(contains(text, "tachyon:prompt_tokens_total{" + label + "} 1234\n"));
  EXPECT_TRUE(contains(text, "tachyon:generation_tokens_total{" + label + "} 99\n"));
  EXPECT_TRUE(contains(text, "tachyon:kv_cache_blocks_used{" + label + "} 25\n"));
  EXPECT_TRUE(contains(text, "tachyon:kv_cache_blocks_total{" + label + "} 100\n"));
  EXPECT_TRUE(contains(text, "tachyon:kv_cache_bytes_per_token{" + label + "} 480\n"));
  EXPECT_TRUE(contains(text, "tachyon:prefix_cache_hit_rate{" + label + "} 0.25\n"));
  EXPECT_TRUE(contains(text, "tachyon:num_preemptions_total{" + label + "} 2\n"));
  EXPECT_TRUE(
      contains(text, "tachyon:request_success_total{" + label + ",finished_reason=\"stop\"} 2\n"));
  EXPECT_TRUE(
      contains(text, "tachyon:request_success_total{" + label + ",finished_reason=\"abort\"} 1\n"));
  // Histograms: cumulative buckets, +Inf equals _count.
  EXPECT_TRUE(contains(text, "tachyon:iteration_tokens_bucket{" + label + ",le=\"1\"} 1\n"));
  EXPECT_TRUE(contains(text, "tachyon:iteration_tokens_bucket{" + label + ",le=\"8\"} 1\n"));
  EXPECT_TRUE(contains(text, "tachyon:iteration_tokens_bucket{" + label + ",le=\"64\"} 2\n"));
  EXPECT_TRUE(contains(text, "tachyon:iteration_tokens_bucket{" + label + ",le=\"+Inf\"} 2\n"));
  EXPECT_TRUE(contains(text, "tachyon:iteration_tokens_sum{" + label + "} 41\n"));
  EXPECT_TRUE(contains(text, "tachyon:iteration_tokens_count{" + label + "} 2\n"));
  EXPECT_TRUE(
      contains(text, "tachyon:time_to_first_token_seconds_bucket{" + label + ",le=\"0.001\"} 0\n"));
  EXPECT_TRUE(
      contains(text, "tachyon:time_to_first_token_seconds_bucket{" + label + ",le=\"0.002\"} 1\n"));
  EXPECT_TRUE(contains(text, "tachyon:time_to_first_token_seconds_count{" + label + "} 2\n"));
  EXPECT_TRUE(contains(text, "tachyon:e2e_request_latency_seconds_sum{" + label + "} 1.25\n"));
  EXPECT_TRUE(contains(text, "tachyon:inter_token_latency_seconds_count{" + label + "} 1\n"));
}

}  // namespace
}  // namespace tachyon::server

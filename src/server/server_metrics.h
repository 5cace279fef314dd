// ServerMetrics: what the HTTP layer measures itself (latencies seen from the server, finished
// requests by reason) and the Prometheus text of /metrics, which also carries the engine's
// counters and gauges. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/histogram.h"
#include "gateway/gateway_metrics.h"

namespace tachyon {
struct EngineMetrics;
}

namespace tachyon::server {

// How a request ended, for tachyon:request_success_total{finished_reason=...}.
enum class RequestEnd { kStop, kLength, kAbort, kError };
const char* request_end_name(RequestEnd end);

class ServerMetrics {
 public:
  ServerMetrics();

  // Seconds from submit to the first generated token.
  void observe_time_to_first_token(double seconds) { time_to_first_token_.observe(seconds); }
  // Seconds between consecutive generated tokens.
  void observe_inter_token_latency(double seconds) { inter_token_latency_.observe(seconds); }
  // Seconds from submit to the finishing event.
  void observe_e2e_latency(double seconds) { e2e_latency_.observe(seconds); }
  void count_request_end(RequestEnd end);
  // HTTP requests answered (tachyon:http_requests_total).
  void count_http_request() { http_requests_.fetch_add(1, std::memory_order_relaxed); }
  // Requests refused at the HTTP level before a route saw them (408, 413, 414, 431, ...).
  void count_http_refusal() { http_refusals_.fetch_add(1, std::memory_order_relaxed); }
  // Connections accepted and closed (open = the difference), and those refused for being
  // over --max-connections.
  void count_connection_opened() { connections_opened_.fetch_add(1, std::memory_order_relaxed); }
  void count_connection_closed() { connections_closed_.fetch_add(1, std::memory_order_relaxed); }
  void count_connection_refused() { connections_refused_.fetch_add(1, std::memory_order_relaxed); }
  // Structured output and tools: seconds a request waited for its grammar (cache hits too),
  // grammars refused (bad input or over the time limit), tool calls answered.
  void observe_grammar_wait(double seconds) { grammar_wait_.observe(seconds); }
  void count_grammar_refused() { grammars_refused_.fetch_add(1, std::memory_order_relaxed); }
  void count_tool_calls(uint64_t calls) {
    tool_calls_.fetch_add(calls, std::memory_order_relaxed);
  }

  // Prometheus text exposition format 0.0.4. `engine` is null while the model loads.
  std::string render(const EngineMetrics* engine, std::string_view model_name) const;

 private:
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram e2e_latency_;
  Histogram grammar_wait_;
  std::atomic<uint64_t> grammars_refused_{0};
  std::atomic<uint64_t> tool_calls_{0};
  std::array<std::atomic<uint64_t>, 4> request_ends_{};
  std::atomic<uint64_t> http_requests_{0};
  std::atomic<uint64_t> http_refusals_{0};
  std::atomic<uint64_t> connections_opened_{0};
  std::atomic<uint64_t> connections_closed_{0};
  std::atomic<uint64_t> connections_refused_{0};
};

// The labels every series of the served model carries: model_name="...", escaped.
std::string prometheus_model_labels(std::string_view model_name);
// A label value with backslash, quote and newline escaped.
std::string escape_prometheus_label(std::string_view value);

// Per-key counters of the Gateway (key names only, never secrets), in Prometheus form.
std::string render_gateway_metrics(const gateway::GatewayMetrics& metrics);

// Appends one histogram in Prometheus form (_bucket{le=...}, _sum, _count), with HELP/TYPE.
void append_prometheus_histogram(std::string& out, std::string_view name, std::string_view help,
                                 std::string_view labels, const Histogram::Snapshot& snapshot);

}  // namespace tachyon::server

#include "server/server_metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "runtime/engine.h"

namespace tachyon::server {
// Prometheus label values escape backslash, quote and newline.
std::string escape_prometheus_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

std::string escape_label(std::string_view value) { return escape_prometheus_label(value); }

// Shortest exact form: "0.005", "1", "1e-05", "+Inf".
std::string format_value(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

void append_header(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void append_single(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, std::string_view labels, T value) {
  append_header(out, name, type, help);
  if constexpr (std::is_floating_point_v<T>) {
    out += fmt::format("{}{{{}}} {}\n", name, labels, format_value(value));
  } else {
    out += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
}

std::string join_labels(std::string_view base, std::string_view extra) {
  if (base.empty()) return std::string(extra);
  if (extra.empty()) return std::string(base);
  return fmt::format("{},{}", base, extra);
}

// Speculative decoding counters, one series per proposer.
void append_speculative(std::string& out, std::string_view labels, const EngineMetrics& engine) {
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const EngineMetrics&, int);
  };
  static const Series kSeries[] = {
      {"tachyon:spec_decode_num_drafts_total", "counter", "Drafts verified.",
       [](const EngineMetrics& m, int s) { return static_cast<double>(m.drafts_total[s]); }},
      {"tachyon:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.",
       [](const EngineMetrics& m, int s) { return static_cast<double>(m.draft_tokens_total[s]); }},
      {"tachyon:spec_decode_num_accepted_tokens_total", "counter",
       "Draft tokens accepted (equal to the token the request sampled).",
       [](const EngineMetrics& m, int s) {
         return static_cast<double>(m.accepted_draft_tokens_total[s]);
       }},
      {"tachyon:spec_decode_mean_accepted_length", "gauge",
       "Accepted draft tokens per verified draft over the server's lifetime.",
       [](const EngineMetrics& m, int s) {
         return m.drafts_total[s] > 0
                    ? static_cast<double>(m.accepted_draft_tokens_total[s]) / m.drafts_total[s]
                    : 0.0;
       }},
  };
  for (const Series& series : kSeries) {
    append_header(out, series.name, series.type, series.help);
    for (int s = 0; s < kNumDraftSources; ++s) {
      out += fmt::format("{}{{{}}} {}\n", series.name,
                         join_labels(labels, fmt::format("proposer=\"{}\"",
                                                         draft_source_name(static_cast<DraftSource>(s)))),
                         format_value(series.value(engine, s)));
    }
  }
}

// Bytes and hits of the prefix cache's tiers: RAM, and the disk tier when it is on.
void append_kv_tiers(std::string& out, const std::string& labels, const EngineMetrics& engine) {
  const double queried = static_cast<double>(engine.prefix_cache_queried_tokens_total);
  const uint64_t disk_hits = engine.prefix_cache_disk_tokens_total;
  const uint64_t ram_hits = engine.prefix_cache_hit_tokens_total -
                            std::min(disk_hits, engine.prefix_cache_hit_tokens_total);
  append_single(out, "tachyon:kv_cache_ram_bytes", "gauge",
                "Bytes of KV cache blocks held by requests or holding reusable prefixes.", labels,
                (engine.kv_blocks_used + engine.kv_blocks_cached) * engine.kv_block_bytes +
                    (engine.kv_local_blocks_used + engine.kv_local_blocks_cached) *
                        engine.kv_local_block_bytes);
  append_single(out, "tachyon:snapkv_compactions_total", "counter",
                "Prompts SnapKV compressed (--kv-evict snapkv).", labels,
                engine.snapkv_compactions_total);
  append_single(out, "tachyon:snapkv_evicted_tokens_total", "counter",
                "Positions per KV head SnapKV dropped.", labels,
                engine.snapkv_evicted_tokens_total);
  append_single(out, "tachyon:prefix_cache_ram_hit_rate", "gauge",
                "Prompt tokens found in RAM / prompt tokens looked up.", labels,
                queried > 0 ? static_cast<double>(ram_hits) / queried : 0.0);
  if (!engine.kv_disk_enabled) return;
  const KvDiskCounters& disk = engine.kv_disk;
  append_single(out, "tachyon:prefix_cache_disk_hits_total", "counter",
                "Prompt tokens read back from the KV disk tier.", labels, disk_hits);
  append_single(out, "tachyon:prefix_cache_disk_hit_rate", "gauge",
                "Prompt tokens read from disk / prompt tokens looked up.", labels,
                queried > 0 ? static_cast<double>(disk_hits) / queried : 0.0);
  append_single(out, "tachyon:kv_disk_bytes", "gauge", "Bytes in the KV disk directory.", labels,
                disk.bytes);
  append_single(out, "tachyon:kv_disk_limit_bytes", "gauge", "--kv-disk-size.", labels,
                engine.kv_disk_limit_bytes);
  append_single(out, "tachyon:kv_disk_blocks", "gauge", "KV blocks on disk.", labels, disk.files);
  append_single(out, "tachyon:kv_disk_blocks_loaded_total", "counter",
                "KV blocks read back from disk.", labels, disk.blocks_loaded);
  append_single(out, "tachyon:kv_disk_read_bytes_total", "counter",
                "Bytes read from the KV disk tier.", labels, disk.bytes_read);
  append_single(out, "tachyon:kv_disk_blocks_written_total", "counter",
                "KV blocks written to disk.", labels, disk.blocks_written);
  append_single(out, "tachyon:kv_disk_written_bytes_total", "counter",
                "Bytes written to the KV disk tier.", labels, disk.bytes_written);
  append_single(out, "tachyon:kv_disk_evictions_total", "counter",
                "KV block files deleted to stay within --kv-disk-size.", labels,
                disk.files_evicted);
  append_single(out, "tachyon:kv_disk_rejected_total", "counter",
                "KV block files found corrupt, truncated or foreign: deleted and recomputed.",
                labels, disk.files_rejected);
  append_single(out, "tachyon:kv_disk_writes_dropped_total", "counter",
                "KV blocks not written because the writer was behind.", labels,
                disk.writes_dropped);
  append_single(out, "tachyon:kv_disk_write_errors_total", "counter",
                "KV block writes the file system refused.", labels, disk.write_errors);
}

}  // namespace

const char* request_end_name(RequestEnd end) {
  switch (end) {
    case RequestEnd::kStop:
      return "stop";
    case RequestEnd::kLength:
      return "length";
    case RequestEnd::kAbort:
      return "abort";
    case RequestEnd::kError:
      return "error";
  }
  return "error";
}

ServerMetrics::ServerMetrics()
    // 1 ms … ~65 s for time to first token and whole requests; 1 ms … ~8 s between tokens.
    : time_to_first_token_(Histogram::exponential_bounds(0.001, 2.0, 17)),
      inter_token_latency_(Histogram::exponential_bounds(0.001, 2.0, 14)),
      e2e_latency_(Histogram::exponential_bounds(0.01, 2.0, 17)),
      // 0.1 ms … ~3 s: cache hits, typical compilations, the time limit's range.
      grammar_wait_(Histogram::exponential_bounds(0.0001, 2.0, 16)) {}

void ServerMetrics::count_request_end(RequestEnd end) {
  request_ends_[static_cast<size_t>(end)].fetch_add(1, std::memory_order_relaxed);
}

void append_prometheus_histogram(std::string& out, std::string_view name, std::string_view help,
                                 std::string_view labels, const Histogram::Snapshot& snapshot) {
  append_header(out, name, "histogram", help);
  for (size_t i = 0; i < snapshot.upper_bounds.size(); ++i) {
    out += fmt::format(
        "{}_bucket{{{}}} {}\n", name,
        join_labels(labels, fmt::format("le=\"{}\"", format_value(snapshot.upper_bounds[i]))),
        snapshot.cumulative_counts[i]);
  }
  out +=
      fmt::format("{}_bucket{{{}}} {}\n", name, join_labels(labels, "le=\"+Inf\""), snapshot.count);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, format_value(snapshot.sum));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, snapshot.count);
}

std::string prometheus_model_labels(std::string_view model_name) {
  return fmt::format("model_name=\"{}\"", escape_label(model_name));
}

std::string ServerMetrics::render(const EngineMetrics* engine, std::string_view model_name) const {
  const std::string labels = prometheus_model_labels(model_name);
  std::string out;
  append_single(out, "tachyon:model_loaded", "gauge", "1 when the model is loaded and serving.",
                labels, engine ? 1 : 0);
  if (engine != nullptr) {
    append_single(out, "tachyon:num_requests_running", "gauge",
                  "Requests the engine is running now.", labels, engine->num_running);
    append_single(out, "tachyon:num_requests_waiting", "gauge", "Requests waiting to be admitted.",
                  labels, engine->num_waiting);
    append_single(out, "tachyon:prompt_tokens_total", "counter",
                  "Prompt tokens of admitted requests.", labels, engine->prompt_tokens_total);
    append_single(out, "tachyon:generation_tokens_total", "counter", "Generated tokens.", labels,
                  engine->generation_tokens_total);
    append_single(out, "tachyon:kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.",
                  labels, engine->kv_blocks_total);
    append_single(out, "tachyon:kv_cache_bytes_per_token", "gauge",
                  "KV cache bytes one token takes over all layers (sliding-window models: "
                  "over the global layers; the local ones keep only their windows).",
                  labels,
                  engine->kv_bytes_per_token);
    append_single(out, "tachyon:kv_cache_blocks_used", "gauge",
                  "KV cache blocks held by running requests.", labels, engine->kv_blocks_used);
    append_single(out, "tachyon:kv_cache_blocks_cached", "gauge",
                  "Free KV cache blocks that still hold reusable prefixes.", labels,
                  engine->kv_blocks_cached);
    if (engine->kv_local_blocks_total > 0) {
      append_single(out, "tachyon:kv_cache_local_blocks_total", "gauge",
                    "Blocks of the sliding-window layers' own pool (they keep only windows).",
                    labels, engine->kv_local_blocks_total);
      append_single(out, "tachyon:kv_cache_local_blocks_used", "gauge",
                    "Sliding-window layers' blocks held by running requests.", labels,
                    engine->kv_local_blocks_used);
    }
    append_single(out, "tachyon:kv_cache_usage_ratio", "gauge",
                  "Fraction of KV cache blocks held by running requests.", labels,
                  engine->kv_blocks_total > 0
                      ? static_cast<double>(engine->kv_blocks_used) / engine->kv_blocks_total
                      : 0.0);
    append_single(out, "tachyon:prefix_cache_queries_total", "counter",
                  "Prompt tokens looked up in the prefix cache.", labels,
                  engine->prefix_cache_queried_tokens_total);
    append_single(out, "tachyon:prefix_cache_hits_total", "counter",
                  "Prompt tokens found in the prefix cache.", labels,
                  engine->prefix_cache_hit_tokens_total);
    append_single(out, "tachyon:prefix_cache_hit_rate", "gauge",
                  "Prefix cache hits / queries over the server's lifetime.", labels,
                  engine->prefix_cache_queried_tokens_total > 0
                      ? static_cast<double>(engine->prefix_cache_hit_tokens_total) /
                            engine->prefix_cache_queried_tokens_total
                      : 0.0);
    append_kv_tiers(out, labels, *engine);
    append_single(out, "tachyon:num_preemptions_total", "counter",
                  "Running requests preempted to free KV memory.", labels,
                  engine->preemptions_total);
    append_single(out, "tachyon:engine_steps_total", "counter", "Engine steps run.", labels,
                  engine->steps_total);
    append_prometheus_histogram(out, "tachyon:iteration_tokens", "Tokens computed per engine step.",
                                labels, engine->tokens_per_step);
    append_speculative(out, labels, *engine);
  }
  append_header(out, "tachyon:request_success_total", "counter",
                "Requests finished, by how they ended (stop, length, abort, error).");
  for (RequestEnd end :
       {RequestEnd::kStop, RequestEnd::kLength, RequestEnd::kAbort, RequestEnd::kError}) {
    out += fmt::format(
        "tachyon:request_success_total{{{}}} {}\n",
        join_labels(labels, fmt::format("finished_reason=\"{}\"", request_end_name(end))),
        request_ends_[static_cast<size_t>(end)].load(std::memory_order_relaxed));
  }
  append_single(out, "tachyon:http_requests_total", "counter", "HTTP requests answered.", labels,
                http_requests_.load(std::memory_order_relaxed));
  append_single(out, "tachyon:http_requests_refused_total", "counter",
                "HTTP requests refused before routing (408, 413, 414, 417, 431, 505).", labels,
                http_refusals_.load(std::memory_order_relaxed));
  const uint64_t closed = connections_closed_.load(std::memory_order_relaxed);
  const uint64_t opened = connections_opened_.load(std::memory_order_relaxed);
  append_single(out, "tachyon:http_connections_open", "gauge", "Open HTTP connections.", labels,
                opened > closed ? opened - closed : 0);
  append_single(out, "tachyon:http_connections_total", "counter", "HTTP connections accepted.",
                labels, opened);
  append_single(out, "tachyon:http_connections_refused_total", "counter",
                "HTTP connections refused (503) for being over --max-connections.", labels,
                connections_refused_.load(std::memory_order_relaxed));
  append_prometheus_histogram(out, "tachyon:time_to_first_token_seconds",
                              "Seconds from submit to the first generated token.", labels,
                              time_to_first_token_.snapshot());
  append_prometheus_histogram(out, "tachyon:inter_token_latency_seconds",
                              "Seconds between consecutive generated tokens.", labels,
                              inter_token_latency_.snapshot());
  append_prometheus_histogram(out, "tachyon:e2e_request_latency_seconds",
                              "Seconds from submit to the end of a request.", labels,
                              e2e_latency_.snapshot());
  append_prometheus_histogram(out, "tachyon:grammar_wait_seconds",
                              "Seconds a request waited for its response_format or tool grammar "
                              "(compilation or cache).",
                              labels, grammar_wait_.snapshot());
  append_single(out, "tachyon:grammars_refused_total", "counter",
                "Grammars refused: malformed or unsupported schema, regex or grammar, or over "
                "the compile time limit.",
                labels, grammars_refused_.load(std::memory_order_relaxed));
  append_single(out, "tachyon:tool_calls_total", "counter", "Tool calls in answers.", labels,
                tool_calls_.load(std::memory_order_relaxed));
  return out;
}

std::string render_gateway_metrics(const gateway::GatewayMetrics& metrics) {
  std::string out;
  append_header(out, "tachyon:key_requests_total", "counter",
                "Requests admitted, per API key name.");
  for (const gateway::TenantCounters& key : metrics.tenants) {
    out += fmt::format("tachyon:key_requests_total{{key=\"{}\"}} {}\n", escape_label(key.key_name),
                       key.requests_admitted);
  }
  append_header(out, "tachyon:key_requests_in_flight", "gauge",
                "Requests admitted and not finished yet, per API key name.");
  for (const gateway::TenantCounters& key : metrics.tenants) {
    out += fmt::format("tachyon:key_requests_in_flight{{key=\"{}\"}} {}\n",
                       escape_label(key.key_name), key.in_flight);
  }
  append_header(out, "tachyon:key_tokens_total", "counter",
                "Tokens of finished requests, per API key name and kind (prompt, completion).");
  for (const gateway::TenantCounters& key : metrics.tenants) {
    out += fmt::format("tachyon:key_tokens_total{{key=\"{}\",kind=\"prompt\"}} {}\n",
                       escape_label(key.key_name), key.prompt_tokens);
    out += fmt::format("tachyon:key_tokens_total{{key=\"{}\",kind=\"completion\"}} {}\n",
                       escape_label(key.key_name), key.completion_tokens);
  }
  append_header(out, "tachyon:key_rejections_total", "counter",
                "Requests refused by the key's limits, per API key name and reason.");
  for (const gateway::TenantCounters& key : metrics.tenants) {
    for (const auto& [reason, count] : key.rejections) {
      out += fmt::format("tachyon:key_rejections_total{{key=\"{}\",reason=\"{}\"}} {}\n",
                         escape_label(key.key_name), escape_label(reason), count);
    }
  }
  append_header(out, "tachyon:authentication_failures_total", "counter",
                "Requests with a missing, unknown or revoked API key.");
  out += fmt::format("tachyon:authentication_failures_total {}\n", metrics.authentication_failures);
  return out;
}

}  // namespace tachyon::server

// `tachyon serve`: the OpenAI-compatible HTTP server. The listener comes up first (so health
// checks see 503 "loading" instead of a refused connection), the model and the engine load on
// a background thread, and SIGINT/SIGTERM drain the running requests before exiting 0.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/listen_options.h"
#include "cli/model_session.h"
#include "cli/router_command.h"
#include "cli/speculation_flags.h"
#include "core/paths.h"
#include "gateway/gateway.h"
#include "structured/constraint_compiler.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "server/http_server.h"
#include "server/tool_calling.h"

namespace tachyon::cli {
namespace {

struct ServeCommandOptions {
  ModelOptions model;
  server::ServeOptions serve;
  std::string model_alias;
  std::string kv_cache_memory;  // fraction or size; empty: the engine's default
  std::string kv_disk_size = "8GiB";  // --kv-disk-size
  std::string context_overflow = "error";  // default policy: error or truncate
  double grammar_compile_timeout_seconds = 10;  // --grammar-compile-timeout
  EngineOptions engine;
  SpeculationFlags speculation;
  std::string redis_url;               // --redis: limits shared by every replica
  bool redis_fail_open = false;        // --redis-fail-open
  int replicas = 1;                    // --replicas: that many servers behind a router
  std::string routing = "cache-aware";  // --routing, with --replicas
};

// Set in the children of `serve --replicas N` (0, 1, ...).
const char* replica_index() { return std::getenv("TACHYON_REPLICA_INDEX"); }

// Everything the background loader builds. Members are destroyed in reverse order: the engine
// (which uses the rest) first.
struct LoadedModel {
  ModelSession session;
  DraftSession draft;  // --draft-model
  std::optional<ChatTemplate> chat_template;
  std::unique_ptr<ConstraintCompiler> constraints;  // response_format grammars
  std::unique_ptr<Engine> engine;
};

Status load_model(const ServeCommandOptions& options, LoadedModel& loaded,
                  server::HttpServer& http_server) {
  const auto start = std::chrono::steady_clock::now();
  TACHYON_ASSIGN_OR_RETURN(loaded.session, open_session(options.model));
  Result<ChatTemplate> chat_template = loaded.session.chat_template();
  if (chat_template.ok()) {
    loaded.chat_template = std::move(*chat_template);
  } else {
    spdlog::warn("{}; /v1/chat/completions will answer 400", chat_template.status().message());
  }
  EngineOptions engine_options = options.engine;
  engine_options.max_context = loaded.session.context_size;
  engine_options.kv_cache_type = loaded.session.cache_type;
  if (!engine_options.kv_disk_directory.empty()) {
    TACHYON_ASSIGN_OR_RETURN(engine_options.model_fingerprint,
                             model_fingerprint(loaded.session, options.model));
  }
  TACHYON_ASSIGN_OR_RETURN(loaded.draft, open_draft_model(options.speculation));
  TACHYON_ASSIGN_OR_RETURN(loaded.engine,
                           Engine::create(*loaded.session.model, *loaded.session.tokenizer,
                                          *loaded.session.pool, engine_options,
                                          loaded.draft.ref()));

  auto served = std::make_shared<server::ServedModel>();
  served->id = options.serve.model_id;
  served->created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  served->engine = loaded.engine.get();
  served->model = loaded.session.model.get();
  served->tokenizer = loaded.session.tokenizer.get();
  served->chat_template = loaded.chat_template ? &*loaded.chat_template : nullptr;
  if (Result<std::string> source = loaded.session.files.chat_template_source(); source.ok()) {
    served->tool_format = detect_tool_call_format(*source);
  }
  spdlog::info("tool calls: {} format", tool_call_format_name(served->tool_format));
  const Vocabulary& vocabulary = loaded.session.tokenizer->vocabulary();
  if (vocabulary.bos_id) served->bos_token = vocabulary.tokens[*vocabulary.bos_id];
  if (vocabulary.eos_id) served->eos_token = vocabulary.tokens[*vocabulary.eos_id];
  served->max_context = loaded.engine->max_context();
  served->context_overflow = *server::parse_context_overflow(options.context_overflow);
  Result<std::unique_ptr<ConstraintCompiler>> constraints = ConstraintCompiler::create(
      *loaded.session.tokenizer, Generator::end_of_generation_tokens(vocabulary),
      loaded.session.model->config().vocab_size,
      server::tool_marker_tokens(served->tool_format, vocabulary));
  if (constraints.ok()) {
    loaded.constraints = std::move(*constraints);
    served->constraints = loaded.constraints.get();
  } else {
    spdlog::warn("{}; response_format other than text will answer 400",
                 constraints.status().message());
  }
  served->grammar_compile_limit = std::chrono::milliseconds(
      static_cast<int64_t>(options.grammar_compile_timeout_seconds * 1000));
  http_server.set_model(std::move(served));

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineMetrics metrics = loaded.engine->metrics();
  spdlog::info("model loaded in {:.2f} s: context {} tokens, {} KV blocks", seconds,
               loaded.engine->max_context(), metrics.kv_blocks_total);
  if (metrics.kv_disk_enabled) {
    spdlog::info("KV disk tier {}: {} blocks, {:.1f} of {:.1f} MiB", engine_options.kv_disk_directory,
                 metrics.kv_disk.files, metrics.kv_disk.bytes / 1048576.0,
                 metrics.kv_disk_limit_bytes / 1048576.0);
  }
  const std::string url = fmt::format("http://{}:{}", options.serve.host, http_server.port());
  const std::string& id = options.serve.model_id;
  std::fprintf(stderr, "tachyon: serving %s on %s\n", id.c_str(), url.c_str());
  if (replica_index() != nullptr) return Status();  // the router's banner is the one to read
  // How to talk to it, ready to paste (stderr, like every other message).
  std::fprintf(stderr,
               "\n  curl %s/v1/chat/completions -H 'Content-Type: application/json' \\\n"
               "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": "
               "\"Hello!\"}]}'\n\n"
               "  python3 -c 'from openai import OpenAI  # pip install openai\n"
               "client = OpenAI(base_url=\"%s/v1\", api_key=\"none\")\n"
               "for chunk in client.chat.completions.create(model=\"%s\", stream=True,\n"
               "        messages=[{\"role\": \"user\", \"content\": \"Hello!\"}]):\n"
               "    print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True)'\n\n",
               url.c_str(), id.c_str(), url.c_str(), id.c_str());
  return Status();
}

Status run_serve(ServeCommandOptions& options) {
  const char* index = replica_index();
  spdlog::set_default_logger(
      spdlog::stderr_color_mt(index != nullptr ? fmt::format("replica-{}", index) : "tachyon"));
  if (!options.kv_cache_memory.empty()) {
    TACHYON_ASSIGN_OR_RETURN(MemoryAmount amount,
                             parse_memory_amount(options.kv_cache_memory));
    options.engine.kv_cache_bytes = amount.bytes;
    if (amount.fraction > 0) options.engine.kv_cache_fraction = amount.fraction;
  }
  if (!options.engine.kv_disk_directory.empty()) {
    Result<MemoryAmount> amount = parse_memory_amount(options.kv_disk_size);
    if (!amount.ok() || amount->bytes <= 0) {
      return invalid_argument(fmt::format("--kv-disk-size {} is not a size (e.g. 20GiB)",
                                          options.kv_disk_size));
    }
    options.engine.kv_disk_bytes = amount->bytes;
  }
  options.engine.snapkv_budget = options.model.snapkv_budget();
  if (!leads_job(options.model)) {  // an --tp/--pp rank that only computes its part
    TACHYON_ASSIGN_OR_RETURN(ModelSession session, open_session(options.model));
    return session.follow();
  }
  if (options.model.distributed() && options.replicas > 1) {
    return invalid_argument("--replicas starts servers of one process each; it does not go with "
                            "--tp or --pp");
  }
  TACHYON_RETURN_IF_ERROR(options.speculation.finish());
  options.engine.speculative = options.speculation.options;
  const std::string path =
      options.model.model_path.empty() ? default_model_path() : options.model.model_path;
  options.serve.model_id =
      options.model_alias.empty() ? server::model_id_from_path(path) : options.model_alias;

  server::ServeOptions& serve = options.serve;
  if (serve.auth_db && serve.db_path.empty()) serve.db_path = default_database_path();
  if (!serve.requires_auth() && !serve.insecure_no_auth && !server::is_loopback_host(serve.host)) {
    return invalid_argument(
        fmt::format("refusing to serve {} without API keys: use --auth db or --api-key KEY, or "
                    "--insecure-no-auth to serve anyone who can reach it",
                    serve.host));
  }
  if (options.replicas > 1) {
    router::RouterOptions router_options;
    router_options.listen = serve;
    TACHYON_ASSIGN_OR_RETURN(router_options.policy, router::parse_routing_policy(options.routing));
    // command_line() starts with "serve".
    const std::vector<std::string> args(command_line().begin() + 1, command_line().end());
    return run_replicated_serve(router_options, serve_args_for_replicas(args), options.replicas);
  }
  std::unique_ptr<gateway::Gateway> gateway;
  if (!options.redis_url.empty() && !serve.auth_db) {
    return invalid_argument("--redis shares the limits of database keys: it needs --auth db");
  }
  if (serve.requires_auth()) {
    if (serve.auth_db) {
      gateway::GatewayOptions gateway_options;
      if (!options.redis_url.empty()) {
        TACHYON_ASSIGN_OR_RETURN(
            gateway_options.shared_limits,
            gateway::RedisLimits::connect(options.redis_url, options.redis_fail_open));
        spdlog::info("API key limits shared in Redis at {} (fail {})", options.redis_url,
                     options.redis_fail_open ? "open" : "closed");
      }
      TACHYON_ASSIGN_OR_RETURN(gateway,
                               gateway::Gateway::open(serve.db_path, serve.api_keys, gateway_options));
    } else {
      gateway = std::make_unique<gateway::Gateway>(nullptr, serve.api_keys, nullptr);
    }
    spdlog::info(
        "API keys required ({}{})", serve.auth_db ? "database " + serve.db_path : "",
        serve.api_keys.empty()
            ? ""
            : fmt::format("{}{} static key(s)", serve.auth_db ? ", " : "", serve.api_keys.size()));
  }

  LoadedModel loaded;  // declared before the server so that it outlives it
  serve.end_requests_on_signal = options.model.distributed();
  server::HttpServer http_server(options.serve);
  if (gateway) http_server.set_gateway(std::move(gateway));
  TACHYON_RETURN_IF_ERROR(http_server.listen());
  spdlog::info("listening on {}:{}, loading {}", options.serve.host, http_server.port(), path);
  std::thread loader([&] {
    Status status = load_model(options, loaded, http_server);
    if (!status.ok()) http_server.shutdown(status);
  });
  Status status = http_server.run();
  loader.join();
  if (loaded.engine && loaded.session.world &&
      !loaded.engine->stop_within(std::chrono::seconds(2))) {
    // Its step waits for a rank that is gone (mpirun may already be ending the job).
    spdlog::error("a rank of the job stopped answering: ending the job");
    loaded.session.world->abort(1);
  }
  // The engine goes first: its unfinished requests' streams hold wake-up callbacks bound to
  // the server's strands, which must not outlive the server's io_context.
  loaded.engine.reset();
  if (status.ok()) spdlog::info("shut down");
  return status;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeCommandOptions>();
  CLI::App* command =
      app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_model_options(*command, options->model);
  server::ServeOptions& serve = options->serve;
  command->add_option("--model-alias", options->model_alias,
                      "Model id clients must send (default: the file name without .gguf)");
  command
      ->add_option("--context-overflow", options->context_overflow,
                   "When a chat outgrows the context: error (default, OpenAI's "
                   "context_length_exceeded), truncate (drop the oldest turns, keeping the "
                   "system messages and the last user turn) or sink (StreamingLLM: keep the "
                   "first 16 tokens and a recent window in the KV cache and generate on); a "
                   "request's \"context_overflow\" overrides it")
      ->check(CLI::IsMember({"error", "truncate", "sink"}));
  command
      ->add_option("--grammar-compile-timeout", options->grammar_compile_timeout_seconds,
                   "Seconds a request's response_format (JSON schema, regex, grammar) may take "
                   "to compile before it is refused with a 400")
      ->check(CLI::Range(0.001, 3600.0));
  command->add_option("--kv-cache-mem", options->kv_cache_memory,
                      "KV cache memory: a fraction of free RAM (0.25, the default) or a size "
                      "(2GiB, 512MiB, bytes)");
  add_kv_evict_options(*command, options->model);
  command->add_option("--kv-disk", options->engine.kv_disk_directory,
                      "Also keep prefix-cache blocks in this directory: read back on a prefix "
                      "hit after RAM evicted them, and across restarts (one server per "
                      "directory)");
  command->add_option("--kv-disk-size", options->kv_disk_size,
                      "Most bytes --kv-disk may hold; least recently used blocks go first "
                      "(default 8GiB)");
  command
      ->add_option("--max-batch-tokens", options->engine.max_batch_tokens,
                   "Most tokens computed in one engine step (default 256)")
      ->check(CLI::Range(1, 1 << 20));
  command
      ->add_option("--max-running", options->engine.max_running_requests,
                   "Most requests running at once (default 64)")
      ->check(CLI::Range(1, 1 << 16));
  command
      ->add_option("--max-waiting", options->engine.max_waiting_requests,
                   "Most requests waiting; more get 503 (default 1024)")
      ->check(CLI::Range(0, 1 << 24));
  add_listen_options(*command, serve);
  command
      ->add_option("--sse-ping-interval", serve.sse_ping_interval_seconds,
                   "Seconds between ': ping' comments on a quiet stream (default 5; 0 = off)")
      ->check(CLI::Range(0.0, 1e6));
  command
      ->add_option_function<std::string>(
          "--auth", [options](const std::string& mode) { options->serve.auth_db = mode == "db"; },
          "none (default) or db: require API keys from the key database (tachyon keys ...)")
      ->check(CLI::IsMember({"none", "db"}));
  command->add_option("--db", serve.db_path,
                      "Key and usage database: a SQLite file (default $TACHYON_HOME/tachyon.db) "
                      "or postgresql://user:password@host:port/db (shared by replicas)");
  command->add_option("--api-key", serve.api_keys,
                      "Require this API key (repeatable; no limits); combines with --auth db");
  command->add_flag("--insecure-no-auth", serve.insecure_no_auth,
                    "Allow serving a non-loopback address without API keys");
  command->add_flag("--public-metrics", serve.public_metrics,
                    "Serve /metrics without an API key when keys are required");
  command->add_option("--admin-key", serve.admin_key,
                      "The key of the admin routes (GET /admin/experts: expert selection counts "
                      "and cache); without it they are open only on a server without keys");
  command
      ->add_option("--replicas", options->replicas,
                    "Start this many servers (each loads the model) behind a router on "
                    "--host/--port: one endpoint, requests spread by --routing (default 1: no "
                    "router)")
      ->check(CLI::Range(1, 256));
  command
      ->add_option("--routing", options->routing,
                   "With --replicas: cache-aware (default), least-load or round-robin")
      ->check(CLI::IsMember({"cache-aware", "least-load", "round-robin"}));
  command->add_option("--redis", options->redis_url,
                      "Keep API keys' rate limits, concurrency and quotas in Redis "
                      "(redis://[:password@]host[:port][/db]) so that every server using it "
                      "grants one key's limits together (with --auth db)");
  command->add_flag("--redis-fail-open", options->redis_fail_open,
                    "While Redis is unreachable, admit requests under this server's own limits "
                    "instead of refusing them with 503 (the default: fail closed)");
  add_speculation_flags(*command, options->speculation, /*serving=*/true);
  command->callback([options] {
    Status status = run_serve(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli

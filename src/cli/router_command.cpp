// `tachyon router`: one OpenAI-compatible front door over several `tachyon serve` replicas
// (cache-aware routing, health checks, retries, SSE pass-through). See src/router/README.md.
#include "cli/router_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/listen_options.h"
#include "router/local_replicas.h"
#include "router/replica_set.h"
#include "router/router_api.h"
#include "server/http_server.h"

namespace tachyon::cli {
namespace {

std::string self_executable() {
  std::string path(4096, '\0');
  const ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0) return "tachyon";
  path.resize(static_cast<size_t>(length));
  return path;
}

Status serve_router(const router::RouterOptions& options, router::LocalReplicas* local) {
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<router::ReplicaSet> replicas,
                           router::ReplicaSet::create(options));
  server::HttpServer http_server(options.listen, [&](server::ServerContext& context) {
    return std::make_unique<router::RouterApi>(context, options, std::move(replicas));
  });
  TACHYON_RETURN_IF_ERROR(http_server.listen());
  std::fprintf(stderr, "tachyon: routing http://%s:%d to %zu replica(s) (%s)\n",
               options.listen.host.c_str(), http_server.port(), options.replica_urls.size(),
               router::routing_policy_name(options.policy));
  Status status = http_server.run();
  if (local != nullptr) {
    local->stop(std::chrono::milliseconds(
        static_cast<int64_t>(options.listen.shutdown_timeout_seconds * 1000) + 5000));
  }
  if (status.ok()) spdlog::info("router shut down");
  return status;
}

}  // namespace

Status run_router(const router::RouterOptions& options) { return serve_router(options, nullptr); }

std::vector<std::string> serve_args_for_replicas(const std::vector<std::string>& args) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    bool dropped = false;
    for (const char* flag : {"--replicas", "--host", "--port", "--routing"}) {
      if (arg == flag) {
        ++i;  // and its value
        dropped = true;
      } else if (arg.starts_with(std::string(flag) + "=")) {
        dropped = true;
      }
    }
    if (!dropped) kept.push_back(arg);
  }
  return kept;
}

Status run_replicated_serve(router::RouterOptions options, std::vector<std::string> serve_args,
                            int count) {
  const bool has_threads = std::any_of(serve_args.begin(), serve_args.end(), [](const auto& a) {
    return a == "-t" || a == "--threads" || a.starts_with("--threads=") ||
           (a.starts_with("-t") && a.size() > 2);
  });
  if (!has_threads) {
    // The cores shared out: N replicas each spinning on every core would fight.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    serve_args.push_back("-t");
    serve_args.push_back(std::to_string(std::max(1u, cores / static_cast<unsigned>(count))));
  }
  serve_args.insert(serve_args.begin(), "serve");
  TACHYON_ASSIGN_OR_RETURN(std::unique_ptr<router::LocalReplicas> local,
                           router::LocalReplicas::start(self_executable(), serve_args, count));
  options.replica_urls = local->urls();
  return serve_router(options, local.get());
}

void add_router_command(CLI::App& app) {
  auto options = std::make_shared<router::RouterOptions>();
  auto routing = std::make_shared<std::string>("cache-aware");
  CLI::App* command = app.add_subcommand(
      "router", "Serve several `tachyon serve` replicas as one OpenAI-compatible endpoint");
  command->add_option("--replica", options->replica_urls,
                      "A replica's URL, http://host:port (repeat for each)")
      ->required();
  command
      ->add_option("--routing", *routing,
                   "cache-aware (default: a conversation goes back to the replica holding its "
                   "prefix unless that one is much busier), least-load or round-robin")
      ->check(CLI::IsMember({"cache-aware", "least-load", "round-robin"}));
  command
      ->add_option("--health-interval", options->health_interval_seconds,
                   "Seconds between health checks of each replica (default 1)")
      ->check(CLI::Range(0.01, 3600.0));
  command
      ->add_option("--connect-timeout", options->connect_timeout_seconds,
                   "Seconds to connect to a replica or get its health answer (default 2)")
      ->check(CLI::Range(0.01, 600.0));
  command
      ->add_option("--balance-factor", options->balance_factor,
                   "Cache-aware: keep a prefix's replica while its outstanding tokens are at "
                   "most this times the least loaded replica's plus --balance-slack (default 2)")
      ->check(CLI::Range(1.0, 1e6));
  command
      ->add_option("--balance-slack", options->balance_slack_tokens,
                   "Cache-aware: see --balance-factor (tokens, default 4096)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  command->add_option("--admin-key", options->listen.admin_key,
                      "Key that GET /metrics needs (Authorization: Bearer KEY); without it "
                      "/metrics is open");
  add_listen_options(*command, options->listen);
  command->callback([options, routing] {
    spdlog::set_default_logger(spdlog::stderr_color_mt("router"));
    Result<router::RoutingPolicy> policy = router::parse_routing_policy(*routing);
    if (!policy.ok()) return fail(policy.status().message());
    options->policy = *policy;
    Status status = run_router(*options);
    if (!status.ok()) fail(status.message());
  });
}

}  // namespace tachyon::cli

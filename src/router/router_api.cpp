#include "router/router_api.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "router/replica_client.h"
#include "server/api_error.h"
#include "server/url_path.h"
#include "server/bearer_key.h"

namespace tachyon::router {
namespace {

namespace json = boost::json;
using server::ApiError;
using Clock = std::chrono::steady_clock;

Clock::duration seconds(double value) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
}

// The model objects a replica's /health lists, or nothing when the body is not a health answer.
std::optional<std::vector<json::object>> health_models(std::string_view body) {
  boost::system::error_code error;
  json::value parsed = json::parse(body, error);
  if (error || !parsed.is_object()) return std::nullopt;
  const json::value* models = parsed.get_object().if_contains("models");
  if (models == nullptr || !models->is_array()) return std::nullopt;
  std::vector<json::object> out;
  for (const json::value& model : models->get_array()) {
    if (model.is_object() && model.get_object().contains("id")) out.push_back(model.get_object());
  }
  return out;
}

}  // namespace

RouterApi::RouterApi(server::ServerContext& context, RouterOptions options,
                     std::unique_ptr<ReplicaSet> replicas)
    : context_(context), options_(std::move(options)), replicas_(std::move(replicas)) {}

void RouterApi::start(asio::io_context& io_context) {
  for (const auto& replica : replicas_->replicas()) {
    asio::co_spawn(asio::make_strand(io_context), watch_replica(*replica), asio::detached);
  }
}

asio::awaitable<void> RouterApi::watch_replica(Replica& replica) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stopping_.load()) {
    co_await check_replica(replica);
    timer.expires_after(seconds(options_.health_interval_seconds));
    auto [error] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)error;
  }
}

asio::awaitable<void> RouterApi::check_replica(Replica& replica) {
  std::string failure;
  std::optional<http::response<http::string_body>> answer = co_await fetch_from_replica(
      replica, "/health", seconds(options_.connect_timeout_seconds), failure);
  std::optional<std::vector<json::object>> models;
  if (answer && answer->result() == http::status::ok) {
    models = health_models(answer->body());
    if (!models) failure = "its /health does not list models (is it a tachyon serve?)";
  } else if (answer) {
    failure = fmt::format("/health answered {}", answer->result_int());
  }
  if (models) {
    replica.set_models(std::move(*models));
    if (replica.set_up(true)) spdlog::info("replica {} is up", replica.url());
  } else if (replica.set_up(false)) {
    spdlog::warn("replica {} is down: {}", replica.url(), failure);
  }
}

asio::awaitable<bool> RouterApi::serve(server::Connection& connection, server::HttpRequest request) {
  connection.begin_request(request, context_.draining());
  context_.metrics().count_http_request();
  const std::string_view target = request.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = request.method() == http::verb::get;
  if (get && (path == "/health" || path == "/v1/health")) {
    if (context_.draining()) {
      co_return co_await connection.send_error(
          ApiError::unavailable("The router is shutting down", "shutting_down", 1));
    }
    const size_t up = replicas_->num_up();
    if (up == 0) {
      co_return co_await connection.send_error(ApiError::unavailable(
          "No replica is up", "no_replica_available", 1));
    }
    json::object body{{"status", "ok"},
                      {"replicas_up", up},
                      {"replicas", replicas_->replicas().size()},
                      {"models", replicas_->models()}};
    co_return co_await connection.send_json(http::status::ok, body);
  }
  if (get && path == "/metrics") {
    const std::string& admin_key = context_.options().admin_key;
    if (!admin_key.empty()) {
      if (!server::has_bearer_key(request, admin_key)) {
        co_return co_await connection.send_error(
            ApiError::invalid_api_key("The router's /metrics needs its admin key"));
      }
    }
    server::HttpResponse response{http::status::ok, 11};
    response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = metrics_.render(*replicas_);
    co_return co_await connection.send(std::move(response));
  }
  if (context_.draining()) {
    co_return co_await connection.send_error(
        ApiError::unavailable("The router is shutting down", "shutting_down", 1));
  }
  std::string route_model;
  constexpr std::string_view kModelPrefix = "/v1/models/";
  if (get && path.starts_with(kModelPrefix)) {
    route_model = server::percent_decode(path.substr(kModelPrefix.size()));
  }
  const bool union_models = get && path == "/v1/models";
  co_return co_await proxy(connection, std::move(request), std::move(route_model), union_models);
}

asio::awaitable<bool> RouterApi::proxy(server::Connection& connection, server::HttpRequest request,
                                       std::string route_model, bool union_models) {
  auto proxied = std::make_shared<ProxiedRequest>(options_, *replicas_, metrics_, connection,
                                                  std::move(request), std::move(route_model),
                                                  union_models);
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    in_flight_[id] = proxied;
  }
  bool reusable = false;
  try {
    reusable = co_await proxied->run();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.erase(id);
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_.erase(id);
  co_return reusable;
}

size_t RouterApi::num_in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_.size();
}

void RouterApi::cancel_in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, weak] : in_flight_) {
    if (std::shared_ptr<ProxiedRequest> request = weak.lock()) request->cancel();
  }
}

}  // namespace tachyon::router

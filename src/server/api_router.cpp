#include "server/api_router.h"

#include <algorithm>
#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "gateway/key_secret.h"
#include "runtime/engine.h"
#include "server/bearer_key.h"
#include "server/url_path.h"
#include "server/engine_request_builder.h"
#include "server/expert_report.h"
#include "server/generation_session.h"
#include "server/tool_calling.h"
#include "server/openai_response.h"
#include "structured/json_schema_check.h"
#include "tokenizer/streaming_detokenizer.h"

namespace tachyon::server {
namespace {

namespace json = boost::json;

// A task of the engine thread's (Engine::run_between_steps) is done, or `deadline` passed:
// polled, so that the I/O thread never blocks.
template <typename T>
asio::awaitable<void> wait_until_ready(
    std::future<T>& result,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (result.wait_for(std::chrono::seconds(0)) != std::future_status::ready &&
         std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

// The engine dropped a task it had not run (it stopped).
ApiError engine_stopped() {
  return ApiError::unavailable("The server is shutting down", "shutting_down", 1);
}

// Seconds a client should wait before asking again while the model loads.
constexpr int kLoadingRetryAfterSeconds = 2;

// How long a /metrics scrape waits for the engine to gather the stages' expert counts (--pp).
constexpr std::chrono::milliseconds kExpertMetricsWait{2000};

// Valid UTF-8 as a string, anything else as its byte values (llama.cpp's /tokenize does this).
json::value piece_json(const std::string& bytes) {
  std::string copy = bytes, text;
  take_complete_utf8(copy, text, /*final=*/true);
  if (text == bytes) return json::string(text);
  json::array values;
  for (unsigned char c : bytes) values.push_back(c);
  return values;
}

enum class Route {
  kNone,
  kHealth,
  kMetrics,
  kModels,
  kModel,
  kChatCompletions,
  kCompletions,
  kTokenize,
  kDetokenize,
  kAdminExperts,
  kAdminRebalanceExperts,
};

struct RouteMatch {
  Route route = Route::kNone;
  http::verb method = http::verb::get;
  std::string model_id;  // kModel
};

RouteMatch match_route(std::string_view path) {
  if (path == "/health" || path == "/v1/health") return {Route::kHealth, http::verb::get, {}};
  if (path == "/metrics") return {Route::kMetrics, http::verb::get, {}};
  if (path == "/v1/models") return {Route::kModels, http::verb::get, {}};
  constexpr std::string_view kModelPrefix = "/v1/models/";
  if (path.starts_with(kModelPrefix) && path.size() > kModelPrefix.size()) {
    return {Route::kModel, http::verb::get, percent_decode(path.substr(kModelPrefix.size()))};
  }
  if (path == "/v1/chat/completions") return {Route::kChatCompletions, http::verb::post, {}};
  if (path == "/v1/completions") return {Route::kCompletions, http::verb::post, {}};
  if (path == "/tokenize") return {Route::kTokenize, http::verb::post, {}};
  if (path == "/detokenize") return {Route::kDetokenize, http::verb::post, {}};
  if (path == "/admin/experts") return {Route::kAdminExperts, http::verb::get, {}};
  if (path == "/admin/experts/rebalance") {
    return {Route::kAdminRebalanceExperts, http::verb::post, {}};
  }
  return {};
}

}  // namespace

asio::awaitable<bool> ApiRouter::serve(Connection& connection, HttpRequest request) {
  connection.begin_request(request, context_.draining());
  context_.metrics().count_http_request();
  std::string_view target = request.target();
  std::string_view path = target.substr(0, target.find('?'));
  const std::string method(request.method_string());
  RouteMatch match = match_route(path);
  if (match.route == Route::kNone) {
    co_return co_await connection.send_error(ApiError::route_not_found(method, std::string(path)));
  }
  if (request.method() != match.method) {
    ApiError error = ApiError::method_not_allowed(method, std::string(path));
    error.headers.emplace_back("Allow", std::string(http::to_string(match.method)));
    co_return co_await connection.send_error(error);
  }
  // Every route but /health (and /metrics when public) needs a valid key when auth is on; the
  // admin routes need the admin key instead.
  std::optional<gateway::Tenant> tenant;
  const bool admin_route =
      match.route == Route::kAdminExperts || match.route == Route::kAdminRebalanceExperts;
  if (admin_route) {
    if (std::optional<ApiError> denied = authorize_admin(request)) {
      co_return co_await connection.send_error(*denied);
    }
  }
  const bool open_route = match.route == Route::kHealth || admin_route ||
                          (match.route == Route::kMetrics && context_.options().public_metrics);
  if (context_.gateway() != nullptr && !open_route) {
    std::optional<ApiError> auth_error = authenticate(request, connection, tenant);
    if (auth_error) co_return co_await connection.send_error(*auth_error);
  }
  switch (match.route) {
    case Route::kHealth:
      co_return co_await send(connection, health());
    case Route::kMetrics:
      co_return co_await metrics_route(connection);
    case Route::kModels:
      co_return co_await send(connection, list_models());
    case Route::kModel:
      co_return co_await send(connection, get_model(match.model_id));
    case Route::kTokenize:
      co_return co_await send(connection, tokenize(request));
    case Route::kDetokenize:
      co_return co_await send(connection, detokenize(request));
    case Route::kAdminExperts:
      co_return co_await admin_experts(connection);
    case Route::kAdminRebalanceExperts:
      co_return co_await rebalance_experts(connection, request);
    case Route::kChatCompletions:
      co_return co_await complete(connection, request, Endpoint::kChatCompletions, tenant);
    case Route::kCompletions:
      co_return co_await complete(connection, request, Endpoint::kCompletions, tenant);
    case Route::kNone:
      break;
  }
  co_return co_await connection.send_error(ApiError::internal("unrouted request"));
}

void ApiRouter::cancel_in_flight() {
  if (std::shared_ptr<const ServedModel> model = context_.model(); model && model->engine) {
    for (RequestId id : context_.requests()) model->engine->cancel(id);
  }
}

void ApiRouter::abandon_in_flight(const Status& reason) {
  if (std::shared_ptr<const ServedModel> model = context_.model(); model && model->engine) {
    model->engine->abandon(reason);
  }
}

std::optional<ApiError> ApiRouter::authenticate(const HttpRequest& request, Connection& connection,
                                                std::optional<gateway::Tenant>& tenant) {
  gateway::Gateway& gateway = *context_.gateway();
  std::string_view authorization;
  auto header = request.find(http::field::authorization);
  if (header != request.end()) {
    authorization = std::string_view(header->value().data(), header->value().size());
  }
  Result<gateway::Tenant> authenticated = gateway.authenticate(authorization);
  if (!authenticated.ok()) {
    const StatusCode code = authenticated.status().code();
    if (code == StatusCode::kNotFound || code == StatusCode::kInvalidArgument) {
      return ApiError::invalid_api_key(authenticated.status().message());
    }
    if (code == StatusCode::kUnavailable) {
      return ApiError::unavailable("The key database is unreachable; try again shortly",
                                   "key_store_unavailable", 1);
    }
    return ApiError::internal(authenticated.status().message());
  }
  tenant = std::move(*authenticated);
  connection.set_extra_headers(gateway.rate_limit_headers(*tenant));
  return std::nullopt;
}

std::shared_ptr<const ServedModel> ApiRouter::loaded_model(std::optional<ApiError>& error) const {
  std::shared_ptr<const ServedModel> model = context_.model();
  if (model == nullptr) {
    error = ApiError::unavailable("Loading model", "model_loading", kLoadingRetryAfterSeconds);
  }
  return model;
}

asio::awaitable<bool> ApiRouter::send(Connection& connection, Reply reply) {
  if (reply.error) co_return co_await connection.send_error(*reply.error);
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, reply.content_type);
  response.body() = reply.json.is_null() ? std::move(reply.text) : json::serialize(reply.json);
  co_return co_await connection.send(std::move(response));
}

ApiRouter::Reply ApiRouter::health() const {
  Reply reply;
  loaded_model(reply.error);
  if (!reply.error && context_.draining()) {
    reply.error = ApiError::unavailable("The server is shutting down", "shutting_down", 1);
  }
  // The model served, as /v1/models lists it: a router in front learns it from here (/health
  // needs no key).
  reply.json = json::object{{"status", "ok"}, {"models", json::array{model_json()}}};
  return reply;
}

asio::awaitable<bool> ApiRouter::metrics_route(Connection& connection) {
  std::shared_ptr<const ServedModel> model = context_.model();
  const bool staged = model != nullptr && model->model != nullptr && model->engine != nullptr &&
                      model->model->shard().pp_size > 1 &&
                      model->model->config().moe.num_experts > 0;
  if (!staged) co_return co_await send(connection, metrics(nullptr));
  auto promise = std::make_shared<std::promise<void>>();
  std::future<void> gathered = promise->get_future();
  model->engine->run_between_steps([promise, latest = latest_experts_](DecoderModel& running) {
    auto report = std::make_shared<const ExpertLoadReport>(running.expert_load_report());
    {
      std::lock_guard<std::mutex> lock(latest->mutex);
      latest->report = std::move(report);
    }
    promise->set_value();
  });
  co_await wait_until_ready(gathered, std::chrono::steady_clock::now() + kExpertMetricsWait);
  std::shared_ptr<const ExpertLoadReport> report;
  {
    std::lock_guard<std::mutex> lock(latest_experts_->mutex);
    report = latest_experts_->report;
  }
  // Nothing gathered yet (the engine busy in a long step since start): no expert series rather
  // than the leader's stage alone, which would read as the whole model's.
  ExpertLoadReport none;
  co_return co_await send(connection, metrics(report != nullptr ? report.get() : &none));
}

ApiRouter::Reply ApiRouter::metrics(const ExpertLoadReport* experts) const {
  std::shared_ptr<const ServedModel> model = context_.model();
  std::string text;
  if (model != nullptr && model->engine != nullptr) {
    const EngineMetrics engine_metrics = model->engine->metrics();
    text = context_.metrics().render(&engine_metrics, context_.options().model_id);
  } else {
    text = context_.metrics().render(nullptr, context_.options().model_id);
  }
  if (model != nullptr && model->model != nullptr) {
    const std::string labels = prometheus_model_labels(context_.options().model_id);
    if (experts != nullptr) {
      text += render_expert_metrics(*model->model, *experts, labels);
    } else {
      text += render_expert_metrics(*model->model, model->model->expert_load_report(), labels);
    }
  }
  if (context_.gateway() != nullptr) text += render_gateway_metrics(context_.gateway()->metrics());
  Reply reply;
  reply.text = std::move(text);
  reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return reply;
}

std::optional<ApiError> ApiRouter::authorize_admin(const HttpRequest& request) const {
  const ServeOptions& options = context_.options();
  if (options.admin_key.empty()) {
    if (!options.requires_auth()) return std::nullopt;  // a server open to everyone
    ApiError error;
    error.status = 403;
    error.type = "permission_error";
    error.code = "admin_key_required";
    error.message = "The admin routes need the admin key; start the server with --admin-key";
    return error;
  }
  if (!has_bearer_key(request, options.admin_key)) {
    return ApiError::invalid_api_key("The admin routes need the admin key (Authorization: Bearer "
                                     "ADMIN_KEY, as given to --admin-key)");
  }
  return std::nullopt;
}

asio::awaitable<bool> ApiRouter::admin_experts(Connection& connection) {
  Reply reply;
  std::shared_ptr<const ServedModel> model = loaded_model(reply.error);
  if (!reply.error && model->model == nullptr) {
    reply = failed(ApiError::internal("the model is not available"));
  }
  if (reply.error) co_return co_await send(connection, std::move(reply));
  if (model->model->shard().pp_size == 1 || model->engine == nullptr) {
    co_return co_await send(connection, experts_reply(*model->model,
                                                      model->model->expert_load_report()));
  }
  // Pipeline stages: the other stages' counts come over MPI, between two engine steps.
  auto promise = std::make_shared<std::promise<ExpertLoadReport>>();
  std::future<ExpertLoadReport> result = promise->get_future();
  model->engine->run_between_steps([promise](DecoderModel& running) {
    promise->set_value(running.expert_load_report());
  });
  co_await wait_until_ready(result);
  co_return co_await send(connection, experts_reply(*model->model, result));
}

ApiRouter::Reply ApiRouter::experts_reply(const DecoderModel& model,
                                          const ExpertLoadReport& load) {
  Reply reply;
  reply.json = expert_report_json(model, load);
  return reply;
}

ApiRouter::Reply ApiRouter::experts_reply(const DecoderModel& model,
                                          std::future<ExpertLoadReport>& result) {
  try {
    return experts_reply(model, result.get());
  } catch (const std::future_error&) {
    return failed(engine_stopped());
  }
}

ApiRouter::Reply ApiRouter::rebalance_request(const HttpRequest& request, int& spare) const {
  Reply reply;
  std::shared_ptr<const ServedModel> model = loaded_model(reply.error);
  if (reply.error) return reply;
  if (model->model == nullptr || model->engine == nullptr) {
    return failed(ApiError::internal("the model is not available"));
  }
  spare = model->model->expert_spare();
  if (request.body().find_first_not_of(" \t\r\n") == std::string::npos) return reply;  // defaults
  json::value body;
  reply.error = parse_json_body(request.body(), body);
  if (reply.error) return reply;
  for (const auto& [key, value] : body.get_object()) {
    if (key != "replicas") {
      return failed(ApiError::invalid_request(
          fmt::format("unknown field '{}' (this route takes 'replicas')", std::string(key)),
          std::string(key), "unknown_parameter"));
    }
    if (!value.is_int64() || value.get_int64() < 0 ||
        value.get_int64() > model->model->config().moe.num_experts) {
      return failed(ApiError::invalid_request(
          fmt::format("'replicas' (spare expert slots per rank and layer) must be an integer "
                      "0-{}",
                      model->model->config().moe.num_experts),
          "replicas", "invalid_value"));
    }
    spare = static_cast<int>(value.get_int64());
  }
  return reply;
}

ApiRouter::Reply ApiRouter::rebalance_reply(std::future<Result<ExpertRebalance>>& result) {
  try {
    const Result<ExpertRebalance> done = result.get();
    if (!done.ok()) return failed(ApiError::from_status(done.status()));
    Reply reply;
    reply.json = expert_rebalance_json(*done);
    return reply;
  } catch (const std::future_error&) {
    return failed(engine_stopped());
  }
}

asio::awaitable<bool> ApiRouter::rebalance_experts(Connection& connection,
                                                   const HttpRequest& request) {
  int spare = 0;
  Reply reply = rebalance_request(request, spare);
  if (reply.error) co_return co_await send(connection, std::move(reply));
  auto promise = std::make_shared<std::promise<Result<ExpertRebalance>>>();
  std::future<Result<ExpertRebalance>> result = promise->get_future();
  context_.model()->engine->run_between_steps([promise, spare](DecoderModel& model) {
    promise->set_value(model.rebalance_experts(spare));
  });
  co_await wait_until_ready(result);
  co_return co_await send(connection, rebalance_reply(result));
}

json::object ApiRouter::model_json() const {
  std::shared_ptr<const ServedModel> model = context_.model();
  json::object entry{
      {"id", context_.options().model_id},
      {"object", "model"},
      {"created", model ? model->created : 0},
      {"owned_by", "tachyon"},
  };
  // The context in tokens, under vLLM's name (clients check lengths with it).
  if (model) entry["max_model_len"] = model->max_context;
  return entry;
}

ApiRouter::Reply ApiRouter::list_models() const {
  Reply reply;
  reply.json = json::object{{"object", "list"}, {"data", json::array{model_json()}}};
  return reply;
}

ApiRouter::Reply ApiRouter::get_model(const std::string& id) const {
  Reply reply;
  if (id != context_.options().model_id) {
    reply.error = ApiError::model_not_found(id);
    reply.error->param = std::nullopt;
  } else {
    reply.json = model_json();
  }
  return reply;
}

ApiRouter::Reply ApiRouter::tokenize(const HttpRequest& request) const {
  Reply reply;
  std::shared_ptr<const ServedModel> model = loaded_model(reply.error);
  json::value body;
  if (!reply.error) reply.error = parse_json_body(request.body(), body);
  if (reply.error) return reply;
  const json::object& fields = body.get_object();
  const json::value* content = fields.if_contains("content");
  if (content == nullptr || content->is_null()) content = fields.if_contains("prompt");
  if (content == nullptr || !content->is_string()) {
    return failed(ApiError::invalid_request("'content' is required and must be a string", "content",
                                            "invalid_value"));
  }
  EncodeOptions options{.parse_special = true, .add_special = false};
  bool with_pieces = false;
  for (auto [key, target] : {std::pair<const char*, bool*>{"add_special", &options.add_special},
                             {"parse_special", &options.parse_special},
                             {"with_pieces", &with_pieces}}) {
    const json::value* value = fields.if_contains(key);
    if (value == nullptr || value->is_null()) continue;
    if (!value->is_bool()) {
      return failed(ApiError::wrong_type(key, "a boolean", *value));
    }
    *target = value->get_bool();
  }
  const std::vector<TokenId> ids = model->tokenizer->encode(content->get_string(), options);
  json::array tokens;
  for (TokenId id : ids) {
    if (with_pieces) {
      tokens.push_back(
          json::object{{"id", id}, {"piece", piece_json(model->tokenizer->token_bytes(id))}});
    } else {
      tokens.push_back(id);
    }
  }
  reply.json = json::object{{"tokens", std::move(tokens)}};
  return reply;
}

ApiRouter::Reply ApiRouter::detokenize(const HttpRequest& request) const {
  Reply reply;
  std::shared_ptr<const ServedModel> model = loaded_model(reply.error);
  json::value body;
  if (!reply.error) reply.error = parse_json_body(request.body(), body);
  if (reply.error) return reply;
  const json::value* tokens = body.get_object().if_contains("tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    return failed(ApiError::invalid_request(
        "'tokens' is required and must be an array of token ids", "tokens", "invalid_value"));
  }
  std::vector<TokenId> ids;
  for (const json::value& token : tokens->get_array()) {
    const bool is_id = token.is_int64() && token.get_int64() >= 0 &&
                       token.get_int64() < model->tokenizer->vocabulary_size();
    if (!is_id) {
      return failed(ApiError::invalid_request(
          fmt::format("'tokens' must hold token ids in [0, {}), got {}",
                      model->tokenizer->vocabulary_size(), json::serialize(token)),
          "tokens", "invalid_value"));
    }
    ids.push_back(static_cast<TokenId>(token.get_int64()));
  }
  Result<std::string> bytes = model->tokenizer->decode(ids);
  if (!bytes.ok()) return failed(ApiError::from_status(bytes.status(), "tokens"));
  std::string text;
  take_complete_utf8(*bytes, text, /*final=*/true);  // JSON needs valid UTF-8
  reply.json = json::object{{"content", std::move(text)}};
  return reply;
}

asio::awaitable<bool> ApiRouter::complete(Connection& connection, const HttpRequest& request,
                                          Endpoint endpoint,
                                          const std::optional<gateway::Tenant>& tenant) {
  std::optional<ApiError> error;
  json::value body;
  OpenAiRequest parsed;
  error = parse_json_body(request.body(), body);
  if (!error) error = parse_openai_request(endpoint, body, parsed);
  if (!error && parsed.model != context_.options().model_id) {
    error = ApiError::model_not_found(parsed.model);
  }
  std::shared_ptr<const ServedModel> model;
  if (!error) model = loaded_model(error);
  if (!error && context_.draining()) {
    error = ApiError::unavailable("The server is shutting down", "shutting_down", 1);
  }
  EngineRequest engine_request;
  PromptTruncation truncation;
  if (!error) error = build_engine_request(parsed, *model, engine_request, &truncation);
  std::shared_ptr<const CompiledConstraint> grammar;
  std::optional<ConstraintSpec> constraint = parsed.constraint;
  const char* constraint_param = "response_format";
  if (!error && parsed.tools && constraint && constraint->kind == ConstraintSpec::Kind::kJsonSchema) {
    // Checked here for its param; the tools grammar embeds it.
    if (Status status = check_json_schema(json::parse(constraint->source)); !status.ok()) {
      error = ApiError::from_status(status, "response_format");
    }
  }
  if (!error && parsed.tools) {
    Result<std::optional<ConstraintSpec>> tool_grammar =
        tool_call_constraint(model->tool_format, *parsed.tools, &model->tokenizer->vocabulary(),
                             constraint ? &*constraint : nullptr);
    if (!tool_grammar.ok()) {
      error = ApiError::from_status(tool_grammar.status(), "tool_choice");
    } else {
      constraint = std::move(*tool_grammar);
      constraint_param = "tools";
    }
  }
  if (!error && constraint) {
    const auto compile_start = std::chrono::steady_clock::now();
    error = co_await compile_constraint(*model, *constraint, constraint_param, grammar);
    if (!error) {
      context_.metrics().observe_grammar_wait(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count());
      engine_request.constraint = model->constraints->start(grammar);
    } else {
      context_.metrics().count_grammar_refused();
    }
  }
  std::optional<gateway::Admission> admission;
  if (!error && tenant) error = admit(*tenant, parsed, engine_request, admission, connection);
  if (error) co_return co_await connection.send_error(*error);
  GenerationSession session(context_, connection, model, parsed, std::move(admission),
                            truncation);
  co_return co_await session.run(std::move(engine_request), std::move(grammar));
}

asio::awaitable<std::optional<ApiError>> ApiRouter::compile_constraint(
    const ServedModel& model, const ConstraintSpec& spec, const std::string& param,
    std::shared_ptr<const CompiledConstraint>& out) {
  if (model.constraints == nullptr) {
    co_return ApiError::invalid_request("this model cannot constrain its output", param,
                                        "unsupported_value");
  }
  Result<ConstraintCompiler::Compilation> compilation = model.constraints->begin(spec);
  if (!compilation.ok()) co_return ApiError::from_status(compilation.status(), param);
  const auto deadline = std::chrono::steady_clock::now() + model.grammar_compile_limit;
  // Most compilations take a few milliseconds: short pauses first, then up to 5 ms.
  std::chrono::microseconds pause(100);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!compilation->done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      compilation->abandon();
      co_return ApiError::invalid_request(
          fmt::format("{}: the {} took longer than {} ms to compile (the server's "
                      "--grammar-compile-timeout); simplify it",
                      param, constraint_kind_name(spec.kind), model.grammar_compile_limit.count()),
          param, "grammar_compile_timeout");
    }
    timer.expires_after(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  Result<std::shared_ptr<const CompiledConstraint>> grammar = compilation->result();
  if (!grammar.ok()) {
    co_return ApiError::from_status(
        Status(grammar.status().code(), param + ": " + grammar.status().message()), param);
  }
  out = *grammar;
  co_return std::nullopt;
}

std::optional<ApiError> ApiRouter::admit(const gateway::Tenant& tenant, const OpenAiRequest& parsed,
                                         EngineRequest& engine_request,
                                         std::optional<gateway::Admission>& admission,
                                         Connection& connection) {
  gateway::Gateway& gateway = *context_.gateway();
  // Charged at admission: the prompt plus the completion cap the request runs with (the
  // client's max_tokens, or completions' default of 16); chat without one is charged its prompt
  // and settled with the real count at the end.
  std::optional<int64_t> max_tokens;
  if (parsed.sampling.max_tokens || parsed.endpoint == Endpoint::kCompletions) {
    max_tokens = engine_request.sampling.max_tokens;
    if (max_tokens) *max_tokens *= parsed.n;  // every choice may use them all
  }
  gateway::AdmitResult result =
      gateway.admit(tenant, parsed.model, static_cast<int64_t>(engine_request.prompt.size()),
                    max_tokens, connection.unique_request_id());
  connection.set_extra_headers(gateway.rate_limit_headers(tenant));
  if (const auto* rejection = std::get_if<gateway::Rejection>(&result)) {
    return ApiError::from_rejection(*rejection);
  }
  admission.emplace(std::move(std::get<gateway::Admission>(result)));
  if (admission->max_tokens()) {
    const int32_t cap = static_cast<int32_t>(*admission->max_tokens());
    engine_request.sampling.max_tokens =
        std::min(cap, engine_request.sampling.max_tokens.value_or(cap));
  }
  // The key's tier sets how urgent its requests are; a request may ask to be less urgent.
  const Priority tier_priority = tenant.policy.tier == gateway::Tier::kPriority ? Priority::kHigh
                                 : tenant.policy.tier == gateway::Tier::kFree   ? Priority::kLow
                                                                                : Priority::kNormal;
  engine_request.priority = std::max(engine_request.priority, tier_priority);
  // Keys share their tier by weighted fair queuing (equal weights); static keys share one
  // bucket of ids below the database's.
  engine_request.tenant = static_cast<uint64_t>(tenant.key_id) + (uint64_t{1} << 32);
  engine_request.tenant_weight = 1.0;
  return std::nullopt;
}

}  // namespace tachyon::server

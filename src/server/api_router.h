// ApiRouter: answers one HTTP request: picks the route, checks the method, and runs the
// handler. Small routes (/health, /v1/models, /tokenize, /detokenize, /metrics) are answered
// here; completions go through build_engine_request and a GenerationSession.
//
// Routes that need the model answer 503 with Retry-After while it loads; /health says 503 too
// until the engine exists; /v1/models and /metrics answer at once.
#pragma once

#include <future>
#include <memory>
#include <mutex>

#include <boost/asio/awaitable.hpp>

#include "gateway/gateway.h"
#include "server/connection.h"
#include "server/openai_request.h"
#include "server/request_handler.h"
#include "server/server_context.h"

namespace tachyon {
class DecoderModel;
struct ExpertLoadReport;
struct ExpertRebalance;
}

namespace tachyon::server {

class ApiRouter : public RequestHandler {
 public:
  explicit ApiRouter(ServerContext& context) : context_(context) {}

  // Returns whether the connection may serve another request.
  asio::awaitable<bool> serve(Connection& connection, HttpRequest request) override;
  size_t num_in_flight() const override { return context_.num_requests(); }
  // Cancels the engine requests still running.
  void cancel_in_flight() override;
  void abandon_in_flight(const Status& reason) override;

 private:
  // What a small route answers: an error, a JSON body, or plain text.
  struct Reply {
    std::optional<ApiError> error;
    boost::json::value json;
    std::string text;  // used when `json` is null
    const char* content_type = "application/json";
  };
  static Reply failed(ApiError error) {
    Reply reply;
    reply.error = std::move(error);
    return reply;
  }

  // Plain functions, not coroutines: GCC 12 miscompiles brace-init lists inside coroutines.
  Reply health() const;
  // GET /metrics. Under --pp the expert series need every stage's counts: they are gathered on
  // the engine thread between two steps, waited for at most kExpertMetricsWait (a stuck engine
  // never holds a scrape), else the last gathered ones are shown.
  asio::awaitable<bool> metrics_route(Connection& connection);
  Reply metrics(const ExpertLoadReport* experts) const;
  Reply list_models() const;
  Reply get_model(const std::string& id) const;
  Reply tokenize(const HttpRequest& request) const;
  Reply detokenize(const HttpRequest& request) const;
  // GET /admin/experts: the expert load report (under --pp gathered from every stage on the
  // engine thread between two steps).
  asio::awaitable<bool> admin_experts(Connection& connection);
  static Reply experts_reply(const DecoderModel& model, const ExpertLoadReport& load);
  static Reply experts_reply(const DecoderModel& model, std::future<ExpertLoadReport>& result);
  // POST /admin/experts/rebalance: the routed experts placed anew over the --tp ranks by the
  // load measured so far (DecoderModel::rebalance_experts, on the engine thread between two
  // steps); answers when every rank holds its new experts. The body may set {"replicas": N}
  // (spare slots per rank and layer; default: the job's --expert-replicas).
  asio::awaitable<bool> rebalance_experts(Connection& connection, const HttpRequest& request);
  // Its checks: `spare` from the body, or the error to send.
  Reply rebalance_request(const HttpRequest& request, int& spare) const;
  static Reply rebalance_reply(std::future<Result<ExpertRebalance>>& result);
  // The admin key check (ServeOptions::admin_key): nothing, or the error to send.
  std::optional<ApiError> authorize_admin(const HttpRequest& request) const;
  asio::awaitable<bool> send(Connection& connection, Reply reply);
  asio::awaitable<bool> complete(Connection& connection, const HttpRequest& request,
                                 Endpoint endpoint, const std::optional<gateway::Tenant>& tenant);
  // The API key in the Authorization header → `tenant` (and its x-ratelimit-* headers on the
  // response), or the 401 to send.
  std::optional<ApiError> authenticate(const HttpRequest& request, Connection& connection,
                                       std::optional<gateway::Tenant>& tenant);
  // The Gateway's admission for an authenticated request: the ticket, or the error to send.
  // Sets the request's priority (from the key's tier), tenant and completion cap.
  std::optional<ApiError> admit(const gateway::Tenant& tenant, const OpenAiRequest& parsed,
                                EngineRequest& engine_request,
                                std::optional<gateway::Admission>& admission,
                                Connection& connection);

  boost::json::object model_json() const;
  // The model, or a 503 to send while it loads.
  std::shared_ptr<const ServedModel> loaded_model(std::optional<ApiError>& error) const;
  // Compiles response_format's grammar without blocking the I/O thread (the compilation runs
  // on its own thread; this polls it); a 400 naming response_format when it is malformed,
  // unsupported or over the time limit.
  asio::awaitable<std::optional<ApiError>> compile_constraint(
      const ServedModel& model, const ConstraintSpec& spec, const std::string& param,
      std::shared_ptr<const CompiledConstraint>& out);

  ServerContext& context_;
  // The last expert load gathered from every stage (--pp), for a scrape the engine could not
  // answer in time; written by the engine thread.
  struct LatestExpertReport {
    std::mutex mutex;
    std::shared_ptr<const ExpertLoadReport> report;
  };
  std::shared_ptr<LatestExpertReport> latest_experts_ = std::make_shared<LatestExpertReport>();
};

}  // namespace tachyon::server

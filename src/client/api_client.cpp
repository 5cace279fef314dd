#include "client/api_client.h"

#include <array>
#include <charconv>
#include <chrono>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>

namespace tachyon::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

std::chrono::steady_clock::duration seconds(double value) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(value));
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

struct ApiClient::Endpoint {
  bool tls = false;
  std::string host;
  std::string port;
  asio::io_context io;
  std::unique_ptr<asio::ssl::context> tls_context;
};

std::string ApiResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

Result<std::unique_ptr<ApiClient>> ApiClient::create(ClientOptions options) {
  std::string_view rest = options.url;
  auto endpoint = std::make_unique<Endpoint>();
  if (rest.starts_with("https://")) {
    endpoint->tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return invalid_argument(
        fmt::format("--url {}: expected http://host[:port] or https://host[:port]", options.url));
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (path.ends_with('/')) path.remove_suffix(1);
  // Requests name their full path (/v1/...): a base URL ending in /v1 (as the openai client's)
  // means the server's root.
  if (path.ends_with("/v1")) path.remove_suffix(3);
  if (!path.empty()) {
    return invalid_argument(fmt::format("--url {}: a server behind a path prefix ({}) is not "
                                        "supported; give its root",
                                        options.url, path));
  }
  std::string_view host = authority, port = endpoint->tls ? "443" : "80";
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid_argument("--url: unclosed '['");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (after.starts_with(':')) {
      port = after.substr(1);
    } else if (!after.empty()) {
      return invalid_argument(fmt::format("--url {}: expected [host]:port", options.url));
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument(fmt::format("--url {}: no host", options.url));
  int port_number = 0;
  auto [port_end, port_error] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (port_error != std::errc() || port_end != port.data() + port.size() || port_number < 1 ||
      port_number > 65535) {
    return invalid_argument(fmt::format("--url {}: the port must be 1-65535", options.url));
  }
  endpoint->host = std::string(host);
  endpoint->port = std::string(port);
  if (endpoint->tls) {
    endpoint->tls_context = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    endpoint->tls_context->set_default_verify_paths();
    endpoint->tls_context->set_verify_mode(asio::ssl::verify_peer);
  }
  const std::string base = fmt::format("{}://{}", endpoint->tls ? "https" : "http", authority);
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(options), std::move(endpoint), base));
}

ApiClient::ApiClient(ClientOptions options, std::unique_ptr<Endpoint> endpoint,
                     std::string base_url)
    : options_(std::move(options)),
      endpoint_(std::move(endpoint)),
      base_url_(std::move(base_url)),
      retry_(options_.max_retries) {}

ApiClient::~ApiClient() = default;

Result<ApiResponse> ApiClient::exchange(const std::string& path, const std::string& body,
                                        const BodySink& sink, bool& delivered) {
  Endpoint& endpoint = *endpoint_;
  beast::error_code error;
  tcp::resolver resolver(endpoint.io);
  const auto addresses = resolver.resolve(endpoint.host, endpoint.port, error);
  if (error) return unavailable(fmt::format("cannot resolve {}: {}", endpoint.host, error.message()));

  http::request<http::string_body> request{body.empty() ? http::verb::get : http::verb::post,
                                           path, 11};
  request.set(http::field::host, endpoint.host);
  request.set(http::field::user_agent, "tachyon-client");
  request.set(http::field::accept, "application/json, text/event-stream");
  if (!options_.api_key.empty()) {
    request.set(http::field::authorization, "Bearer " + options_.api_key);
  }
  if (!body.empty()) {
    request.set(http::field::content_type, "application/json");
    request.body() = body;
  }
  request.keep_alive(false);
  request.prepare_payload();

  ApiResponse response;
  // Beast's timeouts bind only asynchronous operations, so each step is one, run to its end on
  // this thread's io_context under the lowest layer's deadline (a server that goes silent ends
  // the request after read_timeout_seconds without a byte).
  // The deadline is set before the operation starts (Beast arms it then).
  auto arm = [&](beast::tcp_stream& lowest, double limit) { lowest.expires_after(seconds(limit)); };
  auto wait = [&](beast::tcp_stream& lowest) -> beast::error_code {
    endpoint.io.restart();
    endpoint.io.run();
    lowest.expires_never();
    return error;
  };
  auto handler = [&](const beast::error_code& result, std::size_t) { error = result; };
  // The same exchange over either stream.
  auto run = [&](auto& stream) -> Status {
    beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
    const double limit = options_.read_timeout_seconds;
    arm(lowest, limit);
    http::async_write(stream, request, handler);
    if (wait(lowest)) {
      return unavailable(fmt::format("sending to {}: {}", base_url_, error.message()));
    }
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    arm(lowest, limit);
    http::async_read_header(stream, buffer, parser, handler);
    if (wait(lowest)) {
      return unavailable(fmt::format("no answer from {}: {}", base_url_, error.message()));
    }
    response.status = parser.get().result_int();
    for (const auto& field : parser.get()) {
      response.headers[lower(field.name_string())] = std::string(field.value());
    }
    const bool to_sink = sink && response.status >= 200 && response.status < 300;
    std::array<char, 16384> chunk;
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      arm(lowest, limit);
      http::async_read_some(stream, buffer, parser, handler);
      wait(lowest);
      const size_t bytes = chunk.size() - parser.get().body().size;
      if (bytes > 0) {
        if (to_sink) {
          delivered = true;
          if (!sink(std::string_view(chunk.data(), bytes))) return Status();
        } else {
          response.body.append(chunk.data(), bytes);
        }
      }
      if (error == http::error::need_buffer) error = {};
      if (error) {
        return unavailable(fmt::format("the answer from {} was cut: {}", base_url_, error.message()));
      }
    }
    return Status();
  };
  auto connect = [&](beast::tcp_stream& stream) -> Status {
    arm(stream, options_.connect_timeout_seconds);
    stream.async_connect(addresses, [&](const beast::error_code& result, const tcp::endpoint&) {
      error = result;
    });
    if (wait(stream)) {
      return unavailable(fmt::format("cannot connect to {}: {}", base_url_, error.message()));
    }
    return Status();
  };

  if (!endpoint.tls) {
    beast::tcp_stream stream(endpoint.io);
    TACHYON_RETURN_IF_ERROR(connect(stream));
    TACHYON_RETURN_IF_ERROR(run(stream));
    stream.socket().shutdown(tcp::socket::shutdown_both, error);
    return response;
  }
  beast::ssl_stream<beast::tcp_stream> stream(endpoint.io, *endpoint.tls_context);
  if (!SSL_set_tlsext_host_name(stream.native_handle(), endpoint.host.c_str())) {
    return unavailable("TLS: cannot set the server name");
  }
  stream.set_verify_callback(asio::ssl::host_name_verification(endpoint.host));
  TACHYON_RETURN_IF_ERROR(connect(beast::get_lowest_layer(stream)));
  arm(beast::get_lowest_layer(stream), options_.connect_timeout_seconds);
  stream.async_handshake(asio::ssl::stream_base::client,
                         [&](const beast::error_code& result) { error = result; });
  if (wait(beast::get_lowest_layer(stream))) {
    return unavailable(fmt::format("TLS with {}: {}", base_url_, error.message()));
  }
  TACHYON_RETURN_IF_ERROR(run(stream));
  beast::get_lowest_layer(stream).close();  // no TLS close_notify wait: the answer is complete
  return response;
}

Result<ApiResponse> ApiClient::send(const std::string& path, const std::string& body,
                                    const BodySink& sink, const RetryNote& note) {
  for (int attempt = 0;; ++attempt) {
    bool delivered = false;
    Result<ApiResponse> response = exchange(path, body, sink, delivered);
    RetryPolicy::Failure failure;
    if (response.ok()) {
      if (response->status < 400) return response;
      failure.status = response->status;
      failure.error = error_code(*response);
      failure.retry_after = response->header("retry-after");
      failure.retry_after_ms = response->header("retry-after-ms");
      failure.should_retry = response->header("x-should-retry");
    } else {
      failure.error = response.status().message();
    }
    // Once part of a stream was shown, sending it again would show it twice.
    if (delivered) return response;
    const RetryDecision decision = retry_.decide(attempt, failure);
    if (!decision.retry) return response;
    if (note) note(decision);
    std::this_thread::sleep_for(seconds(decision.wait_seconds));
  }
}

Result<json::value> ApiClient::get_json(const std::string& path) {
  TACHYON_ASSIGN_OR_RETURN(ApiResponse response, send(path, ""));
  if (response.status != 200) {
    return unavailable(fmt::format("GET {} answered {}: {}", path, response.status,
                                   describe_error(response)));
  }
  boost::system::error_code error;
  json::value value = json::parse(response.body, error);
  if (error) return io_error(fmt::format("GET {}: the answer is not JSON", path));
  return value;
}

std::string error_code(const ApiResponse& response) {
  boost::system::error_code error;
  json::value body = json::parse(response.body, error);
  if (error || !body.is_object()) return "";
  const json::value* inner = body.get_object().if_contains("error");
  if (inner == nullptr || !inner->is_object()) return "";
  const json::value* code = inner->get_object().if_contains("code");
  return code != nullptr && code->is_string() ? std::string(code->get_string()) : "";
}

std::string describe_error(const ApiResponse& response) {
  boost::system::error_code error;
  json::value body = json::parse(response.body, error);
  if (!error && body.is_object()) {
    const json::value* inner = body.get_object().if_contains("error");
    if (inner != nullptr && inner->is_object()) {
      const json::value* message = inner->get_object().if_contains("message");
      const std::string code = error_code(response);
      std::string text = message && message->is_string() ? std::string(message->get_string()) : "";
      if (!code.empty()) text += " (" + code + ")";
      return text;
    }
  }
  return response.body.substr(0, 300);
}

}  // namespace tachyon::client

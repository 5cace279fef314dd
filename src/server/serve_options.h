// What `tachyon serve` tells the HTTP layer: where to listen, the served model's id, and the
// limits that protect the process from clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory_amount.h"
#include "core/status.h"

namespace tachyon::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port())
  // The id clients put in "model": the alias, else the model file's name without ".gguf".
  std::string model_id;
  size_t max_body_bytes = 16 << 20;
  // Limits on what a client sends before the answer starts; each refusal is an OpenAI-style
  // error: 431 (header bytes, header count), 414 (request target), 408 (too slow), then close.
  size_t max_header_bytes = 64 << 10;
  int max_header_count = 100;
  size_t max_url_bytes = 8 << 10;
  double header_timeout_seconds = 10;    // first byte of a request → end of its headers
  double body_timeout_seconds = 60;      // end of the headers → end of the body
  double request_timeout_seconds = 600;  // engine deadline per request
  double sse_ping_interval_seconds = 5;  // ": ping" while a stream has nothing else to send
  double shutdown_timeout_seconds = 30;  // drain time for running requests on SIGTERM
  // The leader of a job over several processes: a signal ends running requests at once (503,
  // or an error event in a stream) instead of draining them, since mpirun kills every rank a
  // second after one fails or after it is stopped itself (odls_base_sigkill_timeout).
  bool end_requests_on_signal = false;
  // A connection waiting for its (next) request's first byte is closed after this.
  double idle_timeout_seconds = 5;
  // Open connections at most; one more is answered 503 (server_overloaded) and closed, while
  // the open ones (streams included) carry on. Lowered to what the descriptor limit allows.
  int max_connections = 4096;
  int io_threads = 2;

  // Authentication: keys from the SQLite database at db_path (auth_db), and/or static keys.
  // With neither, the server serves anyone, and only on a loopback address unless
  // insecure_no_auth. /health is always open; /metrics is open only with public_metrics.
  bool auth_db = false;
  std::string db_path;
  std::vector<std::string> api_keys;
  bool insecure_no_auth = false;
  bool public_metrics = false;
  // The key of the admin routes (GET /admin/experts), never a tenant key. Unset: those routes
  // are open when the server requires no keys, refused (403) when it does.
  std::string admin_key;

  bool requires_auth() const { return auth_db || !api_keys.empty(); }
};

// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(std::string_view host);


// "Qwen2.5-0.5B.Q4_0.gguf" → "Qwen2.5-0.5B.Q4_0": the path's file name without a .gguf suffix.
std::string model_id_from_path(std::string_view path);

}  // namespace tachyon::server

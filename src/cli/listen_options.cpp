#include "cli/listen_options.h"

namespace tachyon::cli {

void add_listen_options(CLI::App& command, server::ServeOptions& serve) {
  command.add_option("--host", serve.host, "Address to listen on (default 127.0.0.1)");
  command.add_option("--port", serve.port, "Port to listen on (default 8080; 0 = any free)")
      ->check(CLI::Range(0, 65535));
  command
      .add_option("--max-body-bytes", serve.max_body_bytes,
                   "Largest request body (default 16 MiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 34));
  command
      .add_option("--request-timeout", serve.request_timeout_seconds,
                   "Seconds a request may run before it fails (default 600)")
      ->check(CLI::Range(0.001, 1e7));
  command
      .add_option("--shutdown-timeout", serve.shutdown_timeout_seconds,
                   "Seconds running requests get to finish on SIGTERM (default 30)")
      ->check(CLI::Range(0.0, 1e6));
  command
      .add_option("--idle-timeout", serve.idle_timeout_seconds,
                   "Seconds a keep-alive connection may wait for its next request (default 5)")
      ->check(CLI::Range(0.001, 1e6));
  command
      .add_option("--header-timeout", serve.header_timeout_seconds,
                   "Seconds from a request's first byte to the end of its headers; slower "
                   "clients get 408 (default 10)")
      ->check(CLI::Range(0.001, 1e6));
  command
      .add_option("--body-timeout", serve.body_timeout_seconds,
                   "Seconds to receive a request's body after its headers; slower clients get "
                   "408 (default 60)")
      ->check(CLI::Range(0.001, 1e6));
  command
      .add_option("--max-header-bytes", serve.max_header_bytes,
                   "Largest request header block; larger gets 431 (default 64 KiB)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  command
      .add_option("--max-headers", serve.max_header_count,
                   "Most header fields in a request; more gets 431 (default 100)")
      ->check(CLI::Range(1, 1 << 20));
  command
      .add_option("--max-url-bytes", serve.max_url_bytes,
                   "Longest request target (path and query); longer gets 414 (default 8 KiB)")
      ->check(CLI::Range(size_t{64}, size_t{1} << 30));
  command
      .add_option("--max-connections", serve.max_connections,
                   "Most open client connections; one more gets 503 and is closed, open ones "
                   "carry on (default 4096)")
      ->check(CLI::Range(1, 1 << 22));
  command.add_option("--io-threads", serve.io_threads, "HTTP threads (default 2)")
      ->check(CLI::Range(1, 64));
}

}  // namespace tachyon::cli

#include "router/replica.h"

#include <algorithm>
#include <charconv>
#include <cerrno>

#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

namespace tachyon::router {

Result<ReplicaAddress> parse_replica_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    return invalid_argument(fmt::format(
        "replica '{}': https is not supported between the router and its replicas (use http:// "
        "on a private network)",
        url));
  }
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  while (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return invalid_argument(
        fmt::format("replica '{}' has a path; give http://host:port", url));
  }
  std::string_view host = rest, port = "80";
  if (rest.starts_with('[')) {  // [::1]:8080
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      return invalid_argument(fmt::format("replica '{}': unclosed '[' in the host", url));
    }
    host = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (after.starts_with(':')) {
      port = after.substr(1);
    } else if (!after.empty()) {
      return invalid_argument(fmt::format("replica '{}' is not http://[host]:port", url));
    }
  } else if (const size_t colon = rest.find(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.find(':') != std::string_view::npos) {
      return invalid_argument(
          fmt::format("replica '{}': an IPv6 host needs brackets (http://[::1]:8080)", url));
    }
  }
  int number = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (host.empty() || error != std::errc() || end != port.data() + port.size() || number < 1 ||
      number > 65535) {
    return invalid_argument(
        fmt::format("replica '{}' is not http://host:port (port 1-65535)", url));
  }
  ReplicaAddress address;
  address.host = std::string(host);
  address.port = std::to_string(number);
  const bool ipv6 = address.host.find(':') != std::string::npos;
  address.url = ipv6 ? fmt::format("http://[{}]:{}", address.host, number)
                     : fmt::format("http://{}:{}", address.host, number);
  return address;
}

Replica::~Replica() {
  for (const IdleConnection& connection : idle_) ::close(connection.fd);
}

int Replica::take_idle_connection() {
  std::lock_guard<std::mutex> lock(idle_mutex_);
  const auto now = std::chrono::steady_clock::now();
  while (!idle_.empty()) {
    const IdleConnection connection = idle_.back();
    idle_.pop_back();
    char byte;
    // Still open with nothing to read (EAGAIN), and not idle for too long?
    const ssize_t peeked = ::recv(connection.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        now - connection.since < kMaxIdle) {
      return connection.fd;
    }
    ::close(connection.fd);
  }
  return -1;
}

void Replica::put_idle_connection(int fd) {
  std::lock_guard<std::mutex> lock(idle_mutex_);
  if (idle_.size() >= kMaxIdleConnections) {
    ::close(idle_.front().fd);
    idle_.erase(idle_.begin());
  }
  idle_.push_back({fd, std::chrono::steady_clock::now()});
}

void Replica::set_models(std::vector<boost::json::object> models) {
  std::lock_guard<std::mutex> lock(mutex_);
  models_ = std::move(models);
}

std::vector<boost::json::object> Replica::models() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return models_;
}

bool Replica::serves(std::string_view model_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(models_.begin(), models_.end(), [&](const boost::json::object& model) {
    const boost::json::value* id = model.if_contains("id");
    return id != nullptr && id->is_string() && id->get_string() == model_id;
  });
}

void Replica::begin_request(int64_t tokens) {
  outstanding_requests_.fetch_add(1);
  outstanding_tokens_.fetch_add(tokens);
  requests_total.fetch_add(1, std::memory_order_relaxed);
}

void Replica::end_request(int64_t tokens) {
  outstanding_requests_.fetch_sub(1);
  outstanding_tokens_.fetch_sub(tokens);
}

}  // namespace tachyon::router

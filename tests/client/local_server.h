// Helpers for the client tests: a free port on 127.0.0.1, and a tiny HTTP server on a thread
// that answers each connection with the next canned response and records what it was sent.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tachyon::client {

// A port on 127.0.0.1 that nothing listens on (bound, then released).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t size = sizeof address;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// "HTTP/1.1 <status>" with `headers` (each "Name: value\r\n") and `body`.
inline std::string http_response(int status, const std::string& headers, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " Status\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

class LocalServer {
 public:
  // One connection per response, in order; gives up waiting for a connection after 10 s.
  explicit LocalServer(std::vector<std::string> responses) : responses_(std::move(responses)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(listener_, 8), 0);
    socklen_t size = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LocalServer() {
    thread_.join();
    ::close(listener_);
  }
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The requests received so far (head and body), one per connection.
  std::vector<std::string> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    for (const std::string& response : responses_) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 10000) <= 0) return;
      const int connection = ::accept(listener_, nullptr, nullptr);
      if (connection < 0) return;
      std::string request = read_request(connection);
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(std::move(request));
      }
      size_t sent = 0;
      while (sent < response.size()) {
        const ssize_t n = ::send(connection, response.data() + sent, response.size() - sent,
                                 MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      ::shutdown(connection, SHUT_RDWR);
      ::close(connection);
    }
  }

  static std::string read_request(int connection) {
    std::string data;
    char chunk[4096];
    size_t head_end = std::string::npos;
    size_t wanted = 0;
    for (;;) {
      if (head_end != std::string::npos && data.size() >= head_end + 4 + wanted) break;
      pollfd ready{connection, POLLIN, 0};
      if (::poll(&ready, 1, 5000) <= 0) break;
      const ssize_t n = ::recv(connection, chunk, sizeof chunk, 0);
      if (n <= 0) break;
      data.append(chunk, static_cast<size_t>(n));
      if (head_end == std::string::npos) {
        head_end = data.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          // Content-Length, by a case-insensitive search of the head.
          for (size_t line = 0; line < head_end;) {
            const size_t end = data.find("\r\n", line);
            if (strncasecmp(data.c_str() + line, "content-length:", 15) == 0) {
              wanted = std::strtoul(data.c_str() + line + 15, nullptr, 10);
            }
            line = end + 2;
          }
        }
      }
    }
    return data;
  }

  std::vector<std::string> responses_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> requests_;
};

}  // namespace tachyon::client

#include "router/local_replicas.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tachyon::router {
namespace {

// A loopback port that was free a moment ago.
Result<int> free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return unavailable(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    return unavailable(fmt::format("no free loopback port: {}", std::strerror(error)));
  }
  ::close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return "unknown status";
}

constexpr std::chrono::milliseconds kMaxBackoff{30000};
// A child that ran this long before crashing restarts after the shortest backoff again.
constexpr std::chrono::seconds kStableRun{60};

}  // namespace

LocalReplicas::LocalReplicas(std::string program, std::vector<std::string> args)
    : program_(std::move(program)), args_(std::move(args)) {}

Result<std::unique_ptr<LocalReplicas>> LocalReplicas::start(std::string program,
                                                            std::vector<std::string> args,
                                                            int count) {
  std::unique_ptr<LocalReplicas> replicas(new LocalReplicas(std::move(program), std::move(args)));
  for (int i = 0; i < count; ++i) {
    Child child;
    child.index = i;
    TACHYON_ASSIGN_OR_RETURN(child.port, free_loopback_port());
    replicas->children_.push_back(child);
  }
  for (Child& child : replicas->children_) {
    if (Status status = replicas->spawn(child); !status.ok()) {
      replicas->stop(std::chrono::milliseconds(5000));
      return status;
    }
  }
  replicas->supervisor_ = std::thread([raw = replicas.get()] { raw->supervise(); });
  return replicas;
}

LocalReplicas::~LocalReplicas() { stop(std::chrono::milliseconds(10000)); }

std::vector<std::string> LocalReplicas::urls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> urls;
  for (const Child& child : children_) urls.push_back(fmt::format("http://127.0.0.1:{}", child.port));
  return urls;
}

Status LocalReplicas::spawn(Child& child) {
  // Everything the child needs is built before fork: after it, only exec and async-signal-safe
  // calls.
  std::vector<std::string> args = args_;
  for (const char* arg : {"--host", "127.0.0.1", "--port"}) args.emplace_back(arg);
  args.push_back(std::to_string(child.port));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program_.c_str()));
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!std::string_view(*entry).starts_with("TACHYON_REPLICA_INDEX=")) {
      environment.emplace_back(*entry);
    }
  }
  environment.push_back("TACHYON_REPLICA_INDEX=" + std::to_string(child.index));
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return unavailable(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    // Nothing of the parent's stays open in the child (the router's listening socket least of
    // all: a child would keep its port bound after the router ends).
    if (::close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::close(fd);
    }
    ::execve(program_.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  child.pid = pid;
  child.started = std::chrono::steady_clock::now();
  spdlog::info("replica {} started: pid {}, http://127.0.0.1:{}", child.index, pid, child.port);
  return Status();
}

void LocalReplicas::supervise() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    for (Child& child : children_) {
      if (child.pid > 0) {
        int status = 0;
        if (::waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
        if (now - child.started > kStableRun) child.backoff = std::chrono::milliseconds(500);
        spdlog::warn("replica {} (pid {}) ended with {}; starting it again in {:.1f} s",
                     child.index, child.pid, describe_exit(status), child.backoff.count() / 1e3);
        child.pid = -1;
        child.restart_at = now + child.backoff;
        child.backoff = std::min(kMaxBackoff, child.backoff * 2);
      } else if (now >= child.restart_at) {
        if (Status status = spawn(child); !status.ok()) {
          spdlog::error("replica {} did not start again: {}", child.index, status.message());
          child.restart_at = now + child.backoff;
        }
      }
    }
    wake_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void LocalReplicas::stop(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !supervisor_.joinable()) {
      bool any = false;
      for (const Child& child : children_) any = any || child.pid > 0;
      if (!any) return;
    }
    stopping_ = true;
  }
  wake_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Child& child : children_) {
    if (child.pid > 0) ::kill(child.pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (Child& child : children_) {
    while (child.pid > 0) {
      int status = 0;
      const pid_t done = ::waitpid(child.pid, &status, WNOHANG);
      if (done == child.pid || (done < 0 && errno == ECHILD)) {
        child.pid = -1;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        spdlog::warn("replica {} (pid {}) did not stop in time: killing it", child.index,
                     child.pid);
        ::kill(child.pid, SIGKILL);
        ::waitpid(child.pid, &status, 0);
        child.pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

}  // namespace tachyon::router

// LocalReplicas: `tachyon serve --replicas N` starts N `tachyon serve` processes on loopback
// ports behind one router. Each child gets the parent's serve flags (minus --replicas, --host,
// --port), its own port, its own process group (so a terminal's Ctrl-C reaches only the parent,
// which drains the router first and then stops the children), and dies with the parent
// (PR_SET_PDEATHSIG). A child that crashes is started again on the same port, with backoff.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace tachyon::router {

class LocalReplicas {
 public:
  // `program`: the tachyon binary; `args`: what follows it (e.g. {"serve", "-m", "x.gguf"}).
  static Result<std::unique_ptr<LocalReplicas>> start(std::string program,
                                                      std::vector<std::string> args, int count);
  ~LocalReplicas();
  LocalReplicas(const LocalReplicas&) = delete;
  LocalReplicas& operator=(const LocalReplicas&) = delete;

  // http://127.0.0.1:PORT of each child.
  std::vector<std::string> urls() const;
  // SIGTERM to every child (they drain), SIGKILL to those still running after `timeout`.
  void stop(std::chrono::milliseconds timeout);

 private:
  struct Child {
    int index = 0;
    int port = 0;
    pid_t pid = -1;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point restart_at;  // when pid < 0 after a crash
    std::chrono::milliseconds backoff{500};
  };
  LocalReplicas(std::string program, std::vector<std::string> args);
  Status spawn(Child& child);
  void supervise();

  const std::string program_;
  const std::vector<std::string> args_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Child> children_;
  bool stopping_ = false;
  std::thread supervisor_;
};

}  // namespace tachyon::router

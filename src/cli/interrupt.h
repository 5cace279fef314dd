// Ctrl-C while a reply is being generated stops that reply, not the program.
#pragma once

#include <atomic>

namespace tachyon::cli {

// While alive, SIGINT sets flag() instead of killing the process (and interrupts a blocking
// read of stdin). The previous handler comes back when it is destroyed.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  const std::atomic<bool>& flag() const;
  bool interrupted() const { return flag().load(); }
  void clear();
};

}  // namespace tachyon::cli

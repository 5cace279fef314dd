// MaskWorker: one background thread that builds token masks ahead of need. After a constrained
// request's token is accepted, its next mask is built here while the engine runs the next
// forward pass; when the sampler then needs it (its pick was rejected) it is ready. Jobs run in
// the order posted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tachyon {

class MaskWorker {
 public:
  MaskWorker();
  ~MaskWorker();  // finishes the queued jobs, then joins
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  void post(std::function<void()> job);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tachyon

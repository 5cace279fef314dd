// A pool of persistent worker threads for data-parallel kernels. The calling thread works
// too, so a pool of N threads runs N-1 workers; a job's N parts go to whichever thread claims
// them first. Workers spin briefly between jobs (a decode step has hundreds), then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace tachyon {

class ThreadPool {
 public:
  // num_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls task(index, num_threads) once per index in [0, num_threads), each on the thread that
  // claims it; returns when all are done. Parts must not wait for each other; not reentrant.
  void run(FunctionRef<void(int thread_index, int num_threads)> task);

  // Splits [0, count) into contiguous chunks, one per thread, each a multiple of `grain`
  // (except the last), and calls body(begin, end) for the non-empty ones.
  void parallel_for(int64_t count, int64_t grain, FunctionRef<void(int64_t begin, int64_t end)> body);

 private:
  void worker_loop(int thread_index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const FunctionRef<void(int, int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // the job's number << 32 | its next unclaimed part
  std::atomic<int> pending_{0};          // parts of the current job done
  std::atomic<bool> stopping_{false};
  // Workers asleep or about to sleep on wake_: run() takes the lock and notifies only then (a
  // decode step's hundreds of jobs mostly find the workers spinning).
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace tachyon

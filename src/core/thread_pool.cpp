#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TACHYON_CPU_RELAX() _mm_pause()
#else
#define TACHYON_CPU_RELAX() ((void)0)
#endif

namespace tachyon {
namespace {

// How long an idle worker spins before it sleeps: long enough to bridge the gap between two
// kernels of one forward pass, short enough not to burn a core when idle.
constexpr auto kSpinTime = std::chrono::microseconds(200);

// Runs the parts of job `job` that no thread has claimed yet; `word` is the pool's
// generation (job << 32 | next part), `done` counts finished parts. A claim succeeds only
// while its job is current and a job ends only when all its parts are done, so `task` is
// valid for whoever holds a claim. When the machine is busy, a thread that has a core takes
// the parts of one still waiting for its own instead of waiting for it.
void take_parts(std::atomic<uint64_t>& word, std::atomic<int>& done,
                const FunctionRef<void(int, int)>* const& task, int num_parts, uint64_t job) {
  for (;;) {
    uint64_t claim = word.load(std::memory_order_acquire);
    const uint64_t part = claim & 0xffffffffu;
    if ((claim >> 32) != job || part >= static_cast<uint64_t>(num_parts)) return;
    if (!word.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;
    (*task)(static_cast<int>(part), num_parts);
    done.fetch_add(1, std::memory_order_acq_rel);
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
    generation_.fetch_add(uint64_t{1} << 32);
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::run(FunctionRef<void(int, int)> task) {
  if (num_threads_ == 1) {
    task(0, 1);
    return;
  }
  task_ = &task;
  pending_.store(0, std::memory_order_relaxed);
  // Every part of the last job was claimed, so only this thread writes the word now. Both
  // sides are sequentially consistent: either this load sees a worker's sleepers_ increment
  // (and the lock below orders the new job with its wait), or that worker's check of the
  // generation, after its increment, sees the new job and it does not sleep.
  const uint64_t job = ((generation_.load(std::memory_order_relaxed) >> 32) + 1) & 0xffffffffu;
  generation_.store(job << 32, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  take_parts(generation_, pending_, task_, num_threads_, job);
  // Wait for the parts other threads claimed; yield now and then, so that a worker that lost
  // its core mid-part (the machine is busy) gets it back instead of waiting behind us.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != num_threads_; ++spins) {
    if (spins % 1024 == 1023) {
      std::this_thread::yield();
    } else {
      TACHYON_CPU_RELAX();
    }
  }
  task_ = nullptr;
}

void ThreadPool::worker_loop(int /*thread_index: parts are claimed, not assigned*/) {
  uint64_t seen = 0;
  while (true) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    if (current == seen) {
      // Reading the clock costs more than a pause, so it is read every 64 spins.
      const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
      for (int spins = 1; (current = generation_.load(std::memory_order_acquire)) == seen; ++spins) {
        if (spins % 64 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
        TACHYON_CPU_RELAX();
      }
      if (current == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        current = generation_.load(std::memory_order_acquire);
      }
    }
    seen = current;
    if (stopping_.load()) return;
    take_parts(generation_, pending_, task_, num_threads_, current >> 32);
  }
}

void ThreadPool::parallel_for(int64_t count, int64_t grain,
                              FunctionRef<void(int64_t, int64_t)> body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t num_grains = (count + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(num_threads_, num_grains));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  auto chunk = [&](int thread_index, int) {
    if (thread_index >= threads) return;
    const int64_t first = num_grains * thread_index / threads;
    const int64_t last = num_grains * (thread_index + 1) / threads;
    const int64_t begin = first * grain;
    const int64_t end = std::min(count, last * grain);
    if (begin < end) body(begin, end);
  };
  run(chunk);
}

}  // namespace tachyon

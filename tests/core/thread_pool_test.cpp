#include "core/thread_pool.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(ThreadPoolTest, RunCallsEveryThreadOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> calls(threads);
    pool.run([&](int index, int count) {
      EXPECT_EQ(count, threads);
      calls[index].fetch_add(1);
    });
    for (int i = 0; i < threads; ++i) EXPECT_EQ(calls[i].load(), 1) << "thread " << i;
  }
}

TEST(ThreadPoolTest, ParallelForCoversEachIndexOnceInGrainChunks) {
  ThreadPool pool(3);
  for (int64_t count : {0, 1, 5, 16, 17, 100, 1000}) {
    for (int64_t grain : {1, 4, 16, 64}) {
      std::vector<std::atomic<int>> seen(count);
      pool.parallel_for(count, grain, [&](int64_t begin, int64_t end) {
        EXPECT_LT(begin, end);
        EXPECT_EQ(begin % grain, 0) << "chunks start on a grain boundary";
        for (int64_t i = begin; i < end; ++i) seen[i].fetch_add(1);
      });
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(seen[i].load(), 1) << "count " << count << " grain " << grain << " index " << i;
      }
    }
  }
}

// A decode step issues hundreds of tiny jobs back to back; none may be lost or overlap.
TEST(ThreadPoolTest, ManySmallJobsInARow) {
  ThreadPool pool(2);
  int64_t total = 0;
  for (int job = 0; job < 20000; ++job) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(64, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum.fetch_add(i);
    });
    total += sum.load();
  }
  EXPECT_EQ(total, 20000 * (63 * 64 / 2));
}

// More threads than cores (as on a busy machine): a part may run on any thread, the caller's
// included, but every part of every job runs exactly once and none runs after its job ended.
TEST(ThreadPoolTest, OversubscribedJobsRunEachPartOnce) {
  ThreadPool pool(8);
  std::vector<std::atomic<int>> calls(8);
  std::atomic<int> finished_job{-1};
  for (int job = 0; job < 5000; ++job) {
    pool.run([&](int index, int count) {
      EXPECT_EQ(count, 8);
      EXPECT_EQ(finished_job.load(), job - 1) << "a part ran after its job had returned";
      calls[index].fetch_add(1);
    });
    finished_job.store(job);
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(calls[i].load(), job + 1) << "job " << job << " part " << i;
    }
  }
}

}  // namespace
}  // namespace tachyon

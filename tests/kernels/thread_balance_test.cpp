#include "kernels/cpu/thread_balance.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace tachyon::kernels {
namespace {

// The parts of all threads cover [0, count) in order, without overlap, each starting at a
// multiple of grain.
void expect_partition(const ThreadBalance& balance, int64_t count, int64_t grain) {
  int64_t expected_begin = 0;
  for (int i = 0; i < balance.num_threads(); ++i) {
    int64_t begin = -1;
    int64_t end = -1;
    balance.split(count, grain, i, &begin, &end);
    EXPECT_EQ(begin, expected_begin) << "thread " << i << " of count " << count;
    EXPECT_LE(begin, end);
    EXPECT_TRUE(begin == count || begin % grain == 0) << begin;
    expected_begin = end;
  }
  EXPECT_EQ(expected_begin, count);
}

// `runs` runs in which both threads of `balance` do the same work, thread 0 in seconds0 and
// thread 1 in seconds1.
void record_runs(ThreadBalance& balance, int runs, double seconds0, double seconds1) {
  for (int run = 0; run < runs; ++run) {
    balance.record(0, 1000.0, seconds0);
    balance.record(1, 1000.0, seconds1);
    balance.update();
  }
}

TEST(ThreadBalanceTest, StartsEvenAndAlwaysPartitions) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadBalance balance(threads);
    for (int i = 0; i < threads; ++i) EXPECT_DOUBLE_EQ(balance.share(i), 1.0 / threads);
    for (int64_t count : {0, 1, 15, 16, 17, 576, 1000, 49152}) {
      for (int64_t grain : {1, 16, 32}) expect_partition(balance, count, grain);
    }
  }
  ThreadBalance two(2);
  int64_t begin = 0;
  int64_t end = 0;
  two.split(64, 16, 1, &begin, &end);
  EXPECT_EQ(begin, 32);
  EXPECT_EQ(end, 64);
}

TEST(ThreadBalanceTest, SharesFollowMeasuredSpeeds) {
  ThreadBalance balance(2);
  // Thread 1 takes twice as long for the same work: shares converge to 2:1.
  record_runs(balance, 200, 1.0, 2.0);
  EXPECT_NEAR(balance.share(0), 2.0 / 3.0, 1e-9);
  EXPECT_NEAR(balance.share(1), 1.0 / 3.0, 1e-9);
  expect_partition(balance, 4096, 16);
  int64_t begin = 0;
  int64_t end = 0;
  balance.split(4800, 16, 0, &begin, &end);
  EXPECT_EQ(begin, 0);
  EXPECT_EQ(end, 3200);
  // Then the other way round: recent runs outweigh old ones.
  record_runs(balance, 400, 2.0, 1.0);
  EXPECT_NEAR(balance.share(1), 2.0 / 3.0, 1e-3);
}

TEST(ThreadBalanceTest, NoThreadIsStarvedAndUnmeasuredRunsChangeNothing) {
  ThreadBalance balance(2);
  // A thread that stalled (descheduled) keeps about half an even share: the floor (0.25 here),
  // renormalized with the other thread's 100/101.
  record_runs(balance, 200, 1.0, 100.0);
  EXPECT_NEAR(balance.share(1), 0.25 / (0.25 + 100.0 / 101.0), 1e-9);
  expect_partition(balance, 1000, 16);
  // Until every thread has measured something, shares stay as they are.
  ThreadBalance fresh(3);
  fresh.record(0, 1000.0, 1.0);
  fresh.update();
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(fresh.share(i), 1.0 / 3);
}

}  // namespace
}  // namespace tachyon::kernels

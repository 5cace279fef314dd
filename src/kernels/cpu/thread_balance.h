// Shares of a data-parallel job for each thread of a pool, in proportion to how fast each thread
// has recently gone through its share. The cores of a shared machine do not draw equal memory
// bandwidth: on these 2-core VMs one runs 3-6% slower than the other for seconds at a time, and
// an even split of every matrix product leaves the faster core waiting at the end of each one
// (about 5% of decoding time). Shares follow the measured speeds with a short memory, so they
// track which core is slow now.
//
// Use: every thread calls split() for its rows and record() with its work and time; the caller
// calls update() after the pool's run has returned (so no share changes during a run).
#pragma once

#include <cstdint>
#include <vector>

namespace tachyon::kernels {

class ThreadBalance {
 public:
  explicit ThreadBalance(int num_threads = 1);

  int num_threads() const { return static_cast<int>(boundary_.size()) - 1; }

  // Thread `index`'s part [begin, end) of `count` items, in multiples of `grain` (except at the
  // end); the parts of all threads cover [0, count) in index order, none overlapping.
  void split(int64_t count, int64_t grain, int index, int64_t* begin, int64_t* end) const;

  // Thread `index` went through `work` units (e.g. bytes read) of its parts in `seconds`.
  void record(int index, double work, double seconds);

  // Re-derives the shares from the speeds recorded so far (each run's weight decays).
  void update();

  // Thread `index`'s current share of the work (the shares add up to 1).
  double share(int index) const { return boundary_[index + 1] - boundary_[index]; }

 private:
  struct alignas(64) Speed {  // one cache line per thread: threads record concurrently
    double work = 0;          // decayed sum of work units
    double seconds = 0;       // decayed sum of the time they took
    double last_work = 0;     // this run's, until update()
    double last_seconds = 0;
  };
  std::vector<Speed> speeds_;
  std::vector<double> boundary_;  // boundary_[i]: where thread i's share starts; [n] = 1
};

}  // namespace tachyon::kernels

#include "kernels/cpu/thread_balance.h"

#include <algorithm>
#include <cmath>

namespace tachyon::kernels {
namespace {

// Weight kept by older runs at each update: a memory of a few dozen products (a fraction of a
// decode step), short enough to follow a core that turns slow within milliseconds.
constexpr double kDecay = 0.95;
// A share never drops below this fraction of an even one (a thread that was descheduled for a
// moment must not be starved of work afterwards).
constexpr double kMinShareOfEven = 0.5;

}  // namespace

ThreadBalance::ThreadBalance(int num_threads)
    : speeds_(static_cast<size_t>(std::max(1, num_threads))),
      boundary_(static_cast<size_t>(std::max(1, num_threads)) + 1) {
  const int n = this->num_threads();
  for (int i = 0; i <= n; ++i) boundary_[i] = static_cast<double>(i) / n;
}

void ThreadBalance::split(int64_t count, int64_t grain, int index, int64_t* begin,
                          int64_t* end) const {
  const int64_t grains = (count + grain - 1) / grain;
  auto edge = [&](int i) {
    if (i == num_threads()) return count;
    const auto at = static_cast<int64_t>(std::llround(boundary_[i] * static_cast<double>(grains)));
    return std::min(count, std::clamp<int64_t>(at, 0, grains) * grain);
  };
  *begin = edge(index);
  *end = std::max(*begin, edge(index + 1));
}

void ThreadBalance::record(int index, double work, double seconds) {
  Speed& speed = speeds_[index];
  speed.last_work = work;
  speed.last_seconds = seconds;
}

void ThreadBalance::update() {
  const int n = num_threads();
  if (n == 1) return;
  double total = 0;
  for (Speed& speed : speeds_) {
    if (speed.last_work > 0 && speed.last_seconds > 0) {
      speed.work = speed.work * kDecay + speed.last_work;
      speed.seconds = speed.seconds * kDecay + speed.last_seconds;
    }
    speed.last_work = 0;
    speed.last_seconds = 0;
    if (speed.work <= 0 || speed.seconds <= 0) return;  // not every thread measured yet
    total += speed.work / speed.seconds;
  }
  // Shares proportional to the rates, none below kMinShareOfEven of an even share.
  auto share = [&](const Speed& speed) {
    return std::max(kMinShareOfEven / n, speed.work / speed.seconds / total);
  };
  double sum = 0;
  for (const Speed& speed : speeds_) sum += share(speed);
  double at = 0;
  for (int i = 0; i < n; ++i) {
    boundary_[i] = at;
    at += share(speeds_[i]) / sum;
  }
  boundary_[n] = 1.0;
}

}  // namespace tachyon::kernels

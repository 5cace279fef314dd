// TokenBucket: a per-minute limit as a bucket that holds `capacity` tokens and refills
// continuously at capacity/60 per second. Not thread-safe: its owner locks.
#pragma once

#include <chrono>
#include <string>

namespace tachyon::gateway {

class TokenBucket {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  TokenBucket() = default;
  // Starts full.
  TokenBucket(double capacity, TimePoint now);

  double capacity() const { return capacity_; }
  // A new limit keeps what was used: the level moves by the change in capacity.
  void set_capacity(double capacity, TimePoint now);

  // Tokens available now (negative while in debt).
  double level(TimePoint now);
  // Takes `amount` when the bucket holds it; otherwise changes nothing and returns false.
  bool try_take(double amount, TimePoint now);
  // Takes unconditionally; the level may go below zero (a debt later requests wait out).
  void take(double amount, TimePoint now);
  // Returns tokens, never above capacity.
  void give_back(double amount, TimePoint now);

  // Seconds until `amount` tokens are available (0 when they are now).
  double seconds_until(double amount, TimePoint now);
  // Seconds until the bucket is full again.
  double seconds_until_full(TimePoint now);

 private:
  void refill(TimePoint now);
  double refill_per_second() const { return capacity_ / 60.0; }

  double capacity_ = 0;
  double level_ = 0;
  TimePoint last_refill_{};
};

// A duration as Go's time.Duration prints it, rounded up to whole milliseconds: "0s", "20ms",
// "1.2s", "6m0s", "1h0m0s". What x-ratelimit-reset-* and OpenAI's messages use.
std::string format_go_duration(double seconds);

}  // namespace tachyon::gateway

#include "gateway/token_bucket.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace tachyon::gateway {
namespace {

// Refill in doubles drifts by ulps; a request that waited exactly its Retry-After must pass.
constexpr double kEpsilon = 1e-6;

}  // namespace

TokenBucket::TokenBucket(double capacity, TimePoint now)
    : capacity_(capacity), level_(capacity), last_refill_(now) {}

void TokenBucket::refill(TimePoint now) {
  if (now <= last_refill_) return;  // clocks only move forward here
  const double elapsed = std::chrono::duration<double>(now - last_refill_).count();
  level_ = std::min(capacity_, level_ + elapsed * refill_per_second());
  last_refill_ = now;
}

void TokenBucket::set_capacity(double capacity, TimePoint now) {
  refill(now);
  level_ = std::min(capacity, level_ + (capacity - capacity_));
  capacity_ = capacity;
}

double TokenBucket::level(TimePoint now) {
  refill(now);
  return level_;
}

bool TokenBucket::try_take(double amount, TimePoint now) {
  refill(now);
  if (level_ + kEpsilon < amount) return false;
  level_ -= amount;
  return true;
}

void TokenBucket::take(double amount, TimePoint now) {
  refill(now);
  level_ -= amount;
}

void TokenBucket::give_back(double amount, TimePoint now) {
  refill(now);
  level_ = std::min(capacity_, level_ + amount);
}

double TokenBucket::seconds_until(double amount, TimePoint now) {
  refill(now);
  if (level_ + kEpsilon >= amount || capacity_ <= 0) return 0;
  return (amount - level_) / refill_per_second();
}

double TokenBucket::seconds_until_full(TimePoint now) {
  return seconds_until(capacity_, now);
}

std::string format_go_duration(double seconds) {
  if (!(seconds > 0)) return "0s";
  const auto total_ms = static_cast<int64_t>(std::ceil(seconds * 1000.0 - 1e-6));
  if (total_ms <= 0) return "0s";
  if (total_ms < 1000) return fmt::format("{}ms", total_ms);
  const int64_t hours = total_ms / 3'600'000;
  const int64_t minutes = total_ms / 60'000 % 60;
  const int64_t whole_seconds = total_ms / 1000 % 60;
  const int64_t millis = total_ms % 1000;
  std::string text;
  if (hours > 0) text += fmt::format("{}h", hours);
  if (hours > 0 || minutes > 0) text += fmt::format("{}m", minutes);
  text += std::to_string(whole_seconds);
  if (millis > 0) {
    std::string fraction = fmt::format("{:03d}", millis);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text + "s";
}

}  // namespace tachyon::gateway

// GatewayClock: where the Gateway reads time. Tests inject fakes to make limits deterministic.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace tachyon::gateway {

struct GatewayClock {
  using TimePoint = std::chrono::steady_clock::time_point;

  std::function<TimePoint()> steady = [] { return std::chrono::steady_clock::now(); };
  // Seconds since the Unix epoch (UTC): day and month quota windows, ledger timestamps.
  std::function<int64_t()> unix_seconds = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
};

}  // namespace tachyon::gateway

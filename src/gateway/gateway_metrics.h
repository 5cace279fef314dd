// Counters the server renders on /metrics, per key name (never the secret).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tachyon::gateway {

struct TenantCounters {
  std::string key_name;
  uint64_t requests_admitted = 0;
  uint64_t requests_finished = 0;  // admissions that ended with finish()
  uint64_t prompt_tokens = 0;      // as reported to finish()
  uint64_t completion_tokens = 0;
  int64_t in_flight = 0;                       // admitted, not finished yet
  std::map<std::string, uint64_t> rejections;  // reason (kReason* in rejection.h) → count
};

struct GatewayMetrics {
  std::vector<TenantCounters> tenants;   // sorted by key name
  uint64_t authentication_failures = 0;  // missing, unknown or revoked keys
};

}  // namespace tachyon::gateway

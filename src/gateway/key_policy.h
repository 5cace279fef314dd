// KeyPolicy: what one API key may do (rate limits, quotas, caps, models), and the tiers that
// give it defaults. 0 means unlimited everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tachyon::gateway {

enum class Tier { kFree, kStandard, kPriority };

// "free", "standard", "priority".
const char* tier_name(Tier tier);
Result<Tier> parse_tier(std::string_view text);

struct KeyPolicy {
  Tier tier = Tier::kStandard;
  int64_t requests_per_minute = 0;      // RPM token bucket capacity
  int64_t tokens_per_minute = 0;        // TPM bucket: prompt + max_tokens charged at admission
  int64_t max_concurrent_requests = 0;  // admitted and not yet finished
  int64_t daily_tokens = 0;             // prompt + completion per UTC day
  int64_t monthly_tokens = 0;           // prompt + completion per UTC calendar month
  int64_t max_tokens = 0;               // cap on one request's max_tokens
  std::vector<std::string> models;      // models the key may use; empty: all

  bool allows_model(std::string_view model) const;
  bool operator==(const KeyPolicy&) const = default;
};

// Tier defaults (rpm / tpm / concurrency; quotas, max_tokens and models are unset):
//   free       20 /    40000 /  2
//   standard  300 /   400000 / 16
//   priority 3000 /  4000000 / 64
KeyPolicy tier_defaults(Tier tier);

// Every limit off: what static `--api-key` keys get.
KeyPolicy unlimited_policy();

// The fields a `keys create` / `keys update` sets; unset fields keep their value.
struct KeyPolicyChange {
  std::optional<Tier> tier;  // a new tier resets rpm, tpm and concurrency to its defaults first
  std::optional<int64_t> requests_per_minute;
  std::optional<int64_t> tokens_per_minute;
  std::optional<int64_t> max_concurrent_requests;
  std::optional<int64_t> daily_tokens;
  std::optional<int64_t> monthly_tokens;
  std::optional<int64_t> max_tokens;
  std::optional<std::vector<std::string>> models;  // an empty list: every model
};

KeyPolicy apply_change(const KeyPolicy& base, const KeyPolicyChange& change);

// Every limit >= 0 and every model name non-empty without commas.
Status validate_policy(const KeyPolicy& policy);

// "a,b" <-> {"a", "b"} (spaces around names dropped, empty names skipped).
std::vector<std::string> split_models(std::string_view text);
std::string join_models(const std::vector<std::string>& models);

}  // namespace tachyon::gateway

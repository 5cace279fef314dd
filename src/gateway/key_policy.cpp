#include "gateway/key_policy.h"

#include <algorithm>

#include <fmt/format.h>

namespace tachyon::gateway {

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kFree:
      return "free";
    case Tier::kStandard:
      return "standard";
    case Tier::kPriority:
      return "priority";
  }
  return "standard";
}

Result<Tier> parse_tier(std::string_view text) {
  for (Tier tier : {Tier::kFree, Tier::kStandard, Tier::kPriority}) {
    if (text == tier_name(tier)) return tier;
  }
  return invalid_argument(fmt::format("tier must be free, standard or priority, got '{}'", text));
}

bool KeyPolicy::allows_model(std::string_view model) const {
  return models.empty() || std::find(models.begin(), models.end(), model) != models.end();
}

KeyPolicy tier_defaults(Tier tier) {
  KeyPolicy policy;
  policy.tier = tier;
  switch (tier) {
    case Tier::kFree:
      policy.requests_per_minute = 20;
      policy.tokens_per_minute = 40'000;
      policy.max_concurrent_requests = 2;
      break;
    case Tier::kStandard:
      policy.requests_per_minute = 300;
      policy.tokens_per_minute = 400'000;
      policy.max_concurrent_requests = 16;
      break;
    case Tier::kPriority:
      policy.requests_per_minute = 3000;
      policy.tokens_per_minute = 4'000'000;
      policy.max_concurrent_requests = 64;
      break;
  }
  return policy;
}

KeyPolicy unlimited_policy() {
  return KeyPolicy{};
}

KeyPolicy apply_change(const KeyPolicy& base, const KeyPolicyChange& change) {
  KeyPolicy policy = base;
  if (change.tier) {
    const KeyPolicy defaults = tier_defaults(*change.tier);
    policy.tier = defaults.tier;
    policy.requests_per_minute = defaults.requests_per_minute;
    policy.tokens_per_minute = defaults.tokens_per_minute;
    policy.max_concurrent_requests = defaults.max_concurrent_requests;
  }
  auto set = [](int64_t& field, const std::optional<int64_t>& value) {
    if (value) field = *value;
  };
  set(policy.requests_per_minute, change.requests_per_minute);
  set(policy.tokens_per_minute, change.tokens_per_minute);
  set(policy.max_concurrent_requests, change.max_concurrent_requests);
  set(policy.daily_tokens, change.daily_tokens);
  set(policy.monthly_tokens, change.monthly_tokens);
  set(policy.max_tokens, change.max_tokens);
  if (change.models) policy.models = *change.models;
  return policy;
}

Status validate_policy(const KeyPolicy& policy) {
  const std::pair<const char*, int64_t> limits[] = {{"rpm", policy.requests_per_minute},
                                                    {"tpm", policy.tokens_per_minute},
                                                    {"concurrency", policy.max_concurrent_requests},
                                                    {"daily-tokens", policy.daily_tokens},
                                                    {"monthly-tokens", policy.monthly_tokens},
                                                    {"max-tokens", policy.max_tokens}};
  for (const auto& [name, value] : limits) {
    if (value < 0) return invalid_argument(fmt::format("{} must be >= 0, got {}", name, value));
  }
  for (const std::string& model : policy.models) {
    if (model.empty() || model.find(',') != std::string::npos) {
      return invalid_argument(fmt::format("model name '{}' is empty or has a comma", model));
    }
  }
  return Status::ok_status();
}

std::vector<std::string> split_models(std::string_view text) {
  std::vector<std::string> models;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty()) models.emplace_back(part);
  }
  return models;
}

std::string join_models(const std::vector<std::string>& models) {
  std::string joined;
  for (const std::string& model : models) {
    if (!joined.empty()) joined += ',';
    joined += model;
  }
  return joined;
}

}  // namespace tachyon::gateway

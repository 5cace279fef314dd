// Tenant: who a request belongs to, as authenticated by the Gateway.
#pragma once

#include <cstdint>
#include <string>

#include "gateway/key_policy.h"

namespace tachyon::gateway {

struct Tenant {
  int64_t key_id = 0;  // the key's row id in the key store; static `--api-key` keys: -N
  std::string name;    // the key's name ("static-N" for static keys); safe to log and label
  KeyPolicy policy;

  bool is_static() const { return key_id < 0; }
};

}  // namespace tachyon::gateway

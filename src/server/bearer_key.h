// Whether a request's "Authorization: Bearer KEY" carries `key` (compared by hash, in constant
// time, as the Gateway compares keys). For the admin key of `serve` and `router`.
#pragma once

#include <string_view>

#include "server/connection.h"

namespace tachyon::server {

bool has_bearer_key(const HttpRequest& request, std::string_view key);

}  // namespace tachyon::server

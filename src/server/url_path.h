// Decoding of request targets: "%2F" → "/" (for model ids in /v1/models/{id}).
#pragma once

#include <string>
#include <string_view>

namespace tachyon::server {

// %XX escapes decoded; anything else (a lone '%' included) kept as it is.
std::string percent_decode(std::string_view text);

}  // namespace tachyon::server

#include "server/serve_options.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

namespace tachyon::server {

std::string model_id_from_path(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  constexpr std::string_view kSuffix = ".gguf";
  if (name.size() > kSuffix.size() && name.ends_with(kSuffix)) {
    name.remove_suffix(kSuffix.size());
  }
  return std::string(name);
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

}  // namespace tachyon::server

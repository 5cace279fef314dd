#include "server/bearer_key.h"

#include "gateway/key_secret.h"

namespace tachyon::server {

bool has_bearer_key(const HttpRequest& request, std::string_view key) {
  std::string_view authorization;
  if (auto header = request.find(http::field::authorization); header != request.end()) {
    authorization = std::string_view(header->value().data(), header->value().size());
  }
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view secret =
      authorization.starts_with(kBearer) ? authorization.substr(kBearer.size()) : std::string_view();
  return !secret.empty() && !key.empty() &&
         gateway::hashes_equal(gateway::hash_secret(secret), gateway::hash_secret(key));
}

}  // namespace tachyon::server

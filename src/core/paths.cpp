#include "core/paths.h"

#include <cstdlib>
#include <filesystem>

namespace tachyon {

std::string tachyon_home() {
  if (const char* home = std::getenv("TACHYON_HOME"); home && *home) return home;
  if (const char* user_home = std::getenv("HOME"); user_home && *user_home) {
    return (std::filesystem::path(user_home) / ".cache" / "tachyon").string();
  }
  return (std::filesystem::path(".cache") / "tachyon").string();
}

std::string default_model_path() {
  return (std::filesystem::path(tachyon_home()) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
      .string();
}

std::string default_database_path() {
  return (std::filesystem::path(tachyon_home()) / "tachyon.db").string();
}

}  // namespace tachyon

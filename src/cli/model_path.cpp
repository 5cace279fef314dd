#include "cli/model_path.h"

#include <filesystem>

#include <CLI/CLI.hpp>

#include "core/paths.h"

namespace tachyon::cli {

Result<std::unique_ptr<GgufFile>> open_model(const std::string& path) {
  if (path.empty()) {
    const std::string fallback = default_model_path();
    std::error_code error;
    if (!std::filesystem::exists(fallback, error)) {
      return not_found("no model given (-m MODEL) and the default model is not installed at " +
                       fallback + "; run `make setup` (or scripts/fetch_model.sh) to fetch it");
    }
    return GgufFile::open(fallback);
  }
  return GgufFile::open(path);
}

void add_model_option(CLI::App& command, std::string& model_path) {
  command.add_option("-m,--model", model_path,
                     "GGUF model file (default: " + default_model_path() + ")");
}

}  // namespace tachyon::cli

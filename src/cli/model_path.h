// Where models are found: -m/--model, else the default model installed by scripts/setup.sh.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "model_files/gguf_file.h"

namespace tachyon::cli {

// Opens `path`, or the default model when `path` is empty, with a message that says what to do
// when the default model is missing.
Result<std::unique_ptr<GgufFile>> open_model(const std::string& path);

// Adds the standard -m/--model option.
void add_model_option(CLI::App& command, std::string& model_path);

}  // namespace tachyon::cli

// The speculative-decoding flags shared by `generate`, `chat`, `bench` and `serve`:
// --speculative MODE, --spec-max-tokens N (serve adds --spec-max-sequences and
// --spec-suffix-cache-tokens).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "speculative/speculative_options.h"

namespace tachyon::cli {

struct SpeculationFlags {
  std::string mode = "off";
  SpeculativeOptions options;

  // Parses --speculative into options.mode; the error names the flag and the value.
  Status finish();
};

void add_speculation_flags(CLI::App& command, SpeculationFlags& flags, bool serving = false);

}  // namespace tachyon::cli

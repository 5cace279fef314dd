// The sampling flags shared by `generate` and `chat`.
#pragma once

#include <CLI/CLI.hpp>

#include "sampling/sampling_params.h"

namespace tachyon::cli {

struct SamplingOptions {
  SamplingParams params;
  uint64_t seed = 0;
  std::vector<std::string> logit_bias;  // "ID=BIAS"
  CLI::Option* seed_option = nullptr;

  // Defaults like llama.cpp's: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05.
  SamplingOptions();
  // Copies --seed and --logit-bias into params; errors name the flag and the value.
  Status finish();
};

void add_sampling_options(CLI::App& command, SamplingOptions& options);

}  // namespace tachyon::cli

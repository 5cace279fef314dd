#include "cli/sampling_options.h"

#include <charconv>

#include <fmt/format.h>

namespace tachyon::cli {

SamplingOptions::SamplingOptions() {
  params.temperature = 0.8f;
  params.top_k = 40;
  params.top_p = 0.95f;
  params.min_p = 0.05f;
}

void add_sampling_options(CLI::App& command, SamplingOptions& options) {
  SamplingParams& p = options.params;
  command.add_option("--temperature,--temp", p.temperature, "0 = greedy (default 0.8)");
  command.add_option("--top-k", p.top_k, "Keep the K most likely tokens, 0 = off (default 40)");
  command.add_option("--top-p", p.top_p, "Nucleus sampling mass, 1 = off (default 0.95)");
  command.add_option("--min-p", p.min_p, "Drop tokens below P x the top probability (default 0.05)");
  command.add_option("--repeat-penalty", p.repetition_penalty, "1 = off (default 1)");
  command.add_option("--repeat-last-n", p.penalty_last_n,
                     "Tokens the repeat penalty looks back over, -1 = all (default -1)");
  command.add_option("--presence-penalty", p.presence_penalty, "OpenAI presence penalty");
  command.add_option("--frequency-penalty", p.frequency_penalty, "OpenAI frequency penalty");
  options.seed_option = command.add_option("--seed", options.seed, "Random seed (default: random)");
  command.add_option("--stop", p.stop, "Stop when the text contains this (repeatable)");
  command.add_option("--logit-bias", options.logit_bias, "ID=BIAS added to a token's logit (repeatable)");
  command.add_flag("--ignore-eos", p.ignore_eos, "Keep generating after end-of-generation tokens");
}

Status SamplingOptions::finish() {
  if (seed_option && seed_option->count() > 0) params.seed = seed;
  for (const std::string& entry : logit_bias) {
    const size_t equals = entry.find('=');
    int32_t id = 0;
    float bias = 0;
    const bool ok =
        equals != std::string::npos &&
        std::from_chars(entry.data(), entry.data() + equals, id).ptr == entry.data() + equals &&
        std::from_chars(entry.data() + equals + 1, entry.data() + entry.size(), bias).ptr ==
            entry.data() + entry.size();
    if (!ok) return invalid_argument(fmt::format("--logit-bias '{}' is not ID=BIAS", entry));
    params.logit_bias[id] = bias;
  }
  return Status();
}

}  // namespace tachyon::cli

#include "cli/speculation_flags.h"

namespace tachyon::cli {

Status SpeculationFlags::finish() {
  Result<SpeculativeMode> parsed = parse_speculative_mode(mode);
  if (!parsed.ok()) return Status(parsed.status().code(), "--speculative: " + parsed.status().message());
  options.mode = *parsed;
  return Status();
}

void add_speculation_flags(CLI::App& command, SpeculationFlags& flags, bool serving) {
  command.add_option("--speculative", flags.mode,
                     "Speculative decoding (outputs stay byte-identical): off (default), ngram "
                     "(prompt lookup in the request's own text) or suffix (also earlier "
                     "requests' text, per API key and cache salt)");
  command
      .add_option("--spec-max-tokens", flags.options.max_draft_tokens,
                  "Most draft tokens verified per sequence and step (default 8)")
      ->check(CLI::Range(1, 64));
  if (!serving) return;
  command
      .add_option("--spec-max-sequences", flags.options.max_sequences,
                  "Speculate only in steps where at most this many sequences decode (default 4): "
                  "busier steps are compute-bound")
      ->check(CLI::Range(0, 4096));
  command
      .add_option("--spec-suffix-cache-tokens", flags.options.suffix_cache_tokens,
                  "Tokens of recent requests the suffix cache keeps (default 1048576)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 32));
}

}  // namespace tachyon::cli

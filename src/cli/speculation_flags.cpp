#include "cli/speculation_flags.h"

#include <fmt/format.h>

namespace tachyon::cli {

Status SpeculationFlags::finish() {
  Result<SpeculativeMode> parsed = parse_speculative_mode(mode);
  if (!parsed.ok()) return Status(parsed.status().code(), "--speculative: " + parsed.status().message());
  options.mode = *parsed;
  if (!draft_model_path.empty() && options.mode == SpeculativeMode::kOff) {
    options.mode = SpeculativeMode::kDraft;
  }
  if (options.mode == SpeculativeMode::kDraft && draft_model_path.empty()) {
    return invalid_argument("--speculative draft needs --draft-model FILE");
  }
  if (options.mode != SpeculativeMode::kDraft && !draft_model_path.empty()) {
    return invalid_argument(fmt::format("--draft-model is for --speculative draft, not {}", mode));
  }
  return Status();
}

Result<DraftSession> open_draft_model(const SpeculationFlags& flags) {
  DraftSession draft;
  if (flags.options.mode != SpeculativeMode::kDraft) return draft;
  TACHYON_ASSIGN_OR_RETURN(draft.files, open_model(flags.draft_model_path));
  TACHYON_ASSIGN_OR_RETURN(draft.tokenizer, draft.files.load_tokenizer());
  TACHYON_ASSIGN_OR_RETURN(draft.model, draft.files.load_model());
  return draft;
}

Result<std::unique_ptr<DraftModelRunner>> make_draft_runner(DraftSession& draft,
                                                            const ModelSession& session) {
  constexpr int kBlockSize = 16;
  return DraftModelRunner::create(*draft.model, *draft.tokenizer, *session.model,
                                  *session.tokenizer, *session.pool,
                                  (session.context_size + kBlockSize - 1) / kBlockSize + 1,
                                  kBlockSize, session.cache_type);
}

boost::json::object speculation_json(SpeculativeMode mode, int64_t drafts, int64_t draft_tokens,
                                     int64_t accepted) {
  return {{"mode", speculative_mode_name(mode)},
          {"drafts", drafts},
          {"draft_tokens", draft_tokens},
          {"accepted_draft_tokens", accepted},
          {"acceptance_rate", draft_tokens > 0 ? static_cast<double>(accepted) / draft_tokens : 0.0},
          {"mean_accepted_length", drafts > 0 ? static_cast<double>(accepted) / drafts : 0.0}};
}

void add_speculation_flags(CLI::App& command, SpeculationFlags& flags, bool serving) {
  command.add_option("--speculative", flags.mode,
                     "Speculative decoding (outputs stay byte-identical): off (default), ngram "
                     "(prompt lookup in the request's own text) or suffix (also earlier "
                     "requests' text, per API key and cache salt)");
  command.add_option("--draft-model", flags.draft_model_path,
                     "Draft model for --speculative draft (GGUF file or Hugging Face folder with "
                     "the same vocabulary, e.g. a lower-bit copy of the model)");
  command
      .add_option("--spec-max-tokens", flags.options.max_draft_tokens,
                  "Most draft tokens verified per sequence and step (default 8)")
      ->check(CLI::Range(1, 64));
  command.add_flag("!--spec-fixed", flags.options.adaptive,
                   "Verify --spec-max-tokens guesses every step instead of as many as the measured "
                   "step costs and acceptance say pay off");
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

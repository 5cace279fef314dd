#include "speculative/speculative_options.h"

#include <fmt/format.h>

namespace tachyon {

const char* draft_source_name(DraftSource source) {
  switch (source) {
    case DraftSource::kNgram: return "ngram";
    case DraftSource::kSuffix: return "suffix";
    case DraftSource::kDraft: return "draft";
    case DraftSource::kMtp: return "mtp";
  }
  return "ngram";
}

Result<SpeculativeMode> parse_speculative_mode(std::string_view name) {
  if (name == "off") return SpeculativeMode::kOff;
  if (name == "ngram") return SpeculativeMode::kNgram;
  if (name == "suffix") return SpeculativeMode::kSuffix;
  if (name == "draft") return SpeculativeMode::kDraft;
  if (name == "mtp") return SpeculativeMode::kMtp;
  return invalid_argument(
      fmt::format("unknown speculative mode '{}' (expected off, ngram, suffix, draft or mtp)", name));
}

const char* speculative_mode_name(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::kOff: return "off";
    case SpeculativeMode::kNgram: return "ngram";
    case SpeculativeMode::kSuffix: return "suffix";
    case SpeculativeMode::kDraft: return "draft";
    case SpeculativeMode::kMtp: return "mtp";
  }
  return "off";
}

}  // namespace tachyon

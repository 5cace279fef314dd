#include "speculative/speculative_options.h"

#include <fmt/format.h>

namespace tachyon {

const char* draft_source_name(DraftSource source) {
  return source == DraftSource::kNgram ? "ngram" : "suffix";
}

Result<SpeculativeMode> parse_speculative_mode(std::string_view name) {
  if (name == "off") return SpeculativeMode::kOff;
  if (name == "ngram") return SpeculativeMode::kNgram;
  if (name == "suffix") return SpeculativeMode::kSuffix;
  if (name == "draft" || name == "mtp") {
    return unsupported(fmt::format(
        "speculative mode '{}' is not available yet; use ngram, suffix or off", name));
  }
  return invalid_argument(
      fmt::format("unknown speculative mode '{}' (expected off, ngram or suffix)", name));
}

const char* speculative_mode_name(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::kOff: return "off";
    case SpeculativeMode::kNgram: return "ngram";
    case SpeculativeMode::kSuffix: return "suffix";
  }
  return "off";
}

}  // namespace tachyon

#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <map>
#include <mutex>

#include <fmt/format.h>

namespace tachyon {
namespace {

// The regexes are facts about each model family's published tokenizer.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr const char* kDeepSeekV3Digits = R"(\p{N}{1,3})";
constexpr const char* kDeepSeekV3Cjk = R"([一-龥぀-ゟ゠-ヿ]+)";
constexpr const char* kDeepSeekV3Pattern =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Kimi-K2's tiktoken pattern uses class intersection ([...&&[^\p{Han}]]), which PCRE2 lacks;
// "(?!\p{Han})" in front of the class says the same thing.
constexpr const char* kKimiK2Pattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// SmolLM: every digit on its own (HF Digits(individual_digits=True)), then GPT-2's pattern.
constexpr const char* kSingleDigit = R"(\p{N})";

struct Recipe {
  std::vector<const char*> stages;
  bool ignore_merges = false;
  bool normalize_nfc = false;
};

// Unicode White_Space, which Hugging Face's regex engine (Oniguruma) means by \s. PCRE2's \s
// also matches U+180E, which Unicode 6.3 moved out of White_Space.
constexpr std::string_view kWhiteSpaceClass =
    R"(\t\n\v\f\r\x20\x85\xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S with kWhiteSpaceClass, inside and outside character classes.
std::string with_unicode_white_space(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

const std::map<std::string, Recipe, std::less<>>& recipes() {
  static const std::map<std::string, Recipe, std::less<>> kRecipes = {
      {"default", {{kGpt2Pattern}}},
      {"gpt2", {{kGpt2Pattern}}},
      {"gpt-2", {{kGpt2Pattern}}},
      {"smollm", {{kSingleDigit, kGpt2Pattern}}},
      {"llama-bpe", {{kLlama3Pattern}, true}},
      {"llama3", {{kLlama3Pattern}, true}},
      {"qwen2", {{kQwen2Pattern}, false, true}},
      {"deepseek-v3", {{kDeepSeekV3Digits, kDeepSeekV3Cjk, kDeepSeekV3Pattern}}},
      {"kimi-k2", {{kKimiK2Pattern}}},
  };
  return kRecipes;
}

}  // namespace

struct PreTokenizer::CompiledRegex {
  pcre2_code* code = nullptr;
  ~CompiledRegex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::known_names() {
  std::vector<std::string> names;
  for (const auto& [name, recipe] : recipes()) names.push_back(name);
  return names;
}

std::optional<std::string> PreTokenizer::name_for_stages(const std::vector<std::string>& stages,
                                                         bool ignore_merges, bool normalize_nfc) {
  for (const auto& [name, recipe] : recipes()) {
    if (recipe.ignore_merges != ignore_merges || recipe.normalize_nfc != normalize_nfc ||
        recipe.stages.size() != stages.size()) {
      continue;
    }
    if (std::equal(stages.begin(), stages.end(), recipe.stages.begin())) return name;
  }
  return std::nullopt;
}

std::string PreTokenizer::byte_level_pattern() { return kGpt2Pattern; }

std::string PreTokenizer::single_digit_pattern() { return kSingleDigit; }

Result<std::unique_ptr<PreTokenizer::CompiledRegex>> PreTokenizer::compile(
    const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset,
                    nullptr);
  if (!code) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof(buffer));
    return Status(StatusCode::kInternal,
                  fmt::format("pre-tokenizer regex does not compile at offset {}: {}",
                              error_offset, reinterpret_cast<const char*>(buffer)));
  }
  auto compiled = std::make_unique<CompiledRegex>();
  compiled->code = code;
  // JIT is an optimisation: when it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return compiled;
}

Result<std::shared_ptr<const PreTokenizer>> PreTokenizer::for_name(std::string_view name) {
  // Compiled once per name and shared: compiled PCRE2 patterns are safe to use from many threads.
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const PreTokenizer>, std::less<>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(name); it != cache.end()) return it->second;

  auto recipe = recipes().find(name);
  if (recipe == recipes().end()) {
    std::string known;
    for (const std::string& known_name : known_names()) known += (known.empty() ? "" : ", ") + known_name;
    return unsupported(fmt::format("unknown pre-tokenizer '{}' (tokenizer.ggml.pre); known: {}",
                                   name, known));
  }
  std::shared_ptr<PreTokenizer> pre_tokenizer(new PreTokenizer());
  pre_tokenizer->ignore_merges_ = recipe->second.ignore_merges;
  pre_tokenizer->normalize_nfc_ = recipe->second.normalize_nfc;
  for (const char* pattern : recipe->second.stages) {
    TACHYON_ASSIGN_OR_RETURN(auto compiled, compile(with_unicode_white_space(pattern)));
    pre_tokenizer->stages_.push_back(std::move(compiled));
  }
  cache.emplace(std::string(name), pre_tokenizer);
  return std::shared_ptr<const PreTokenizer>(pre_tokenizer);
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  pcre2_match_data* match = nullptr;
  for (const auto& stage : stages_) {
    if (!match) match = pcre2_match_data_create_from_pattern(stage->code, nullptr);
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      PCRE2_SIZE start = 0;
      PCRE2_SIZE gap_start = 0;
      while (start < piece.size()) {
        int rc = pcre2_match(stage->code, subject, piece.size(), start, 0, match, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
          // The JIT ran out of stack on a huge piece: the interpreter has no such limit.
          rc = pcre2_match(stage->code, subject, piece.size(), start, PCRE2_NO_JIT, match,
                           nullptr);
        }
        if (rc < 0) break;  // no further match: the rest is one gap
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const PCRE2_SIZE match_begin = ovector[0];
        const PCRE2_SIZE match_end = ovector[1];
        if (match_end == match_begin) {  // empty match: step one character and retry
          start = match_begin + 1;
          while (start < piece.size() && (piece[start] & 0xc0) == 0x80) ++start;
          continue;
        }
        if (match_begin > gap_start) next.push_back(piece.substr(gap_start, match_begin - gap_start));
        next.push_back(piece.substr(match_begin, match_end - match_begin));
        start = gap_start = match_end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    current.swap(next);
  }
  if (match) pcre2_match_data_free(match);
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace tachyon

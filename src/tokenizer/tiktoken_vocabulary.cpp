// Vocabulary from a tiktoken ranks file (Kimi-K2's tiktoken.model: one "<base64 bytes> <rank>"
// line per token) and tokenizer_config.json's special tokens, as the model's own
// tokenization_kimi.py builds its tiktoken.Encoding.
#include <array>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/vocabulary.h"

namespace tachyon {
namespace {

// Kimi-K2 reserves this many ids after the ranked tokens for special tokens; those
// tokenizer_config.json does not name are "<|reserved_token_{id}|>".
constexpr int kReservedSpecialTokens = 256;

// Standard base64 (RFC 4648, with padding), or nothing when `text` is not.
std::optional<std::string> decode_base64(std::string_view text) {
  static const std::array<int8_t, 256> kValues = [] {
    std::array<int8_t, 256> values{};
    values.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) values[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return values;
  }();
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    int values[4];
    int padding = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        values[j] = 0;
        ++padding;
        continue;
      }
      if (padding > 0) return std::nullopt;  // data after '='
      values[j] = kValues[static_cast<unsigned char>(c)];
      if (values[j] < 0) return std::nullopt;
    }
    const uint32_t bits = (values[0] << 18) | (values[1] << 12) | (values[2] << 6) | values[3];
    out += static_cast<char>(bits >> 16);
    if (padding < 2) out += static_cast<char>((bits >> 8) & 0xff);
    if (padding < 1) out += static_cast<char>(bits & 0xff);
  }
  return out;
}

// The two parts a token of `rank` is merged from: byte pair encoding of its bytes with the
// tokens ranked below it, as tiktoken encodes; nothing when that ends in more than two parts
// (such a token is never produced by merging, only matched whole).
std::optional<std::pair<std::string, std::string>> merge_parts(
    const std::string& token, int64_t rank,
    const std::unordered_map<std::string, int64_t>& ranks) {
  std::vector<std::string> parts;
  for (char byte : token) parts.emplace_back(1, byte);
  while (parts.size() > 2) {
    int64_t best_rank = rank;
    size_t best = parts.size();
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best == parts.size()) return std::nullopt;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  if (parts.size() != 2) return std::nullopt;
  return std::pair{parts[0], parts[1]};
}

}  // namespace

Result<Vocabulary> Vocabulary::from_tiktoken(std::string_view ranks_file,
                                             std::string_view config_json) {
  TACHYON_ASSIGN_OR_RETURN(const boost::json::object config,
                           parse_json_object(config_json, "tokenizer_config.json"));
  // Ranked tokens: every rank 0..n-1 exactly once.
  std::vector<std::string> ranked;  // bytes, by rank
  std::unordered_map<std::string, int64_t> ranks;
  size_t line_start = 0;
  int line_number = 0;
  while (line_start < ranks_file.size()) {
    size_t line_end = ranks_file.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = ranks_file.size();
    const std::string_view line = ranks_file.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    std::optional<std::string> bytes;
    int64_t rank = -1;
    if (space != std::string_view::npos) {
      bytes = decode_base64(line.substr(0, space));
      const std::string_view number = line.substr(space + 1);
      rank = number.empty() || number.size() > 9 ? -1 : 0;
      for (char c : number) rank = c >= '0' && c <= '9' && rank >= 0 ? rank * 10 + (c - '0') : -1;
    }
    if (!bytes || rank < 0) {
      return corrupt_data(fmt::format("tiktoken.model line {} is not \"<base64> <rank>\": \"{}\"",
                                      line_number, std::string(line.substr(0, 80))));
    }
    if (rank >= kMaxSize - kReservedSpecialTokens) {
      return corrupt_data(fmt::format("tiktoken.model line {} has rank {}, beyond the largest "
                                      "vocabulary tachyon takes",
                                      line_number, rank));
    }
    if (!ranks.emplace(*bytes, rank).second) {
      return corrupt_data(fmt::format("tiktoken.model line {} repeats a token (rank {})",
                                      line_number, rank));
    }
    if (ranked.size() <= static_cast<size_t>(rank)) ranked.resize(rank + 1);
    if (!ranked[rank].empty()) {
      return corrupt_data(fmt::format("tiktoken.model line {} repeats rank {}", line_number, rank));
    }
    ranked[rank] = std::move(*bytes);
  }
  if (ranked.empty()) return corrupt_data("tiktoken.model holds no tokens");
  for (size_t rank = 0; rank < ranked.size(); ++rank) {
    if (ranked[rank].empty()) {
      return corrupt_data(fmt::format("tiktoken.model has no token of rank {} (of {})", rank,
                                      ranked.size()));
    }
  }

  Vocabulary vocabulary;
  vocabulary.model = "gpt2";
  vocabulary.pre = "kimi-k2";
  const int64_t num_ranked = static_cast<int64_t>(ranked.size());
  for (int64_t rank = 0; rank < num_ranked; ++rank) {
    vocabulary.tokens.push_back(ByteLevel::encode(ranked[rank]));
    vocabulary.types.push_back(TokenType::kNormal);
    if (ranked[rank].size() < 2) continue;
    if (auto parts = merge_parts(ranked[rank], rank, ranks)) {
      vocabulary.merges.push_back(ByteLevel::encode(parts->first) + " " +
                                  ByteLevel::encode(parts->second));
    }
  }
  // The reserved special tokens: named by added_tokens_decoder, else reserved_token_<id>.
  std::vector<std::string> special(kReservedSpecialTokens);
  for (int i = 0; i < kReservedSpecialTokens; ++i) {
    special[i] = fmt::format("<|reserved_token_{}|>", num_ranked + i);
  }
  if (const boost::json::value* added = config.if_contains("added_tokens_decoder")) {
    if (!added->is_object()) {
      return corrupt_data("tokenizer_config.json added_tokens_decoder is not an object");
    }
    for (const auto& [key, token] : added->get_object()) {
      int64_t id = -1;
      const std::string id_text(key);
      if (!id_text.empty() && id_text.size() < 10 &&
          id_text.find_first_not_of("0123456789") == std::string::npos) {
        id = std::stoll(id_text);
      }
      const boost::json::value* content =
          token.is_object() ? token.get_object().if_contains("content") : nullptr;
      if (id < num_ranked || id >= num_ranked + kReservedSpecialTokens || content == nullptr ||
          !content->is_string()) {
        return corrupt_data(fmt::format("tokenizer_config.json added token \"{}\" {} is not a "
                                        "special token {}..{} with a content",
                                        id_text, boost::json::serialize(token).substr(0, 80),
                                        num_ranked, num_ranked + kReservedSpecialTokens - 1));
      }
      special[id - num_ranked] = std::string(content->get_string());
    }
  }
  for (std::string& text : special) {
    vocabulary.tokens.push_back(std::move(text));
    vocabulary.types.push_back(TokenType::kControl);
  }
  for (int32_t id = 0; id < vocabulary.size(); ++id) {
    if (!vocabulary.token_to_id.emplace(vocabulary.tokens[id], id).second) {
      return corrupt_data(fmt::format("tokenizer_config.json special token \"{}\" is also token "
                                      "{}",
                                      vocabulary.tokens[id],
                                      vocabulary.token_to_id.at(vocabulary.tokens[id])));
    }
  }
  TACHYON_RETURN_IF_ERROR(apply_tokenizer_config(config, vocabulary));
  return vocabulary;
}

}  // namespace tachyon

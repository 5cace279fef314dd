#include "tokenizer/sentencepiece_tokenizer.h"

#include <charconv>
#include <queue>

#include <fmt/format.h>

#include "tokenizer/byte_level.h"

namespace tachyon {
namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // "▁", U+2581

}  // namespace

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::create(
    Vocabulary vocabulary) {
  if (vocabulary.scores.empty()) {
    return corrupt_data("SentencePiece vocabulary has no scores (tokenizer.ggml.scores)");
  }
  std::unique_ptr<SentencePieceTokenizer> tokenizer(
      new SentencePieceTokenizer(std::move(vocabulary)));
  for (int byte = 0; byte < 256; ++byte) {
    tokenizer->byte_token_[byte] = tokenizer->vocabulary_.find(fmt::format("<0x{:02X}>", byte));
  }
  return tokenizer;
}

void SentencePieceTokenizer::encode_text(std::string_view text, bool after_special,
                                         std::vector<TokenId>& out) const {
  std::string normalized;
  normalized.reserve(text.size() + 3);
  if (vocabulary_.add_space_prefix && after_special) normalized += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      normalized += kSpaceMark;
    } else {
      normalized += c;
    }
  }

  // One symbol per UTF-8 character (an invalid byte is a character of its own).
  struct Symbol {
    size_t begin;
    size_t length;
    int prev;
    int next;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < normalized.size();) {
    size_t length = utf8_sequence_length(static_cast<unsigned char>(normalized[i]));
    length = std::min(length, normalized.size() - i);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({i, length, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    i += length;
  }

  // Highest score first; leftmost first among equal scores.
  struct Candidate {
    float score;
    int left;
    size_t length;  // of the merged text, to detect stale candidates
    bool operator<(const Candidate& other) const {
      return score != other.score ? score < other.score : left > other.left;
    }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& a = symbols[left];
    const Symbol& b = symbols[a.next];
    const std::string merged = normalized.substr(a.begin, a.length + b.length);
    if (std::optional<TokenId> id = vocabulary_.find(merged)) {
      queue.push({vocabulary_.scores[*id], left, merged.size()});
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    if (left.length == 0 || left.next < 0 ||
        left.length + symbols[left.next].length != candidate.length) {
      continue;  // stale: one side changed since this candidate was queued
    }
    Symbol& right = symbols[left.next];
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = candidate.left;
    consider(left.prev);
    consider(candidate.left);
  }

  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string piece = normalized.substr(symbols[i].begin, symbols[i].length);
    if (std::optional<TokenId> id = vocabulary_.find(piece)) {
      out.push_back(*id);
      continue;
    }
    for (unsigned char byte : piece) {
      if (byte_token_[byte]) {
        out.push_back(*byte_token_[byte]);
      } else if (vocabulary_.unknown_id) {
        out.push_back(*vocabulary_.unknown_id);
        break;  // one unknown token for the whole piece, as SentencePiece does without fallback
      }
    }
  }
}

std::string SentencePieceTokenizer::token_bytes(TokenId id) const {
  const std::string& text = vocabulary_.tokens[id];
  switch (vocabulary_.types[id]) {
    case TokenType::kByte: {
      // "<0xXX>"
      unsigned value = 0;
      if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>' &&
          std::from_chars(text.data() + 3, text.data() + 5, value, 16).ptr == text.data() + 5) {
        return std::string(1, static_cast<char>(value));
      }
      return text;
    }
    case TokenType::kControl:
    case TokenType::kUnknown: return text;
    default: {
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (std::string_view(text).substr(i).starts_with(kSpaceMark)) {
          out += ' ';
          i += kSpaceMark.size();
        } else {
          out += text[i++];
        }
      }
      return out;
    }
  }
}

}  // namespace tachyon

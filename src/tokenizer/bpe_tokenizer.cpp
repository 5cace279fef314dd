#include "tokenizer/bpe_tokenizer.h"

#include <cstdlib>
#include <queue>

#include <utf8proc.h>

#include <fmt/format.h>

#include "tokenizer/byte_level.h"

namespace tachyon {

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(Vocabulary vocabulary) {
  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer(std::move(vocabulary)));
  const Vocabulary& vocab = tokenizer->vocabulary_;
  TACHYON_ASSIGN_OR_RETURN(tokenizer->pre_tokenizer_, PreTokenizer::for_name(vocab.pre));

  for (int byte = 0; byte < 256; ++byte) {
    const std::optional<TokenId> id =
        vocab.find(ByteLevel::char_for_byte(static_cast<unsigned char>(byte)));
    tokenizer->byte_token_[byte] = id.value_or(-1);
  }

  tokenizer->merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& merge = vocab.merges[rank];
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      return corrupt_data(fmt::format("tokenizer.ggml.merges[{}] is \"{}\", expected \"LEFT RIGHT\"",
                                      rank, merge));
    }
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    const std::optional<TokenId> left_id = vocab.find(left);
    const std::optional<TokenId> right_id = vocab.find(right);
    const std::optional<TokenId> merged_id = vocab.find(left + right);
    // A merge whose parts or result are not tokens can never apply; HF skips it too.
    if (!left_id || !right_id || !merged_id) continue;
    tokenizer->merges_.try_emplace(pair_key(*left_id, *right_id),
                                   Merge{static_cast<int32_t>(rank), *merged_id});
  }
  return tokenizer;
}

void BpeTokenizer::encode_text(std::string_view text, bool /*after_special*/,
                               std::vector<TokenId>& out) const {
  std::string normalized;
  if (pre_tokenizer_->normalize_nfc()) {
    // utf8proc refuses invalid UTF-8; such text is split as it is.
    utf8proc_uint8_t* nfc = nullptr;
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &nfc,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (length >= 0) {
      normalized.assign(reinterpret_cast<const char*>(nfc), static_cast<size_t>(length));
      text = normalized;
    }
    std::free(nfc);
  }
  std::vector<std::string_view> pieces;
  pre_tokenizer_->split(text, pieces);
  for (std::string_view piece : pieces) encode_piece(piece, out);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
  if (pre_tokenizer_->ignore_merges()) {
    if (std::optional<TokenId> whole = vocabulary_.find(ByteLevel::encode(piece))) {
      out.push_back(*whole);
      return;
    }
  }
  // One symbol per byte, linked so merges can splice them out.
  struct Symbol {
    TokenId id;
    int prev;
    int next;
  };
  // Some vocabularies lack tokens for bytes never seen in training (SmolLM has none for 0x04):
  // like Hugging Face's BPE without an unknown token, such bytes are dropped.
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (unsigned char byte : piece) {
    if (byte_token_[byte] < 0) continue;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({byte_token_[byte], index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
  }
  const int count = static_cast<int>(symbols.size());

  // Candidate merges ordered by rank, then position (leftmost first, as HF does).
  struct Candidate {
    int32_t rank;
    int left;
    TokenId left_id;
    TokenId right_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) {
      queue.push({it->second.rank, left, symbols[left].id, symbols[right].id});
    }
  };
  for (int i = 0; i + 1 < count; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    // Skip candidates made stale by an earlier merge.
    if (left.id != candidate.left_id || left.next < 0 ||
        symbols[left.next].id != candidate.right_id) {
      continue;
    }
    const int right = left.next;
    left.id = merges_.at(pair_key(candidate.left_id, candidate.right_id)).merged;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = candidate.left;
    symbols[right].id = -1;
    consider(left.prev);
    consider(candidate.left);
  }
  for (int i = count > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

std::string BpeTokenizer::token_bytes(TokenId id) const {
  if (vocabulary_.is_special(id)) return vocabulary_.tokens[id];
  return ByteLevel::decode(vocabulary_.tokens[id]);
}

}  // namespace tachyon

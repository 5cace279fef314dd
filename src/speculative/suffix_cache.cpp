#include "speculative/suffix_cache.h"

#include <algorithm>

namespace tachyon {

SuffixCache::SuffixCache(int64_t max_tokens, int min_ngram, int max_ngram)
    : max_tokens_(std::max<int64_t>(0, max_tokens)),
      min_ngram_(std::max(1, min_ngram)),
      max_ngram_(std::max(min_ngram_, max_ngram)) {}

template <typename Visit>
void SuffixCache::for_each_ngram(const Sequence& sequence, Visit&& visit) const {
  const std::span<const TokenId> tokens(sequence.tokens);
  for (int32_t p = 1; p < static_cast<int32_t>(tokens.size()); ++p) {
    for (int n = min_ngram_; n <= max_ngram_ && n <= p; ++n) {
      visit(ngram_key(tokens.subspan(p - n, n), sequence.partition), p);
    }
  }
}

void SuffixCache::add(uint64_t partition, std::span<const TokenId> tokens) {
  if (max_tokens_ == 0 || tokens.size() < 2) return;
  if (static_cast<int64_t>(tokens.size()) > max_tokens_) tokens = tokens.last(max_tokens_);
  while (!sequences_.empty() && num_tokens_ + static_cast<int64_t>(tokens.size()) > max_tokens_) {
    evict_oldest();
  }
  sequences_.push_back({partition, std::vector<TokenId>(tokens.begin(), tokens.end())});
  num_tokens_ += static_cast<int64_t>(tokens.size());
  const uint64_t number = first_sequence_ + sequences_.size() - 1;
  for_each_ngram(sequences_.back(), [&](uint64_t key, int32_t next) {
    index_[key] = {number, next};  // the newest sequence wins
  });
}

void SuffixCache::evict_oldest() {
  const Sequence& oldest = sequences_.front();
  // Its entries go unless a newer sequence has taken them over since.
  for_each_ngram(oldest, [&](uint64_t key, int32_t) {
    auto found = index_.find(key);
    if (found != index_.end() && found->second.sequence == first_sequence_) index_.erase(found);
  });
  num_tokens_ -= static_cast<int64_t>(oldest.tokens.size());
  sequences_.pop_front();
  ++first_sequence_;
}

NgramMatch SuffixCache::propose(uint64_t partition, std::span<const TokenId> context,
                                int max_tokens, std::vector<TokenId>& out) const {
  const int length = static_cast<int>(context.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min(max_ngram_, length); n >= min_ngram_; --n) {
    const std::span<const TokenId> suffix = context.subspan(length - n, n);
    auto found = index_.find(ngram_key(suffix, partition));
    if (found == index_.end()) continue;
    const Sequence& sequence = sequences_[found->second.sequence - first_sequence_];
    const int next = found->second.next;
    if (sequence.partition != partition ||
        !std::equal(suffix.begin(), suffix.end(), sequence.tokens.begin() + (next - n))) {
      continue;  // a hash collision
    }
    const int count = std::min(max_tokens, static_cast<int>(sequence.tokens.size()) - next);
    out.insert(out.end(), sequence.tokens.begin() + next, sequence.tokens.begin() + next + count);
    return {n, count};
  }
  return {};
}

}  // namespace tachyon

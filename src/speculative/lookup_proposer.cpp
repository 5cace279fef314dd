#include "speculative/lookup_proposer.h"

#include <algorithm>

namespace tachyon {

LookupProposer::LookupProposer(int max_draft_tokens, const SuffixCache* shared,
                               uint64_t partition)
    : max_draft_tokens_(max_draft_tokens), shared_(shared), partition_(partition) {}

int LookupProposer::propose(std::span<const TokenId> tokens, int room, std::vector<TokenId>& out) {
  out.clear();
  const int wanted = std::min(room, max_draft_tokens_);
  if (wanted <= 0) return 0;
  own_.extend(tokens);
  const NgramMatch own = own_.propose(tokens, wanted, out);
  source_ = DraftSource::kNgram;
  if (shared_ != nullptr) {
    scratch_.clear();
    const NgramMatch other = shared_->propose(partition_, tokens, wanted, scratch_);
    if (other.ngram > own.ngram) {
      out.swap(scratch_);
      source_ = DraftSource::kSuffix;
    }
  }
  return static_cast<int>(out.size());
}

}  // namespace tachyon

#include "speculative/lookup_proposer.h"

#include <algorithm>

namespace tachyon {

LookupProposer::LookupProposer(int max_draft_tokens, const SuffixCache* shared,
                               uint64_t partition)
    : max_draft_tokens_(max_draft_tokens), shared_(shared), partition_(partition) {}

void LookupProposer::observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  // `accepted` successes, then one failure unless every guess was right: the per-token rate
  // of this draft, weighted 0.3 against the history (recent drafts matter most: a sequence
  // moves between copying and writing on its own).
  const double rate =
      static_cast<double>(accepted) / (accepted + (accepted < proposed ? 1 : 0));
  acceptance_ += 0.3 * (rate - acceptance_);
}

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

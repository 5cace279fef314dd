// How likely a sequence's next draft token is to be accepted, given the ones before it were: a
// moving average of the per-token acceptance of its recent drafts (a draft of which `accepted`
// of `proposed` tokens were right counts as `accepted` successes and, unless all were right,
// one failure). Recent drafts weigh most (0.3 each): a sequence moves between copying and
// writing on its own. Starts at 0.6, so the first drafts are worth trying.
#pragma once

namespace tachyon {

class AcceptanceRate {
 public:
  void observe(int proposed, int accepted) {
    if (proposed <= 0) return;
    const double rate =
        static_cast<double>(accepted) / (accepted + (accepted < proposed ? 1 : 0));
    value_ += 0.3 * (rate - value_);
  }
  double value() const { return value_; }

 private:
  double value_ = 0.6;
};

}  // namespace tachyon

// How many tokens to propose for one sequence next, from how its recent drafts fared. A draft
// that is all accepted earns a longer one; a partly accepted one is cut to what was accepted
// plus one; a sequence whose drafts keep failing entirely (open-ended text where lookups
// match by chance) backs off: it skips 1, 3, 7, then 15 steps before trying again, since
// every verified token costs compute even when it is rejected.
#pragma once

namespace tachyon {

class DraftLength {
 public:
  explicit DraftLength(int max_tokens);

  // Tokens to propose this step (0 while backing off). Call once per step that could draft.
  int next();
  // The outcome of the last verified draft.
  void observe(int proposed, int accepted);

 private:
  int max_tokens_;
  int length_;
  int consecutive_misses_ = 0;
  int skip_steps_ = 0;
};

}  // namespace tachyon

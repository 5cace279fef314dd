#include "structured/grammar_constraint.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/elementwise.h"

namespace tachyon {

GrammarConstraint::GrammarConstraint(const xgrammar::CompiledGrammar& grammar,
                                     std::shared_ptr<const std::vector<uint8_t>> special,
                                     std::span<const TokenId> end_of_generation,
                                     std::shared_ptr<MaskWorker> worker)
    : matcher_(grammar),
      special_(std::move(special)),
      end_of_generation_(end_of_generation.begin(), end_of_generation.end()),
      bitmask_(static_cast<size_t>(xgrammar::GetBitmaskSize(static_cast<int>(special_->size())))),
      worker_(std::move(worker)) {}

GrammarConstraint::~GrammarConstraint() { wait_for_worker(); }

void GrammarConstraint::wait_for_worker() const {
  std::unique_lock<std::mutex> lock(mutex_);
  done_signal_.wait(lock, [&] { return !building_; });
}

void GrammarConstraint::prepare_mask() {
  if (worker_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (building_ || bitmask_current_ || matcher_.IsTerminated()) return;
    building_ = true;
  }
  // The job touches only the matcher (read) and bitmask_ (written); the engine thread waits for
  // it before it touches either.
  worker_->post([this] {
    fill_bitmask();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      building_ = false;
      bitmask_current_ = true;
    }
    done_signal_.notify_all();
  });
}

void GrammarConstraint::fill_bitmask() {
  DLTensor tensor{};
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  tensor.data = bitmask_.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = shape;
  matcher_.FillNextTokenBitmask(&tensor);
}

bool GrammarConstraint::accept(TokenId token) {
  wait_for_worker();
  if (token < 0 || static_cast<size_t>(token) >= special_->size() || matcher_.IsTerminated()) {
    return false;
  }
  // XGrammar logs a warning for each rejected special token; ids that are never text are
  // decided here without asking it.
  const bool ends = std::find(end_of_generation_.begin(), end_of_generation_.end(), token) !=
                    end_of_generation_.end();
  if ((*special_)[static_cast<size_t>(token)] && !ends) return false;
  if (!matcher_.AcceptToken(token)) return false;
  bitmask_current_ = false;
  return true;
}

void GrammarConstraint::mask(std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  wait_for_worker();
  if (matcher_.IsTerminated()) {
    std::fill(logits.begin(), logits.end(), kNegInf);
    return;
  }
  if (!bitmask_current_) fill_bitmask();  // not built ahead
  bitmask_current_ = true;
  const size_t size = std::min(logits.size(), special_->size());
  kernels::apply_token_mask(reinterpret_cast<const uint32_t*>(bitmask_.data()), logits.data(),
                            static_cast<int64_t>(size));
  // Logits past the grammar's vocabulary (never expected: it spans the whole row).
  for (size_t id = size; id < logits.size(); ++id) logits[id] = kNegInf;
}

void GrammarConstraint::rollback(int num_tokens) {
  wait_for_worker();
  if (num_tokens > 0) {
    matcher_.Rollback(num_tokens);
    bitmask_current_ = false;
  }
}

bool GrammarConstraint::is_terminated() const {
  wait_for_worker();
  return matcher_.IsTerminated();
}

}  // namespace tachyon

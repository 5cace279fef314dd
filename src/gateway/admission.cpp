#include "gateway/admission.h"

#include "gateway/tenant_limiter.h"

namespace tachyon::gateway {

Admission::Admission(std::shared_ptr<TenantLimiter> limiter, std::shared_ptr<UsageLedger> ledger,
                     std::shared_ptr<const GatewayClock> clock, std::string model,
                     int64_t charged_tokens, std::optional<int64_t> max_tokens, bool shared)
    : limiter_(std::move(limiter)),
      ledger_(std::move(ledger)),
      clock_(std::move(clock)),
      model_(std::move(model)),
      charged_tokens_(charged_tokens),
      max_tokens_(max_tokens),
      shared_(shared) {}

Admission::Admission(Admission&& other) noexcept
    : limiter_(std::move(other.limiter_)),
      ledger_(std::move(other.ledger_)),
      clock_(std::move(other.clock_)),
      model_(std::move(other.model_)),
      charged_tokens_(other.charged_tokens_),
      max_tokens_(other.max_tokens_),
      shared_(other.shared_),
      finished_(other.finished_) {
  other.finished_ = true;  // the moved-from ticket owns nothing
}

Admission& Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    release();
    limiter_ = std::move(other.limiter_);
    ledger_ = std::move(other.ledger_);
    clock_ = std::move(other.clock_);
    model_ = std::move(other.model_);
    charged_tokens_ = other.charged_tokens_;
    max_tokens_ = other.max_tokens_;
    shared_ = other.shared_;
    finished_ = other.finished_;
    other.finished_ = true;
  }
  return *this;
}

Admission::~Admission() {
  release();
}

void Admission::release() {
  if (!finished_ && limiter_) limiter_->abandon(shared_);
  finished_ = true;
}

int64_t Admission::key_id() const {
  return limiter_ ? limiter_->key_id() : 0;
}

const std::string& Admission::key_name() const {
  static const std::string kNone;
  return limiter_ ? limiter_->key_name() : kNone;
}

Status Admission::finish(UsageRecord record) {
  if (finished_ || !limiter_) return invalid_argument("this admission was already finished");
  finished_ = true;
  record.key_id = limiter_->key_id();
  record.key_name = limiter_->key_name();
  if (record.model.empty()) record.model = model_;
  if (record.unix_time == 0) record.unix_time = clock_->unix_seconds();
  return limiter_->finish(charged_tokens_, record, clock_->steady(), ledger_.get(), shared_);
}

}  // namespace tachyon::gateway

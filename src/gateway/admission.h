// Admission: the ticket of a request the Gateway let through. It holds a concurrency slot and
// a TPM charge (prompt + max_tokens) until finish() settles them with the real token counts
// and writes the request to the usage ledger.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "gateway/gateway_clock.h"
#include "gateway/usage_ledger.h"

namespace tachyon::gateway {

class TenantLimiter;

class Admission {
 public:
  Admission(std::shared_ptr<TenantLimiter> limiter, std::shared_ptr<UsageLedger> ledger,
            std::shared_ptr<const GatewayClock> clock, std::string model, int64_t charged_tokens,
            std::optional<int64_t> max_tokens, bool shared = false);
  Admission(Admission&& other) noexcept;
  Admission& operator=(Admission&& other) noexcept;
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  // Without finish(): frees the concurrency slot only (the TPM charge stays, no usage counted).
  ~Admission();

  int64_t key_id() const;
  const std::string& key_name() const;
  const std::string& model() const { return model_; }
  // Tokens taken from the TPM bucket at admission.
  int64_t charged_tokens() const { return charged_tokens_; }
  // The completion cap to run the request with: its own max_tokens, or the key's cap when it
  // gave none (nullopt: no cap from either).
  std::optional<int64_t> max_tokens() const { return max_tokens_; }
  bool finished() const { return finished_; }

  // Settles the request: records `record` in the ledger (key_id and key_name are set to this
  // admission's; model and unix_time are filled in when left empty/0), frees the slot, refunds
  // charged - (prompt + completion) to the TPM bucket and adds the tokens to the day/month quotas.
  // Call once, for every outcome ("ok", "error", "cancelled"). The limits are settled even when the
  // ledger write fails; the Status reports that failure. A second call is an error and changes
  // nothing.
  Status finish(UsageRecord record);

 private:
  void release();

  std::shared_ptr<TenantLimiter> limiter_;
  std::shared_ptr<UsageLedger> ledger_;
  std::shared_ptr<const GatewayClock> clock_;
  std::string model_;
  int64_t charged_tokens_ = 0;
  std::optional<int64_t> max_tokens_;
  bool shared_ = false;  // admitted in Redis: settled there
  bool finished_ = false;
};

}  // namespace tachyon::gateway

// Status and Result<T>: how expected failures travel without exceptions.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace tachyon {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller asked for something malformed
  kNotFound,         // a file, key or name does not exist
  kIoError,          // the OS refused a read, open or map
  kCorruptData,      // a file's bytes contradict its own format
  kUnsupported,      // valid input that tachyon does not handle (yet)
  kOutOfRange,       // a count or size past a limit
  kInternal,         // a broken invariant that was caught
  kUnavailable,      // busy or not ready yet: retrying later can succeed
  kDeadlineExceeded, // a time limit ran out
  kCancelled,        // the caller withdrew the work
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status not_found(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
inline Status io_error(std::string message) {
  return Status(StatusCode::kIoError, std::move(message));
}
inline Status corrupt_data(std::string message) {
  return Status(StatusCode::kCorruptData, std::move(message));
}
inline Status unsupported(std::string message) {
  return Status(StatusCode::kUnsupported, std::move(message));
}
inline Status out_of_range(std::string message) {
  return Status(StatusCode::kOutOfRange, std::move(message));
}
inline Status unavailable(std::string message) {
  return Status(StatusCode::kUnavailable, std::move(message));
}
inline Status deadline_exceeded(std::string message) {
  return Status(StatusCode::kDeadlineExceeded, std::move(message));
}
inline Status cancelled(std::string message) {
  return Status(StatusCode::kCancelled, std::move(message));
}

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &std::get<T>(state_); }
  const T* operator->() const { return &std::get<T>(state_); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace tachyon

#define TACHYON_CONCAT_INNER(a, b) a##b
#define TACHYON_CONCAT(a, b) TACHYON_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define TACHYON_RETURN_IF_ERROR(expr)             \
  do {                                            \
    ::tachyon::Status tachyon_status_ = (expr);   \
    if (!tachyon_status_.ok()) return tachyon_status_; \
  } while (0)

// `TACHYON_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define TACHYON_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto TACHYON_CONCAT(tachyon_result_, __LINE__) = (expr);                    \
  if (!TACHYON_CONCAT(tachyon_result_, __LINE__).ok())                        \
    return TACHYON_CONCAT(tachyon_result_, __LINE__).status();                \
  lhs = std::move(TACHYON_CONCAT(tachyon_result_, __LINE__)).value()

// TemplateError: how the lexer, parser and interpreter report failures internally. It never
// leaves the library: ChatTemplate turns it into a Status at its boundary.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "core/status.h"

namespace tachyon::jinja {

class TemplateError : public std::exception {
 public:
  TemplateError(int line, std::string message, StatusCode code = StatusCode::kInvalidArgument)
      : line_(line), message_(std::move(message)), code_(code) {}

  const char* what() const noexcept override { return message_.c_str(); }
  int line() const { return line_; }
  const std::string& message() const { return message_; }
  StatusCode code() const { return code_; }

 private:
  int line_;
  std::string message_;
  StatusCode code_;
};

}  // namespace tachyon::jinja

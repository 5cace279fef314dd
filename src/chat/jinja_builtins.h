// The filters, tests and global functions jinja2 (and Hugging Face's environment) provide.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_value.h"

namespace tachyon::jinja {

// Throws TemplateError (line -1, filled in by the caller) for an unknown filter or bad input.
Value apply_builtin_filter(JinjaInterpreter& interpreter, std::string_view name, const Value& input,
                           CallArgs& args);
bool apply_builtin_test(JinjaInterpreter& interpreter, std::string_view name, const Value& input,
                        CallArgs& args);
// range, namespace, dict, raise_exception, strftime_now, joiner.
DictData make_globals(JinjaInterpreter& interpreter);

// Binds call arguments to named parameters like a Python signature; absent ones stay nullopt.
// Throws for unknown keywords or too many positional arguments.
std::vector<std::optional<Value>> bind_arguments(std::string_view function, CallArgs& args,
                                                 std::initializer_list<std::string_view> params);

// Throws a TemplateError without a line (the evaluating node supplies it).
[[noreturn]] void raise_error(std::string message);

}  // namespace tachyon::jinja

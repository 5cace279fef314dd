// JinjaInterpreter: renders a parsed template against a context, with jinja2's scoping (a fresh
// scope per loop iteration and macro call, `if` shares its scope), its default Undefined, and
// Hugging Face's sandboxed environment (immutable lists and dicts). One instance per render.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace tachyon::jinja {

// Bounds that keep an untrusted template from exhausting memory, stack or time.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also caps any single string value
  int64_t max_steps = 20'000'000;              // statements, loop iterations and calls
  int max_depth = 400;                         // nested expression/statement evaluation
  int max_macro_depth = 100;                   // nested macro calls
};

class JinjaInterpreter {
 public:
  JinjaInterpreter(const RenderLimits& limits, DictData context);
  ~JinjaInterpreter();
  JinjaInterpreter(const JinjaInterpreter&) = delete;
  JinjaInterpreter& operator=(const JinjaInterpreter&) = delete;

  // Throws TemplateError on any runtime error.
  std::string render(const StmtList& body);

  // Shared with the filters, tests and methods.
  Value get_attribute(const Value& object, std::string_view name);
  Value get_item(const Value& object, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
  bool apply_test(std::string_view name, const Value& input, CallArgs& args);
  // Python iter(): list items, dict keys, string characters; Undefined iterates as empty.
  std::vector<Value> iterate(const Value& value);
  // Throws when a string about to be built would pass the output limit.
  void check_size(size_t num_bytes) const;
  void count_steps(int64_t steps);
  const RenderLimits& limits() const { return limits_; }
  // Keeps every namespace of this render alive until the end, when they are emptied so that
  // cycles and long chains between them free without recursion or leaks.
  void track_namespace(std::shared_ptr<Namespace> ns) { namespaces_.push_back(std::move(ns)); }

 private:
  struct Scope {
    Scope* parent = nullptr;
    std::vector<std::pair<std::string, Value>> variables;
    bool captured = false;  // a macro or caller refers to it, so it must outlive its block

    const Value* find(std::string_view name) const;
    void set(std::string_view name, Value value);
  };
  enum class Flow { kNormal, kBreak, kContinue };

  Scope* new_scope(Scope* parent);
  Value lookup(std::string_view name, const Scope* scope) const;

  Flow execute(const StmtList& body, Scope* scope);
  Flow execute(const Stmt& stmt, Scope* scope);
  Flow execute_for(const Stmt& stmt, Scope* scope);
  void execute_set(const Stmt& stmt, Scope* scope);
  std::string capture(const StmtList& body, Scope* scope);
  void assign(const Target& target, const Value& value, Scope* scope, int line);
  Value make_macro(const Stmt& stmt, Scope* scope, const StmtList* body, std::string name);
  void write(std::string_view text);

  Value eval(const Expr& expr, Scope* scope);
  Value eval_inner(const Expr& expr, Scope* scope);
  CallArgs eval_args(const Expr& expr, Scope* scope);
  Value eval_slice(const Expr& expr, Scope* scope);
  Value eval_compare(const Expr& expr, Scope* scope);

  RenderLimits limits_;
  DictData context_;
  DictData globals_;
  std::deque<Scope> scopes_;
  std::vector<std::shared_ptr<Namespace>> namespaces_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
  int macro_depth_ = 0;
};

// Python binary operators as jinja2 applies them: + - * / // % ** and ~ (string concatenation).
Value binary_operation(std::string_view op, const Value& left, const Value& right,
                       const JinjaInterpreter& interpreter);
// `item in container`.
bool contains(const Value& container, const Value& item);
// Throws the UndefinedError jinja2 raises when an undefined value is used.
[[noreturn]] void fail_undefined(const Value& value);

// Bound methods (str.strip, dict.items, ...) or an unsafe/absent marker; nullopt: no method.
std::optional<Value> find_method(JinjaInterpreter& interpreter, const Value& object,
                                 std::string_view name);

}  // namespace tachyon::jinja

// The parsed template: expression and statement nodes, as jinja2's parser builds them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace tachyon::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children
  kTuple,      // children
  kDict,       // children: key, value, key, value, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]] (null parts allowed)
  kCall,       // children[0](args)
  kFilter,     // children[0] | name(args); children[0] null inside {% filter %}
  kTest,       // children[0] is name(args)
  kNegate,     // -children[0]
  kPlus,       // +children[0]
  kNot,        // not children[0]
  kBinary,     // children[0] op children[1]: + - * / // % ** ~
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 1;
  int depth = 1;  // height of this subtree; bounded so evaluation and destruction stay shallow
  Value literal;
  std::string name;                    // name, attribute, filter, test or binary operator
  std::vector<std::string> operators;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  std::vector<ExprPtr> children;
  std::vector<ExprPtr> args;  // call, filter and test arguments
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

// An assignment target: a name, a tuple of targets, or `namespace.attribute` (set only).
struct Target {
  enum class Kind { kName, kTuple, kAttribute };
  Kind kind = Kind::kName;
  std::string name;           // kName: variable; kAttribute: the namespace variable
  std::string attribute;      // kAttribute
  std::vector<Target> items;  // kTuple
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (condition, body); a null condition is the else branch
  kFor,          // for target in expr [if filter] body [else else_body]
  kSet,          // set target = expr
  kSetBlock,     // set target [| filters] body endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call [(params)] expr body
  kFilterBlock,  // filter expr(with null input) body
  kWith,         // with name = expr, ... body
  kBreak,
  kContinue,
  kScope,  // a body rendered as is (Hugging Face's {% generation %})
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 1;
  std::string text;  // kText; kMacro: the macro name
  ExprPtr expr;      // kOutput, kFor iterable, kSet value, kCallBlock call, kFilterBlock filter
  ExprPtr filter;    // kFor: `if` filter; kSetBlock: filter chain (input null)
  Target target;
  std::vector<std::pair<ExprPtr, StmtList>> branches;  // kIf
  StmtList body;
  StmtList else_body;
  std::vector<MacroParam> params;  // kMacro, kCallBlock
  // kMacro, kCallBlock: whether the body reads these, which decides if extra arguments (or a
  // caller) are accepted, as in jinja2.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
  std::vector<std::pair<Target, ExprPtr>> assignments;  // kWith
};

}  // namespace tachyon::jinja

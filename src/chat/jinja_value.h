// Value: a Python object as a Jinja template sees it (None, bool, int, float, str, list, tuple,
// dict, namespace, callable, loop), with Python's truthiness, equality, ordering and str()/repr().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <boost/json.hpp>

namespace tachyon::jinja {

class Value;
struct ListData;
struct DictData;
struct Namespace;
struct Callable;
struct LoopState;

// Python's NoneType.
struct NoneValue {};
// jinja2's default Undefined: prints as "", is false, iterates as empty, errors on most uses.
struct UndefinedValue {
  std::shared_ptr<const std::string> hint;  // e.g. "'x' is undefined"
};

enum class ValueKind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // list or tuple (ListData::is_tuple)
  kDict,
  kNamespace,
  kCallable,
  kLoop,
};

class Value {
 public:
  Value() : data_(UndefinedValue{}) {}
  static Value undefined(std::string hint);
  static Value none() { return Value(NoneValue{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double f) { return Value(f); }
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(std::shared_ptr<DictData> data);
  static Value dict(DictData data);
  static Value name_space(std::shared_ptr<Namespace> ns);
  static Value callable(std::shared_ptr<const Callable> fn);
  static Value loop(std::shared_ptr<const LoopState> state);

  ValueKind kind() const { return static_cast<ValueKind>(data_.index()); }
  bool is_undefined() const { return kind() == ValueKind::kUndefined; }
  bool is_none() const { return kind() == ValueKind::kNone; }
  bool is_bool() const { return kind() == ValueKind::kBool; }
  bool is_int() const { return kind() == ValueKind::kInt; }
  bool is_float() const { return kind() == ValueKind::kFloat; }
  // bool, int or float: Python's numbers.Number.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  // bool or int: usable as an integer index.
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind() == ValueKind::kString; }
  bool is_list() const { return kind() == ValueKind::kList; }
  bool is_tuple() const;
  bool is_dict() const { return kind() == ValueKind::kDict; }
  bool is_namespace() const { return kind() == ValueKind::kNamespace; }
  bool is_callable() const { return kind() == ValueKind::kCallable; }
  bool is_loop() const { return kind() == ValueKind::kLoop; }

  bool as_bool() const { return std::get<bool>(data_); }
  // Integer value of a bool or int.
  int64_t as_int() const;
  // Float value of any number.
  double as_double() const;
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const std::vector<Value>& as_list() const;
  int list_depth() const;
  const DictData& as_dict() const { return *std::get<DictPtr>(data_); }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(data_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(data_); }
  const LoopState& as_loop() const { return *std::get<LoopPtr>(data_); }
  const std::string& undefined_hint() const;

  // Python truthiness.
  bool truthy() const;

 private:
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const ListData>;
  using DictPtr = std::shared_ptr<const DictData>;
  using NamespacePtr = std::shared_ptr<Namespace>;
  using CallablePtr = std::shared_ptr<const Callable>;
  using LoopPtr = std::shared_ptr<const LoopState>;
  // Alternative order must match ValueKind.
  using Data = std::variant<UndefinedValue, NoneValue, bool, int64_t, double, StringPtr, ListPtr,
                            DictPtr, NamespacePtr, CallablePtr, LoopPtr>;

  template <typename T>
  explicit Value(T data) : data_(std::move(data)) {}

  Data data_;
};

// Lists and dicts deeper than this are refused: Python itself cannot print them, and bounding
// them keeps recursive printing, comparison and destruction off the native stack's edge.
inline constexpr int kMaxValueDepth = 256;

// Nesting depth of a list or dict value (0 for scalars and namespaces).
int value_depth(const Value& value);

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
};

// An insertion-ordered dict whose keys compare like Python's (1 == 1.0 == True).
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces, keeping the first key's position as Python does.
  void set(Value key, Value value);
  // Appends a key known to be new.
  void append(Value key, Value value);
};

// jinja2's namespace(): the one mutable object templates can write to (`set ns.x = ...`).
struct Namespace {
  DictData attributes;
};

// Arguments of one call, already evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> invoke;
};

// What `loop` inside a for body reads.
struct LoopState {
  std::shared_ptr<const std::vector<Value>> items;
  size_t index0 = 0;
  int depth0 = 0;
  std::shared_ptr<Value> last_changed;  // loop.changed() memory, shared by all iterations
};

// Python `==`.
bool values_equal(const Value& a, const Value& b);
// Python `<` for numbers, strings and sequences; returns false and sets `comparable` to false
// when Python would raise TypeError.
bool value_less(const Value& a, const Value& b, bool* comparable);

// Python str(): what `{{ value }}` prints.
std::string to_python_str(const Value& value);
// Python repr(): how values print inside lists and dicts.
std::string to_python_repr(const Value& value);
void append_python_repr(const Value& value, std::string& out);
// Python repr() of a float: shortest round-trip digits, "1e+16" style beyond 1e16.
std::string format_python_float(double value);
// Python repr() of a str.
void append_python_string_repr(std::string_view text, std::string& out);
// Python's type name as jinja2 error messages print it ("dict", "str", "NoneType", ...).
std::string python_type_name(const Value& value);

// Options of Hugging Face's tojson filter (json.dumps arguments).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;  // the text of one indentation level
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
// json.dumps(value, ...); returns false with `error` set when Python would raise.
bool dump_python_json(const Value& value, const JsonDumpOptions& options, std::string& out,
                      std::string& error);

// Converts parsed JSON input (messages, tools, extra context) into template values. Integers
// beyond int64 are an error because their Python rendering could not be matched.
bool value_from_json(const boost::json::value& json, Value& out, std::string& error);

}  // namespace tachyon::jinja

// The Jinja interpreter's value: Python's None/bool/int/float/str/list/tuple/dict, jinja2's
// Undefined and Namespace, and callables (macros, globals, bound methods). Containers and strings
// are shared and immutable (the sandbox forbids mutating them), so copying a Value is O(1).
// Only a Namespace is mutable, through `{% set ns.x = ... %}`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "lithe/core/status.h"

namespace lithe::jinja {

class Interpreter;
class Value;

struct SrcPos {
  int line = 0;  // 1-based
  int col = 0;   // 1-based, in code points
};

using Entries = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> pos;
  Entries kw;
};

// Containers free their children without recursing (a template can nest values deeply).
struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b); otherwise the same as a list
  ~ListData();
};

// Insertion-ordered like a Python dict; keys are strings (JSON objects have no others).
struct DictData {
  Entries entries;
  const Value* find(std::string_view key) const;
  ~DictData();
};

// The one mutable container; it can form cycles, which the interpreter breaks after rendering.
struct NamespaceData {
  Entries entries;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  ~NamespaceData();
};

// Recursive algorithms (repr, ==, tojson) stop at this depth.
inline constexpr int kMaxValueDepth = 512;

struct Callable {
  std::string name;
  std::function<Result<Value>(Interpreter&, CallArgs&, SrcPos)> fn;
};

class Value {
 public:
  enum class Kind : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, ns, callable };

  Value() = default;  // undefined
  static Value undefined(std::string hint);
  static Value none() { return Value(std::nullptr_t{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double d) { return Value(d); }
  static Value string(std::string s) { return Value(std::make_shared<const std::string>(std::move(s))); }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(Entries entries);
  static Value ns(Entries entries);
  static Value callable(std::string name, std::function<Result<Value>(Interpreter&, CallArgs&, SrcPos)> fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::string; }
  bool is_list() const { return kind() == Kind::list; }
  bool is_dict() const { return kind() == Kind::dict; }
  bool is_ns() const { return kind() == Kind::ns; }
  bool is_callable() const { return kind() == Kind::callable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;    // bool or int
  double as_double() const;  // bool, int or float
  const std::string& as_string() const { return *std::get<StrPtr>(v_); }
  const ListData& as_list() const { return *std::get<ListPtr>(v_); }
  const DictData& as_dict() const { return *std::get<DictPtr>(v_); }
  NamespaceData& as_ns() const { return *std::get<NsPtr>(v_); }
  const Callable& as_callable() const { return *std::get<FnPtr>(v_); }
  // Why it is undefined, as jinja2 words it: "'x' is undefined".
  std::string undefined_hint() const;
  bool same_object(const Value& o) const;  // Python `is` for shared objects

  bool truthy() const;
  std::string str() const;                // Python str(); Undefined prints as ""
  std::string repr(int depth = 0) const;  // Python repr(); "..." past kMaxValueDepth
  std::string type_name() const;          // Python's type name: 'str', 'dict', 'NoneType', ...

 private:
  struct Undef {
    std::shared_ptr<const std::string> hint;
  };
  using StrPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const ListData>;
  using DictPtr = std::shared_ptr<const DictData>;
  using NsPtr = std::shared_ptr<NamespaceData>;
  using FnPtr = std::shared_ptr<const Callable>;
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}

  std::variant<Undef, std::nullptr_t, bool, int64_t, double, StrPtr, ListPtr, DictPtr, NsPtr, FnPtr> v_;
};

// Python's repr(float): shortest round-trip digits, fixed or exponent form as Python picks.
std::string py_float_repr(double d);
std::string py_str_repr(std::string_view s);

// Python ==, and ordering for < <= > >= (nullopt: the types do not order, a TypeError).
bool py_equal(const Value& a, const Value& b, int depth = 0);
std::optional<int> py_compare(const Value& a, const Value& b, int depth = 0);

}  // namespace lithe::jinja

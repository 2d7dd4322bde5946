// Jinja interpreter: walks the AST with jinja2's semantics (Python values, Undefined, scoping:
// a for loop's body gets a fresh scope per iteration, if-blocks do not scope, macros see the scope
// they were defined in). Every step, copy and output byte is charged to a work budget so that a
// hostile template ends with an error instead of hanging or exhausting memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/core/status.h"
#include "lithe/tokenizer/chat_template.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace lithe::jinja {

using Limits = ::lithe::ChatTemplateLimits;

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* lookup(std::string_view name) const;
  void set(const std::string& name, Value v);
  void clear() { vars_.clear(); }

 private:
  Entries vars_;
  std::shared_ptr<Scope> parent_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}

  // Renders body with the given variables (plus the globals: range, namespace, dict,
  // raise_exception, strftime_now).
  Result<std::string> render(const NodeList& body, const Entries& context);

  // The work budget (Limits::max_work, in steps). A statement, loop iteration, call, filter or
  // operator is a step; so is every kBytesPerStep bytes that an operation builds or scans.
  static constexpr size_t kBytesPerStep = 32;
  Status charge(uint64_t steps, SrcPos pos);
  // A string of n bytes, or a list of n items, about to be built: within max_output_bytes? Charges it.
  Status check_size(size_t bytes, SrcPos pos);
  Status check_items(size_t n, SrcPos pos) {
    return check_size(n > SIZE_MAX / sizeof(Value) ? SIZE_MAX : n * sizeof(Value), pos);
  }
  // An operation about to scan v (search, decode, compare, copy): charges its size.
  Status charge_value(const Value& v, SrcPos pos);
  Result<Value> call(const Value& fn, CallArgs& args, SrcPos pos);
  // Namespaces can form cycles (ns.me = [ns]); render() empties every one it tracked when done.
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow : uint8_t { normal, break_, continue_ };

  Status exec(const NodeList& nodes, const ScopePtr& scope, std::string& out);
  Status exec_node(const Node& n, const ScopePtr& scope, std::string& out);
  Status exec_for(const Node& n, const ScopePtr& scope, std::string& out);
  Status exec_set(const Node& n, const ScopePtr& scope, std::string& out);
  Status assign(const Node& n, const ScopePtr& scope, const std::vector<std::string>& targets, const Value& v);
  Status append(std::string& out, std::string_view s, SrcPos pos);
  Value make_macro(const Node& n, const ScopePtr& scope);

  Result<Value> eval(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_call(const Expr& e, const ScopePtr& scope);
  Status eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out);
  Result<Value> eval_compare(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_slice(const Expr& e, const ScopePtr& scope);

  Limits limits_;
  uint64_t work_ = 0;
  size_t output_bytes_ = 0;
  int call_depth_ = 0;
  Flow flow_ = Flow::normal;
  std::vector<Value> namespaces_;
};

// ---- shared by the builtins (jinja_ops.cpp, jinja_methods.cpp, jinja_filters.cpp) ----

// "chat template error at line N: msg" (invalid_argument).
Status runtime_error(SrcPos pos, const std::string& msg);
// The error for using an Undefined where jinja2 raises UndefinedError.
Status undefined_error(SrcPos pos, const Value& undef);

// Binds call arguments to named parameters, Python style; parameters past `required` may be absent.
Result<std::vector<std::optional<Value>>> bind_args(CallArgs& args, std::initializer_list<std::string_view> params,
                                                    size_t required, std::string_view fname, SrcPos pos);

// Operators.
Result<Value> binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b, SrcPos pos);
Result<bool> contains(const Value& container, const Value& item, SrcPos pos);
// Items a for loop (or list filter) sees: list items, dict keys, string characters.
Result<std::vector<Value>> iterate(const Value& v, SrcPos pos);

// Attribute and item access with jinja2's fallbacks (attribute first for `.`, item first for []).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Result<Value> get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step,
                        SrcPos pos);
Entries make_globals();
// Python's str.replace(old, new, count); count < 0 replaces all (the method and the filter).
Result<Value> str_replace(Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                          int64_t count, SrcPos pos);

}  // namespace lithe::jinja

#include "tokenizer/jinja_eval.h"

#include "tokenizer/jinja_parser.h"

namespace lithe::jinja {

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    for (const auto& [k, v] : s->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars_) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars_.emplace_back(name, std::move(v));
}

Status runtime_error(SrcPos pos, const std::string& msg) {
  return error(StatusCode::invalid_argument, "chat template error at line {}: {}", pos.line, msg);
}

Status undefined_error(SrcPos pos, const Value& undef) { return runtime_error(pos, undef.undefined_hint()); }

Status Interpreter::charge(uint64_t steps, SrcPos pos) {
  work_ += steps;
  if (work_ <= limits_.max_work) return Status::ok();
  return error(StatusCode::invalid_argument,
               "chat template exceeded its work limit of {} steps at line {}; it loops or copies too much",
               limits_.max_work, pos.line);
}

Status Interpreter::check_size(size_t bytes, SrcPos pos) {
  if (bytes > limits_.max_output_bytes) {
    return error(StatusCode::invalid_argument,
                 "chat template builds a value of {} bytes at line {}, over the limit of {} bytes", bytes, pos.line,
                 limits_.max_output_bytes);
  }
  return charge(bytes / kBytesPerStep, pos);
}

Status Interpreter::charge_value(const Value& v, SrcPos pos) {
  size_t bytes = 0;
  if (v.is_string()) bytes = v.as_string().size();
  if (v.is_list()) bytes = v.as_list().items.size() * sizeof(Value);
  if (v.is_dict()) bytes = v.as_dict().entries.size() * sizeof(Entries::value_type);
  return charge(bytes / kBytesPerStep, pos);
}

Status Interpreter::append(std::string& out, std::string_view s, SrcPos pos) {
  output_bytes_ += s.size();
  if (output_bytes_ > limits_.max_output_bytes) {
    return error(StatusCode::invalid_argument, "chat template output exceeds the limit of {} bytes at line {}",
                 limits_.max_output_bytes, pos.line);
  }
  LITHE_TRY(charge(s.size() / kBytesPerStep, pos));
  out.append(s);
  return Status::ok();
}

Result<std::string> Interpreter::render(const NodeList& body, const Entries& context) {
  auto globals = std::make_shared<Scope>(nullptr);
  for (auto& [k, v] : make_globals()) globals->set(k, std::move(v));
  auto top = std::make_shared<Scope>(globals);
  for (const auto& [k, v] : context) top->set(k, v);
  std::string out;
  Status st = exec(body, top, out);
  for (const Value& ns : namespaces_) {  // break reference cycles through namespaces
    Entries drop;
    std::swap(drop, ns.as_ns().entries);
  }
  namespaces_.clear();
  LITHE_TRY(st);
  return out;
}

Status Interpreter::exec(const NodeList& nodes, const ScopePtr& scope, std::string& out) {
  for (const NodePtr& n : nodes) {
    LITHE_TRY(exec_node(*n, scope, out));
    if (flow_ != Flow::normal) break;
  }
  return Status::ok();
}

Status Interpreter::exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
  LITHE_TRY(charge(1, n.pos));
  switch (n.kind) {
    case NodeKind::text: return append(out, n.text, n.pos);
    case NodeKind::output: {
      LITHE_ASSIGN(Value v, eval(*n.expr, scope));
      if (v.is_string()) return append(out, v.as_string(), n.pos);
      return append(out, v.str(), n.pos);
    }
    case NodeKind::if_:
      for (const auto& [cond, body] : n.branches) {
        bool take = cond == nullptr;
        if (!take) {
          LITHE_ASSIGN(Value c, eval(*cond, scope));
          take = c.truthy();
        }
        if (take) return exec(body, scope, out);
      }
      return Status::ok();
    case NodeKind::for_: return exec_for(n, scope, out);
    case NodeKind::set:
    case NodeKind::set_attr:
    case NodeKind::set_block: return exec_set(n, scope, out);
    case NodeKind::macro: scope->set(n.text, make_macro(n, scope)); return Status::ok();
    case NodeKind::break_: flow_ = Flow::break_; return Status::ok();
    case NodeKind::continue_: flow_ = Flow::continue_; return Status::ok();
    case NodeKind::generation: return exec(n.body, scope, out);
  }
  return Status::ok();
}

Status Interpreter::assign(const Node& n, const ScopePtr& scope, const std::vector<std::string>& targets,
                           const Value& v) {
  if (targets.size() == 1) {
    scope->set(targets[0], v);
    return Status::ok();
  }
  LITHE_ASSIGN(std::vector<Value> items, iterate(v, n.pos));
  if (items.size() != targets.size()) {
    return runtime_error(n.pos, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) scope->set(targets[i], items[i]);
  return Status::ok();
}

Status Interpreter::exec_set(const Node& n, const ScopePtr& scope, std::string& out) {
  (void)out;
  if (n.kind == NodeKind::set_block) {
    std::string body;
    LITHE_TRY(exec(n.body, scope, body));
    scope->set(n.targets[0], Value::string(std::move(body)));
    return Status::ok();
  }
  LITHE_ASSIGN(Value v, eval(*n.expr, scope));
  if (n.kind == NodeKind::set) return assign(n, scope, n.targets, v);
  const Value* ns = scope->lookup(n.targets[0]);
  if (ns == nullptr || !ns->is_ns()) {
    return runtime_error(
        n.pos, fmt::format("cannot assign attribute '{}' on '{}', which is not a namespace()", n.text, n.targets[0]));
  }
  ns->as_ns().set(n.text, std::move(v));
  return Status::ok();
}

namespace {

// jinja2's LoopContext: one object per loop, advanced each iteration. It is a namespace here,
// so `loop.index` and friends are attribute lookups; cycle() reads the shared counter.
enum LoopField : size_t { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kPrev, kNext };

Value make_loop(int64_t length, const std::shared_ptr<int64_t>& counter) {
  Entries e;
  for (const char* name : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"}) {
    e.emplace_back(name, Value());
  }
  e.emplace_back("length", Value::integer(length));
  e.emplace_back("depth", Value::integer(1));
  e.emplace_back("depth0", Value::integer(0));
  e.emplace_back("cycle",
                 Value::callable("loop.cycle", [counter](Interpreter&, CallArgs& args, SrcPos pos) -> Result<Value> {
                   if (args.pos.empty() || !args.kw.empty()) {
                     return runtime_error(pos, "loop.cycle() takes one or more positional arguments");
                   }
                   return args.pos[static_cast<size_t>(*counter) % args.pos.size()];
                 }));
  return Value::ns(std::move(e));
}

void advance_loop(const Value& loop, const std::vector<Value>& items, size_t i) {
  Entries& e = loop.as_ns().entries;
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  e[kIndex].second = Value::integer(k + 1);
  e[kIndex0].second = Value::integer(k);
  e[kRevindex].second = Value::integer(n - k);
  e[kRevindex0].second = Value::integer(n - k - 1);
  e[kFirst].second = Value::boolean(k == 0);
  e[kLast].second = Value::boolean(k == n - 1);
  e[kPrev].second = k > 0 ? items[i - 1] : Value::undefined("there is no previous item");
  e[kNext].second = k + 1 < n ? items[i + 1] : Value::undefined("there is no next item");
}

}  // namespace

Status Interpreter::exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
  LITHE_ASSIGN(Value iterable, eval(*n.expr, scope));
  LITHE_ASSIGN(std::vector<Value> items, iterate(iterable, n.expr->pos));
  LITHE_TRY(check_items(items.size(), n.pos));
  auto s = std::make_shared<Scope>(scope);  // reused: each iteration starts from a cleared scope
  if (n.cond) {                             // `for x in xs if cond`: filtered before loop.index counts
    std::vector<Value> kept;
    for (Value& item : items) {
      s->clear();
      LITHE_TRY(charge(1, n.pos));
      LITHE_TRY(assign(n, s, n.targets, item));
      LITHE_ASSIGN(Value c, eval(*n.cond, s));
      if (c.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto counter = std::make_shared<int64_t>(0);
  const Value loop = make_loop(static_cast<int64_t>(items.size()), counter);
  Status st;
  // jinja2 runs the else block unless some iteration reached the end of the body: so after an
  // empty loop, and also when every iteration ended in break or continue.
  bool completed = false;
  for (size_t i = 0; i < items.size() && st.is_ok(); ++i) {
    st = charge(1, n.pos);
    if (!st.is_ok()) break;
    s->clear();
    *counter = static_cast<int64_t>(i);
    advance_loop(loop, items, i);
    s->set("loop", loop);
    st = assign(n, s, n.targets, items[i]);
    if (st.is_ok()) st = exec(n.body, s, out);
    completed = completed || (st.is_ok() && flow_ == Flow::normal);
    const bool stop = flow_ == Flow::break_;
    flow_ = Flow::normal;
    if (stop) break;
  }
  Entries drop;  // the loop object may be referenced from a namespace; empty it now
  std::swap(drop, loop.as_ns().entries);
  LITHE_TRY(st);
  if (completed || n.else_body.empty()) return Status::ok();
  s->clear();
  return exec(n.else_body, s, out);
}

Value Interpreter::make_macro(const Node& n, const ScopePtr& scope) {
  std::weak_ptr<Scope> defined_in = scope;
  const Node* node = &n;
  return Value::callable(n.text, [node, defined_in](Interpreter& in, CallArgs& args, SrcPos pos) -> Result<Value> {
    ScopePtr parent = defined_in.lock();
    if (!parent) {
      return unsupported(fmt::format("call of macro '{}' outside the block that defined it", node->text), pos);
    }
    if (in.call_depth_ >= in.limits_.max_call_depth) {
      return runtime_error(pos, fmt::format("macro calls nest deeper than the limit of {}", in.limits_.max_call_depth));
    }
    const auto& params = node->params;
    if (args.pos.size() > params.size()) {
      return runtime_error(pos,
                           fmt::format("macro '{}' takes not more than {} argument(s)", node->text, params.size()));
    }
    auto s = std::make_shared<Scope>(parent);
    std::vector<bool> bound(params.size(), false);
    for (size_t i = 0; i < args.pos.size(); ++i) {
      s->set(params[i].first, std::move(args.pos[i]));
      bound[i] = true;
    }
    for (auto& [k, v] : args.kw) {
      size_t i = 0;
      while (i < params.size() && params[i].first != k) ++i;
      if (i == params.size()) {
        return runtime_error(pos, fmt::format("macro '{}' takes no keyword argument '{}'", node->text, k));
      }
      if (bound[i]) return runtime_error(pos, fmt::format("macro '{}' got multiple values for '{}'", node->text, k));
      s->set(k, std::move(v));
      bound[i] = true;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      if (params[i].second) {
        LITHE_ASSIGN(Value d, in.eval(*params[i].second, s));
        s->set(params[i].first, std::move(d));
      } else {
        s->set(params[i].first, Value::undefined(fmt::format("parameter '{}' was not provided", params[i].first)));
      }
    }
    ++in.call_depth_;
    std::string out;
    Status st = in.exec(node->body, s, out);
    --in.call_depth_;
    LITHE_TRY(st);
    return Value::string(std::move(out));
  });
}

Result<Value> Interpreter::call(const Value& fn, CallArgs& args, SrcPos pos) {
  if (fn.is_undefined()) return undefined_error(pos, fn);
  if (!fn.is_callable()) return runtime_error(pos, fmt::format("'{}' object is not callable", fn.type_name()));
  LITHE_TRY(charge(1, pos));
  return fn.as_callable().fn(*this, args, pos);
}

Status Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) {
    LITHE_ASSIGN(Value v, eval(*e.args[i], scope));
    out.pos.push_back(std::move(v));
  }
  for (const auto& [k, ex] : e.kwargs) {
    LITHE_ASSIGN(Value v, eval(*ex, scope));
    out.kw.emplace_back(k, std::move(v));
  }
  return Status::ok();
}

Result<Value> Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  LITHE_ASSIGN(Value fn, eval(*e.args[0], scope));
  CallArgs args;
  LITHE_TRY(eval_args(e, 1, scope, args));
  return call(fn, args, e.pos);
}

Result<Value> Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  LITHE_ASSIGN(Value left, eval(*e.args[0], scope));
  for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
    LITHE_ASSIGN(Value right, eval(*e.args[i + 1], scope));
    LITHE_TRY(charge(1, e.pos));
    LITHE_TRY(charge_value(left, e.pos));
    LITHE_TRY(charge_value(right, e.pos));
    bool r = false;
    const CmpOp op = e.cmp_ops[i];
    if (op == CmpOp::eq || op == CmpOp::ne) {
      r = py_equal(left, right) == (op == CmpOp::eq);
    } else if (op == CmpOp::in || op == CmpOp::not_in) {
      LITHE_ASSIGN(bool has, contains(right, left, e.pos));
      r = has == (op == CmpOp::in);
    } else {
      if (left.is_undefined()) return undefined_error(e.pos, left);
      if (right.is_undefined()) return undefined_error(e.pos, right);
      const std::optional<int> c = py_compare(left, right);
      static constexpr const char* kNames[] = {"==", "!=", "<", "<=", ">", ">="};
      if (!c) {
        return runtime_error(e.pos, fmt::format("'{}' not supported between instances of '{}' and '{}'",
                                                kNames[static_cast<int>(op)], left.type_name(), right.type_name()));
      }
      r = op == CmpOp::lt ? *c < 0 : op == CmpOp::le ? *c <= 0 : op == CmpOp::gt ? *c > 0 : *c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Result<Value> Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
  LITHE_ASSIGN(Value obj, eval(*e.args[0], scope));
  if (obj.is_undefined()) return undefined_error(e.pos, obj);
  LITHE_TRY(charge_value(obj, e.pos));
  Value parts[3] = {Value::none(), Value::none(), Value::none()};
  for (size_t i = 0; i < 3; ++i) {
    if (e.args[i + 1]) {
      LITHE_ASSIGN(parts[i], eval(*e.args[i + 1], scope));
    }
  }
  return get_slice(*this, obj, parts[0], parts[1], parts[2], e.pos);
}

Result<Value> Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::literal: return e.value;
    case ExprKind::name: {
      const Value* v = scope->lookup(e.name);
      if (v != nullptr) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::list:
    case ExprKind::tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) {
        LITHE_ASSIGN(Value v, eval(*a, scope));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), e.kind == ExprKind::tuple);
    }
    case ExprKind::dict: {
      Entries entries;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        LITHE_ASSIGN(Value k, eval(*e.args[i], scope));
        LITHE_ASSIGN(Value v, eval(*e.args[i + 1], scope));
        if (!k.is_string()) return unsupported(fmt::format("dict key of type {}", k.type_name()), e.args[i]->pos);
        bool replaced = false;
        for (auto& [ek, ev] : entries) {
          if (ek == k.as_string()) {
            ev = std::move(v);
            replaced = true;
            break;
          }
        }
        if (!replaced) entries.emplace_back(k.as_string(), std::move(v));
      }
      return Value::dict(std::move(entries));
    }
    case ExprKind::getattr: {
      LITHE_ASSIGN(Value obj, eval(*e.args[0], scope));
      if (obj.is_undefined()) return undefined_error(e.pos, obj);
      return get_attr(obj, e.name);
    }
    case ExprKind::getitem: {
      LITHE_ASSIGN(Value obj, eval(*e.args[0], scope));
      if (obj.is_undefined()) return undefined_error(e.pos, obj);
      if (obj.is_string()) LITHE_TRY(charge_value(obj, e.pos));  // indexing decodes it
      LITHE_ASSIGN(Value key, eval(*e.args[1], scope));
      return get_item(obj, key);
    }
    case ExprKind::slice: return eval_slice(e, scope);
    case ExprKind::call: return eval_call(e, scope);
    case ExprKind::filter: {
      LITHE_ASSIGN(Value input, eval(*e.args[0], scope));
      CallArgs args;
      LITHE_TRY(eval_args(e, 1, scope, args));
      LITHE_TRY(charge(1, e.pos));
      LITHE_TRY(charge_value(input, e.pos));
      return e.filter_fn(*this, input, args, e.pos);
    }
    case ExprKind::test: {
      LITHE_ASSIGN(Value input, eval(*e.args[0], scope));
      CallArgs args;
      LITHE_TRY(eval_args(e, 1, scope, args));
      LITHE_TRY(charge(1, e.pos));
      LITHE_TRY(charge_value(input, e.pos));
      LITHE_ASSIGN(bool r, e.test_fn(*this, input, args, e.pos));
      return Value::boolean(r != e.negated);
    }
    case ExprKind::not_: {
      LITHE_ASSIGN(Value v, eval(*e.args[0], scope));
      return Value::boolean(!v.truthy());
    }
    case ExprKind::neg:
    case ExprKind::pos: {
      LITHE_ASSIGN(Value v, eval(*e.args[0], scope));
      if (v.is_undefined()) return undefined_error(e.pos, v);
      if (!v.is_number()) {
        return runtime_error(e.pos, fmt::format("bad operand type for unary {}: '{}'",
                                                e.kind == ExprKind::neg ? '-' : '+', v.type_name()));
      }
      if (e.kind == ExprKind::pos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::floating(-v.as_double());
      if (v.as_int() == INT64_MIN) return unsupported("integer overflow (beyond 64 bits)", e.pos);
      return Value::integer(-v.as_int());
    }
    case ExprKind::binary: {
      LITHE_ASSIGN(Value a, eval(*e.args[0], scope));
      LITHE_ASSIGN(Value b, eval(*e.args[1], scope));
      LITHE_TRY(charge(1, e.pos));
      return binary_op(*this, e.op, a, b, e.pos);
    }
    case ExprKind::concat: {
      std::string s;
      for (const ExprPtr& a : e.args) {
        LITHE_ASSIGN(Value v, eval(*a, scope));
        const std::string part = v.str();
        LITHE_TRY(check_size(s.size() + part.size(), e.pos));
        s += part;
      }
      return Value::string(std::move(s));
    }
    case ExprKind::compare: return eval_compare(e, scope);
    case ExprKind::and_:
    case ExprKind::or_: {
      LITHE_ASSIGN(Value a, eval(*e.args[0], scope));
      if (a.truthy() == (e.kind == ExprKind::or_)) return a;
      return eval(*e.args[1], scope);
    }
    case ExprKind::cond: {
      LITHE_ASSIGN(Value c, eval(*e.args[0], scope));
      if (c.truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and has no else section");
    }
  }
  return Value();
}

}  // namespace lithe::jinja

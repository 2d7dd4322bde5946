// Python operators on Values: arithmetic, `in`, iteration, slicing, and argument binding.
#include <cmath>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_unicode.h"

namespace lithe::jinja {

Result<std::vector<std::optional<Value>>> bind_args(CallArgs& args, std::initializer_list<std::string_view> params,
                                                    size_t required, std::string_view fname, SrcPos pos) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.pos.size() > params.size()) {
    return runtime_error(
        pos, fmt::format("{}() takes at most {} argument(s) ({} given)", fname, params.size(), args.pos.size()));
  }
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = std::move(args.pos[i]);
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    for (std::string_view p : params) {
      if (p == k) break;
      ++i;
    }
    if (i == params.size()) {
      return runtime_error(pos, fmt::format("{}() got an unexpected keyword argument '{}'", fname, k));
    }
    if (out[i]) return runtime_error(pos, fmt::format("{}() got multiple values for argument '{}'", fname, k));
    out[i] = std::move(v);
  }
  for (size_t i = 0; i < required; ++i) {
    if (!out[i]) {
      return runtime_error(pos, fmt::format("{}() missing required argument '{}'", fname, *(params.begin() + i)));
    }
  }
  return out;
}

namespace {

Status type_error(SrcPos pos, std::string_view op, const Value& a, const Value& b) {
  return runtime_error(
      pos, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

Status overflow(SrcPos pos) { return unsupported("integer overflow (beyond 64 bits)", pos); }

Result<Value> int_pow(int64_t base, int64_t exp, SrcPos pos) {
  if (exp < 0) {
    if (base == 0) return runtime_error(pos, "0 cannot be raised to a negative power");
    return Value::floating(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) != 0 && __builtin_mul_overflow(result, base, &result)) return overflow(pos);
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return overflow(pos);
  }
  return Value::integer(result);
}

Result<Value> repeat(Interpreter& in, const Value& seq, int64_t times, SrcPos pos) {
  const size_t n = times < 0 ? 0 : static_cast<size_t>(times);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (n > 0 && !s.empty()) LITHE_TRY(in.check_size(s.size() > SIZE_MAX / n ? SIZE_MAX : s.size() * n, pos));
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const ListData& l = seq.as_list();
  if (n > 0 && !l.items.empty()) {
    LITHE_TRY(in.check_items(l.items.size() > SIZE_MAX / n ? SIZE_MAX : l.items.size() * n, pos));
  }
  std::vector<Value> out;
  for (size_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.tuple);
}

Result<Value> numeric(BinOp op, const Value& a, const Value& b, SrcPos pos) {
  const bool ints = !a.is_float() && !b.is_float();
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    switch (op) {
      case BinOp::add:
        if (__builtin_add_overflow(x, y, &r)) return overflow(pos);
        return Value::integer(r);
      case BinOp::sub:
        if (__builtin_sub_overflow(x, y, &r)) return overflow(pos);
        return Value::integer(r);
      case BinOp::mul:
        if (__builtin_mul_overflow(x, y, &r)) return overflow(pos);
        return Value::integer(r);
      case BinOp::div:
        if (y == 0) return runtime_error(pos, "division by zero");
        return Value::floating(static_cast<double>(x) / static_cast<double>(y));
      case BinOp::floordiv:
      case BinOp::mod: {
        if (y == 0) return runtime_error(pos, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return overflow(pos);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          q -= 1;
          m += y;
        }
        return Value::integer(op == BinOp::floordiv ? q : m);
      }
      case BinOp::pow: return int_pow(x, y, pos);
    }
  }
  const double x = a.as_double(), y = b.as_double();
  switch (op) {
    case BinOp::add: return Value::floating(x + y);
    case BinOp::sub: return Value::floating(x - y);
    case BinOp::mul: return Value::floating(x * y);
    case BinOp::div:
      if (y == 0) return runtime_error(pos, "float division by zero");
      return Value::floating(x / y);
    case BinOp::floordiv:
    case BinOp::mod: {  // CPython's _float_div_mod
      if (y == 0) return runtime_error(pos, "float floor division or modulo by zero");
      double m = std::fmod(x, y);
      double q = (x - m) / y;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          q -= 1.0;
        }
      } else {
        m = std::copysign(0.0, y);
      }
      if (op == BinOp::mod) return Value::floating(m);
      if (q == 0) return Value::floating(std::copysign(0.0, x / y));
      double f = std::floor(q);
      if (q - f > 0.5) f += 1.0;
      return Value::floating(f);
    }
    case BinOp::pow:
      if (x < 0 && y != std::floor(y)) return unsupported("complex result of '**'", pos);
      if (x == 0 && y < 0) return runtime_error(pos, "0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(x, y));
  }
  return Value();
}

}  // namespace

Result<Value> binary_op(Interpreter& in, BinOp op, const Value& a, const Value& b, SrcPos pos) {
  static constexpr const char* kNames[] = {"+", "-", "*", "/", "//", "%", "**"};
  if (a.is_undefined()) return undefined_error(pos, a);
  if (b.is_undefined()) return undefined_error(pos, b);
  if (a.is_number() && b.is_number()) return numeric(op, a, b, pos);
  if (op == BinOp::add) {
    if (a.is_string() && b.is_string()) {
      LITHE_TRY(in.check_size(a.as_string().size() + b.as_string().size(), pos));
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
      LITHE_TRY(in.check_items(a.as_list().items.size() + b.as_list().items.size(), pos));
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().tuple);
    }
  }
  if (op == BinOp::mul) {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(in, a, b.as_int(), pos);
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(in, b, a.as_int(), pos);
  }
  if (op == BinOp::mod && a.is_string()) return unsupported("'%' string formatting", pos);
  return type_error(pos, kNames[static_cast<int>(op)], a, b);
}

Result<bool> contains(const Value& container, const Value& item, SrcPos pos) {
  switch (container.kind()) {
    case Value::Kind::undefined: return false;
    case Value::Kind::string:
      if (!item.is_string()) {
        return runtime_error(pos,
                             fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::list:
      for (const Value& v : container.as_list().items) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::dict:
      if (item.is_list() && !item.as_list().tuple) return runtime_error(pos, "unhashable type: 'list'");
      if (item.is_dict() || item.is_ns()) {
        return runtime_error(pos, fmt::format("unhashable type: '{}'", item.type_name()));
      }
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default: return runtime_error(pos, fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

Result<std::vector<Value>> iterate(const Value& v, SrcPos pos) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::undefined: return out;
    case Value::Kind::list: return v.as_list().items;
    case Value::Kind::dict:
      out.reserve(v.as_dict().entries.size());
      for (const auto& [k, _] : v.as_dict().entries) out.push_back(Value::string(k));
      return out;
    case Value::Kind::string: {
      std::string buf;
      for (char32_t cp : decode_utf8(v.as_string())) {
        buf.clear();
        append_utf8(buf, cp);
        out.push_back(Value::string(buf));
      }
      return out;
    }
    default: return runtime_error(pos, fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Result<Value> get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step,
                        SrcPos pos) {
  auto as_index = [&](const Value& v, const char* what) -> Result<std::optional<int64_t>> {
    if (v.is_none()) return std::optional<int64_t>();
    if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.as_int());
    return runtime_error(pos, fmt::format("slice {} must be an integer or None, not {}", what, v.type_name()));
  };
  LITHE_ASSIGN(std::optional<int64_t> b, as_index(start, "start"));
  LITHE_ASSIGN(std::optional<int64_t> e, as_index(stop, "stop"));
  LITHE_ASSIGN(std::optional<int64_t> s, as_index(step, "step"));
  const int64_t st = s.value_or(1);
  if (st == 0) return runtime_error(pos, "slice step cannot be zero");
  std::u32string cps;
  if (obj.is_string()) {
    cps = decode_utf8(obj.as_string());
  } else if (!obj.is_list()) {  // jinja2 compiles slices to a plain Python subscript: a TypeError
    return runtime_error(pos, fmt::format("'{}' object cannot be sliced", obj.type_name()));
  }
  const auto len = static_cast<int64_t>(obj.is_string() ? cps.size() : obj.as_list().items.size());
  // Python's slice.indices()
  auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t v = *x;
    if (v < 0) return std::max<int64_t>(v + len, st < 0 ? -1 : 0);
    if (v >= len) return st < 0 ? len - 1 : len;
    return v;
  };
  const int64_t lo = clamp(b, st < 0 ? len - 1 : 0);
  const int64_t hi = clamp(e, st < 0 ? -1 : len);
  std::vector<int64_t> idx;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(i);
  LITHE_TRY(in.check_items(idx.size(), pos));
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(cps[static_cast<size_t>(i)]);
    return Value::string(encode_utf8(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(obj.as_list().items[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.as_list().tuple);
}

}  // namespace lithe::jinja

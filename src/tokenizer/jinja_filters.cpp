// jinja2's built-in filters and tests that chat templates use, with HF's tojson override.
// A filter or test missing here is reported as unsupported when the template is parsed.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_unicode.h"

namespace lithe::jinja {

namespace {

Value str_value(std::string s) { return Value::string(std::move(s)); }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Result<Value> attr_path(const Value& item, const std::string& path, SrcPos pos) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_undefined()) return undefined_error(pos, v);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value::integer(std::strtoll(part.c_str(), nullptr, 10)))
               : get_item(v, Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// ---- string filters ----

Result<Value> f_trim(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"chars"}, 0, "trim", pos));
  if (a[0] && !a[0]->is_none() && !a[0]->is_string()) return runtime_error(pos, "trim chars must be a string");
  const std::string* chars = a[0] && a[0]->is_string() ? &a[0]->as_string() : nullptr;
  return str_value(py_strip(in.str(), chars, true, true));
}

template <std::string (*F)(std::string_view)>
Result<Value> f_case(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "filter", pos).status());
  return str_value(F(in.str()));
}

Result<Value> f_title(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "title", pos).status());
  // jinja2 splits on runs of [-\s({\[<] and upper-cases the first character of each piece.
  std::string out;
  bool word_start = true;
  for (char32_t cp : decode_utf8(in.str())) {
    const bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_py_space(cp);
    std::string one;
    append_utf8(one, cp);
    out += sep ? one : word_start ? py_upper(one) : py_lower(one);
    word_start = sep;
  }
  return str_value(std::move(out));
}

Result<Value> f_replace(Interpreter& interp, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"old", "new", "count"}, 2, "replace", pos));
  int64_t count = -1;
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_int()) return runtime_error(pos, "replace count must be an integer");
    count = a[2]->as_int();
  }
  return str_replace(interp, in.str(), a[0]->str(), a[1]->str(), count, pos);
}

Result<Value> f_string(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "string", pos).status());
  return str_value(in.str());
}

Result<Value> f_escape(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "escape", pos).status());
  std::string out;
  for (char c : in.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return str_value(std::move(out));
}

Result<Value> f_indent(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"width", "first", "blank"}, 0, "indent", pos));
  std::string ind = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      ind = a[0]->as_string();
    } else if (a[0]->is_int()) {
      ind = std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(a[0]->as_int(), 4096))), ' ');
    } else {
      return runtime_error(pos, "indent width must be an integer or a string");
    }
  }
  if (in.is_undefined()) return undefined_error(pos, in);
  if (!in.is_string()) return runtime_error(pos, fmt::format("indent: expected a string, not {}", in.type_name()));
  const bool first = a[1] && a[1]->truthy();
  const bool blank = a[2] && a[2]->truthy();
  std::vector<std::string> lines;
  const std::string s = in.str() + "\n";
  for (size_t start = 0; start < s.size();) {  // str.splitlines() on \n-terminated text
    const size_t nl = s.find('\n', start);
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if ((i > 0 || first) && (blank || !lines[i].empty())) out += ind;
    out += lines[i];
  }
  return str_value(std::move(out));
}

// ---- sequence filters ----

Result<Value> f_length(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "length", pos).status());
  switch (in.kind()) {
    case Value::Kind::undefined: return Value::integer(0);
    case Value::Kind::string: return Value::integer(static_cast<int64_t>(utf8_length(in.as_string())));
    case Value::Kind::list: return Value::integer(static_cast<int64_t>(in.as_list().items.size()));
    case Value::Kind::dict: return Value::integer(static_cast<int64_t>(in.as_dict().entries.size()));
    default: return runtime_error(pos, fmt::format("object of type '{}' has no len()", in.type_name()));
  }
}

Result<Value> f_default(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"default_value", "boolean"}, 0, "default", pos));
  const bool boolean = a[1] && a[1]->truthy();
  if (in.is_undefined() || (boolean && !in.truthy())) return a[0] ? *a[0] : str_value("");
  return in;
}

Result<Value> f_join(Interpreter& interp, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"d", "attribute"}, 0, "join", pos));
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  const std::string sep = a[0] ? a[0]->str() : "";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    if (a[1] && !a[1]->is_none()) {
      LITHE_ASSIGN(Value v, attr_path(items[i], a[1]->str(), pos));
      out += v.str();
    } else {
      out += items[i].str();
    }
    LITHE_TRY(interp.check_size(out.size(), pos));
  }
  return str_value(std::move(out));
}

Result<Value> f_list(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "list", pos).status());
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  return Value::list(std::move(items));
}

template <bool Last>
Result<Value> f_first_last(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, Last ? "last" : "first", pos).status());
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  if (items.empty()) {
    return Value::undefined(Last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
  }
  return Last ? items.back() : items.front();
}

Result<Value> f_reverse(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "reverse", pos).status());
  if (in.is_string()) {
    std::u32string cps = decode_utf8(in.as_string());
    std::reverse(cps.begin(), cps.end());
    return str_value(encode_utf8(cps));
  }
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Result<Value> f_items(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "items", pos).status());
  if (in.is_undefined()) return Value::list({});
  if (!in.is_dict()) return runtime_error(pos, "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, v] : in.as_dict().entries) out.push_back(Value::list({Value::string(k), v}, true));
  return Value::list(std::move(out));
}

// Sort key of jinja2's sort/unique/dictsort: the attribute, lower-cased unless case_sensitive.
Result<Value> sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive, SrcPos pos) {
  Value v = item;
  if (attribute && !attribute->is_none()) {
    LITHE_ASSIGN(v, attr_path(item, attribute->str(), pos));
  }
  if (!case_sensitive && v.is_string()) return str_value(py_lower(v.as_string()));
  return v;
}

Result<std::vector<Value>> sorted(std::vector<Value> items, std::vector<Value> keys, bool reverse, SrcPos pos) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status err;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const std::optional<int> c = reverse ? py_compare(keys[y], keys[x]) : py_compare(keys[x], keys[y]);
    if (!c && err.is_ok()) {
      err = runtime_error(pos, fmt::format("'<' not supported between instances of '{}' and '{}'", keys[x].type_name(),
                                           keys[y].type_name()));
    }
    return c && *c < 0;
  });
  LITHE_TRY(err);
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

Result<Value> f_sort(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"reverse", "case_sensitive", "attribute"}, 0, "sort", pos));
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  std::vector<Value> keys;
  for (const Value& v : items) {
    LITHE_ASSIGN(Value k, sort_key(v, a[2], a[1] && a[1]->truthy(), pos));
    keys.push_back(std::move(k));
  }
  LITHE_ASSIGN(std::vector<Value> out, sorted(std::move(items), std::move(keys), a[0] && a[0]->truthy(), pos));
  return Value::list(std::move(out));
}

Result<Value> f_dictsort(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"case_sensitive", "by", "reverse"}, 0, "dictsort", pos));
  if (!in.is_dict()) return runtime_error(pos, "dictsort: value is not a dict");
  const std::string by = a[1] ? a[1]->str() : "key";
  if (by != "key" && by != "value") return runtime_error(pos, "You can only sort by either 'key' or 'value'");
  std::vector<Value> items, keys;
  for (const auto& [k, v] : in.as_dict().entries) {
    items.push_back(Value::list({Value::string(k), v}, true));
    LITHE_ASSIGN(Value key, sort_key(by == "key" ? Value::string(k) : v, std::nullopt, a[0] && a[0]->truthy(), pos));
    keys.push_back(std::move(key));
  }
  LITHE_ASSIGN(std::vector<Value> out, sorted(std::move(items), std::move(keys), a[2] && a[2]->truthy(), pos));
  return Value::list(std::move(out));
}

Result<Value> f_unique(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"case_sensitive", "attribute"}, 0, "unique", pos));
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  std::vector<Value> out, seen;
  for (Value& v : items) {
    LITHE_ASSIGN(Value k, sort_key(v, a[1], a[0] && a[0]->truthy(), pos));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); })) continue;
    seen.push_back(std::move(k));
    out.push_back(std::move(v));
  }
  return Value::list(std::move(out));
}

Result<bool> run_test(Interpreter& interp, const std::string& name, const Value& v, const std::vector<Value>& extra,
                      SrcPos pos) {
  TestFn t = find_test(name);
  if (t == nullptr) return unsupported(fmt::format("test '{}'", name), pos);
  CallArgs a;
  a.pos = extra;
  return t(interp, v, a, pos);
}

// select/reject(test, args...) and selectattr/rejectattr(attr, test, args...).
template <bool Select, bool Attr>
Result<Value> f_select(Interpreter& interp, const Value& in, CallArgs& args, SrcPos pos) {
  if (!args.kw.empty()) return unsupported("keyword arguments to select/reject filters", pos);
  std::vector<Value> rest = args.pos;
  std::optional<std::string> attr;
  if (Attr) {
    if (rest.empty()) return runtime_error(pos, "Missing parameter for attribute name");
    attr = rest.front().str();
    rest.erase(rest.begin());
  }
  std::optional<std::string> test;
  if (!rest.empty()) {
    test = rest.front().str();
    rest.erase(rest.begin());
  }
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  std::vector<Value> out;
  for (Value& item : items) {
    Value v = item;
    if (attr) {
      LITHE_ASSIGN(v, attr_path(item, *attr, pos));
    }
    bool ok = v.truthy();
    if (test) {
      LITHE_ASSIGN(ok, run_test(interp, *test, v, rest, pos));
    }
    if (ok == Select) out.push_back(std::move(item));
  }
  return Value::list(std::move(out));
}

Result<Value> f_map(Interpreter& interp, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(std::vector<Value> items, iterate(in, pos));
  std::vector<Value> out;
  if (args.pos.empty()) {
    LITHE_ASSIGN(auto a, bind_args(args, {"attribute", "default"}, 1, "map", pos));
    const std::string path = a[0]->str();
    for (const Value& item : items) {
      LITHE_ASSIGN(Value v, attr_path(item, path, pos));
      if (v.is_undefined() && a[1]) v = *a[1];
      out.push_back(std::move(v));
    }
    return Value::list(std::move(out));
  }
  const std::string name = args.pos.front().str();
  FilterFn f = find_filter(name);
  if (f == nullptr) return unsupported(fmt::format("filter '{}'", name), pos);
  for (const Value& item : items) {
    CallArgs sub;
    sub.pos.assign(args.pos.begin() + 1, args.pos.end());
    sub.kw = args.kw;
    LITHE_ASSIGN(Value v, f(interp, item, sub, pos));
    out.push_back(std::move(v));
  }
  return Value::list(std::move(out));
}

// ---- numbers ----

std::optional<double> parse_py_float(std::string s) {
  s = py_strip(s, nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

Result<Value> f_int(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"default", "base"}, 0, "int", pos));
  const Value dflt = a[0] ? *a[0] : Value::integer(0);
  if (in.is_undefined()) return undefined_error(pos, in);  // Undefined.__int__ raises
  if (a[1] && !(a[1]->is_int() && a[1]->as_int() == 10)) {
    return unsupported("int filter with a base other than 10", pos);
  }
  if (in.is_bool() || in.is_int()) return Value::integer(in.as_int());
  std::optional<double> d;
  if (in.is_float()) d = in.as_double();
  if (in.is_string()) {
    std::string s = py_strip(in.as_string(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isdigit(static_cast<unsigned char>(s.back()))) {
      return Value::integer(v);
    }
    d = parse_py_float(in.as_string());
  }
  if (!d || !std::isfinite(*d) || std::fabs(*d) >= 9.2e18) return dflt;
  return Value::integer(static_cast<int64_t>(*d));
}

Result<Value> f_float(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"default"}, 0, "float", pos));
  if (in.is_undefined()) return undefined_error(pos, in);
  if (in.is_number()) return Value::floating(in.as_double());
  if (in.is_string()) {
    if (auto d = parse_py_float(in.as_string())) return Value::floating(*d);
  }
  return a[0] ? *a[0] : Value::floating(0.0);
}

Result<Value> f_abs(Interpreter&, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "abs", pos).status());
  if (in.is_float()) return Value::floating(std::fabs(in.as_double()));
  if (in.is_int() || in.is_bool()) {
    if (in.as_int() == INT64_MIN) return unsupported("integer overflow (beyond 64 bits)", pos);
    return Value::integer(in.as_int() < 0 ? -in.as_int() : in.as_int());
  }
  return runtime_error(pos, fmt::format("bad operand type for abs(): '{}'", in.type_name()));
}

// HF's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Result<Value> f_tojson(Interpreter& interp, const Value& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, 0, "tojson", pos));
  JsonFormat f;
  f.ensure_ascii = a[0] && a[0]->truthy();
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      f.indent = a[1]->as_string();
    } else if (a[1]->is_int()) {
      f.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1]->as_int(), 0, 4096)), ' ');
    } else {
      return runtime_error(pos, "tojson indent must be an integer or a string");
    }
    f.item_separator.assign(1, ',');  // (not = ",": GCC 12 -Wrestrict false positive)
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_list() || a[2]->as_list().items.size() != 2 || !a[2]->as_list().items[0].is_string() ||
        !a[2]->as_list().items[1].is_string()) {
      return runtime_error(pos, "tojson separators must be a pair of strings");
    }
    f.item_separator = a[2]->as_list().items[0].as_string();
    f.key_separator = a[2]->as_list().items[1].as_string();
  }
  f.sort_keys = a[3] && a[3]->truthy();
  LITHE_ASSIGN(std::string s, py_json_dumps(in, f, pos));
  LITHE_TRY(interp.check_size(s.size(), pos));
  return str_value(std::move(s));
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"capitalize", f_case<py_capitalize>},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first_last<false>},
    {"float", f_float},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_first_last<true>},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_case<py_lower>},
    {"map", f_map},
    {"reject", f_select<false, false>},
    {"rejectattr", f_select<false, true>},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"safe", f_string},
    {"select", f_select<true, false>},
    {"selectattr", f_select<true, true>},
    {"sort", f_sort},
    {"string", f_string},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_case<py_upper>},
};

// ---- tests ----

template <bool (*P)(const Value&)>
Result<bool> t_pred(Interpreter&, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "test", pos).status());
  return P(v);
}

bool p_defined(const Value& v) { return !v.is_undefined(); }
bool p_undefined(const Value& v) { return v.is_undefined(); }
bool p_none(const Value& v) { return v.is_none(); }
bool p_boolean(const Value& v) { return v.is_bool(); }
bool p_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool p_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool p_integer(const Value& v) { return v.is_int(); }
bool p_float(const Value& v) { return v.is_float(); }
bool p_number(const Value& v) { return v.is_number(); }
bool p_string(const Value& v) { return v.is_string(); }
bool p_mapping(const Value& v) { return v.is_dict(); }
// Undefined iterates (as empty) and has __len__/__getitem__, so jinja2 calls it both.
bool p_iterable(const Value& v) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
bool p_callable(const Value& v) { return v.is_callable() || v.is_undefined(); }
bool p_lower(const Value& v) {
  const std::string s = v.str();
  return py_lower(s) == s && py_upper(s) != s;
}
bool p_upper(const Value& v) {
  const std::string s = v.str();
  return py_upper(s) == s && py_lower(s) != s;
}

template <int Rem>
Result<bool> t_parity(Interpreter& interp, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, Rem == 1 ? "odd" : "even", pos).status());
  LITHE_ASSIGN(Value r, binary_op(interp, BinOp::mod, v, Value::integer(2), pos));
  return py_equal(r, Value::integer(Rem));
}

Result<bool> t_divisibleby(Interpreter& interp, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"num"}, 1, "divisibleby", pos));
  LITHE_ASSIGN(Value r, binary_op(interp, BinOp::mod, v, *a[0], pos));
  return py_equal(r, Value::integer(0));
}

template <CmpOp Op>
Result<bool> t_compare(Interpreter&, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"other"}, 1, "comparison test", pos));
  if (Op == CmpOp::eq) return py_equal(v, *a[0]);
  if (Op == CmpOp::ne) return !py_equal(v, *a[0]);
  const std::optional<int> c = py_compare(v, *a[0]);
  if (!c) {
    return runtime_error(pos, fmt::format("comparison not supported between instances of '{}' and '{}'", v.type_name(),
                                          a[0]->type_name()));
  }
  return Op == CmpOp::lt ? *c < 0 : Op == CmpOp::le ? *c <= 0 : Op == CmpOp::gt ? *c > 0 : *c >= 0;
}

Result<bool> t_in(Interpreter&, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"seq"}, 1, "in", pos));
  return contains(*a[0], v, pos);
}

Result<bool> t_sameas(Interpreter&, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"other"}, 1, "sameas", pos));
  if (v.is_none() || a[0]->is_none()) return v.is_none() && a[0]->is_none();
  if (v.is_bool() || a[0]->is_bool()) return v.is_bool() && a[0]->is_bool() && v.as_bool() == a[0]->as_bool();
  return v.same_object(*a[0]);
}

Result<bool> t_filter(Interpreter&, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "filter", pos).status());
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

Result<bool> t_test(Interpreter&, const Value& v, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "test", pos).status());
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", t_compare<CmpOp::ne>},
    {"<", t_compare<CmpOp::lt>},
    {"<=", t_compare<CmpOp::le>},
    {"==", t_compare<CmpOp::eq>},
    {">", t_compare<CmpOp::gt>},
    {">=", t_compare<CmpOp::ge>},
    {"boolean", t_pred<p_boolean>},
    {"callable", t_pred<p_callable>},
    {"defined", t_pred<p_defined>},
    {"divisibleby", t_divisibleby},
    {"eq", t_compare<CmpOp::eq>},
    {"equalto", t_compare<CmpOp::eq>},
    {"even", t_parity<0>},
    {"false", t_pred<p_false>},
    {"filter", t_filter},
    {"float", t_pred<p_float>},
    {"ge", t_compare<CmpOp::ge>},
    {"greaterthan", t_compare<CmpOp::gt>},
    {"gt", t_compare<CmpOp::gt>},
    {"in", t_in},
    {"integer", t_pred<p_integer>},
    {"iterable", t_pred<p_iterable>},
    {"le", t_compare<CmpOp::le>},
    {"lessthan", t_compare<CmpOp::lt>},
    {"lower", t_pred<p_lower>},
    {"lt", t_compare<CmpOp::lt>},
    {"mapping", t_pred<p_mapping>},
    {"ne", t_compare<CmpOp::ne>},
    {"none", t_pred<p_none>},
    {"number", t_pred<p_number>},
    {"odd", t_parity<1>},
    {"sameas", t_sameas},
    {"sequence", t_pred<p_iterable>},
    {"string", t_pred<p_string>},
    {"test", t_test},
    {"true", t_pred<p_true>},
    {"undefined", t_pred<p_undefined>},
    {"upper", t_pred<p_upper>},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const TestEntry& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace lithe::jinja

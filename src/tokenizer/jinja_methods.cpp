// Attribute and item access, Python str/dict methods, and the globals HF gives chat templates.
#include <algorithm>
#include <ctime>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_unicode.h"

namespace lithe::jinja {

namespace {

using Method = Result<Value> (*)(Interpreter&, const Value& self, CallArgs& args, SrcPos pos);

Value bind(const Value& self, std::string name, Method m) {
  return Value::callable(std::move(name), [self, m](Interpreter& in, CallArgs& args, SrcPos pos) -> Result<Value> {
    LITHE_TRY(in.charge_value(self, pos));
    return m(in, self, args, pos);
  });
}

Result<const std::string*> opt_string(const std::optional<Value>& v, std::string_view what, SrcPos pos) {
  if (!v || v->is_none()) return static_cast<const std::string*>(nullptr);
  if (!v->is_string()) return runtime_error(pos, fmt::format("{} must be str or None, not {}", what, v->type_name()));
  return &v->as_string();
}

template <bool Left, bool Right>
Result<Value> m_strip(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"chars"}, 0, "strip", pos));
  LITHE_ASSIGN(const std::string* chars, opt_string(a[0], "strip arg", pos));
  return Value::string(py_strip(self.as_string(), chars, Left, Right));
}

template <std::string (*F)(std::string_view)>
Result<Value> m_case(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "str method", pos).status());
  return Value::string(F(self.as_string()));
}

// str.split / str.rsplit, with Python's whitespace rules when sep is None.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    std::u32string cps = decode_utf8(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    size_t i = 0;
    const size_t n = cps.size();
    while (true) {
      while (i < n && is_py_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {  // the rest, as it is
        out.push_back(encode_utf8(std::u32string_view(cps).substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !is_py_space(cps[j])) ++j;
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    if (from_right) {
      std::reverse(out.begin(), out.end());
      for (std::string& part : out) {
        std::u32string c = decode_utf8(part);
        std::reverse(c.begin(), c.end());
        part = encode_utf8(c);
      }
    }
    return out;
  }
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string::npos) break;
      out.push_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string::npos) break;
    out.push_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

template <bool FromRight>
Result<Value> m_split(Interpreter& in, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"sep", "maxsplit"}, 0, FromRight ? "rsplit" : "split", pos));
  LITHE_ASSIGN(const std::string* sep, opt_string(a[0], "sep", pos));
  if (sep != nullptr && sep->empty()) return runtime_error(pos, "empty separator");
  int64_t maxsplit = -1;
  if (a[1]) {
    if (!a[1]->is_int()) return runtime_error(pos, "maxsplit must be an integer");
    maxsplit = a[1]->as_int();
  }
  std::vector<Value> items;
  for (std::string& part : py_split(self.as_string(), sep, maxsplit, FromRight))
    items.push_back(Value::string(std::move(part)));
  LITHE_TRY(in.check_items(items.size(), pos));
  return Value::list(std::move(items));
}

Result<Value> m_splitlines(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"keepends"}, 0, "splitlines", pos));
  const bool keep = a[0] && a[0]->truthy();
  std::vector<Value> items;
  const std::u32string cps = decode_utf8(self.as_string());
  size_t i = 0, start = 0;
  while (i < cps.size()) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + ((c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1);
    items.push_back(Value::string(encode_utf8(std::u32string_view(cps).substr(start, (keep ? eol : i) - start))));
    start = i = eol;
  }
  if (start < cps.size()) items.push_back(Value::string(encode_utf8(std::u32string_view(cps).substr(start))));
  return Value::list(std::move(items));
}

template <bool Ends>
Result<Value> m_affix(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  const char* name = Ends ? "endswith" : "startswith";
  LITHE_ASSIGN(auto a, bind_args(args, {"prefix", "start", "end"}, 1, name, pos));
  if (a[1] || a[2]) return unsupported(fmt::format("str.{}() with start/end", name), pos);
  const std::string& s = self.as_string();
  auto test = [&](const Value& p) -> Result<bool> {
    if (!p.is_string()) return runtime_error(pos, fmt::format("{} first arg must be str or a tuple of str", name));
    const std::string& x = p.as_string();
    return x.size() <= s.size() &&
           (Ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0);
  };
  if (a[0]->is_list() && a[0]->as_list().tuple) {
    for (const Value& p : a[0]->as_list().items) {
      LITHE_ASSIGN(bool hit, test(p));
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  LITHE_ASSIGN(bool hit, test(*a[0]));
  return Value::boolean(hit);
}

template <bool Suffix>
Result<Value> m_remove_affix(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"affix"}, 1, Suffix ? "removesuffix" : "removeprefix", pos));
  if (!a[0]->is_string()) return runtime_error(pos, "argument must be str");
  const std::string& s = self.as_string();
  const std::string& x = a[0]->as_string();
  if (x.size() > s.size()) return self;
  if (Suffix) {
    return s.compare(s.size() - x.size(), x.size(), x) == 0 ? Value::string(s.substr(0, s.size() - x.size())) : self;
  }
  return s.compare(0, x.size(), x) == 0 ? Value::string(s.substr(x.size())) : self;
}

}  // namespace

// Shared with the replace filter: str.replace(old, new, count).
Result<Value> str_replace(Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                          int64_t count, SrcPos pos) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every code point
    const std::u32string cps = decode_utf8(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
      LITHE_TRY(in.check_size(out.size(), pos));
    }
    return Value::string(std::move(out));
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++done;
    LITHE_TRY(in.check_size(out.size(), pos));
  }
  out.append(s, start);
  return Value::string(std::move(out));
}

namespace {

Result<Value> m_replace(Interpreter& in, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"old", "new", "count"}, 2, "replace", pos));
  if (!a[0]->is_string() || !a[1]->is_string()) return runtime_error(pos, "replace() arguments must be str");
  int64_t count = -1;
  if (a[2]) {
    if (!a[2]->is_int()) return runtime_error(pos, "replace() count must be an integer");
    count = a[2]->as_int();
  }
  return str_replace(in, self.as_string(), a[0]->as_string(), a[1]->as_string(), count, pos);
}

template <bool FromRight>
Result<Value> m_find(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"sub"}, 1, FromRight ? "rfind" : "find", pos));
  if (!a[0]->is_string()) return runtime_error(pos, "find() argument must be str");
  const std::string& s = self.as_string();
  const size_t at = FromRight ? s.rfind(a[0]->as_string()) : s.find(a[0]->as_string());
  if (at == std::string::npos) return Value::integer(-1);
  return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, at))));
}

Result<Value> m_count(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"sub"}, 1, "count", pos));
  if (!a[0]->is_string()) return runtime_error(pos, "count() argument must be str");
  const std::string& s = self.as_string();
  const std::string& sub = a[0]->as_string();
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return Value::integer(n);
}

Result<Value> m_join(Interpreter& in, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"iterable"}, 1, "join", pos));
  LITHE_ASSIGN(std::vector<Value> items, iterate(*a[0], pos));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return runtime_error(pos,
                           fmt::format("sequence item {}: expected str instance, {} found", i, items[i].type_name()));
    }
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
    LITHE_TRY(in.check_size(out.size(), pos));
  }
  return Value::string(std::move(out));
}

Result<Value> m_items(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "items", pos).status());
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries) out.push_back(Value::list({Value::string(k), v}, true));
  return Value::list(std::move(out));
}

Result<Value> m_keys(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "keys", pos).status());
  std::vector<Value> out;
  for (const auto& [k, _] : self.as_dict().entries) out.push_back(Value::string(k));
  return Value::list(std::move(out));
}

Result<Value> m_values(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_TRY(bind_args(args, {}, 0, "values", pos).status());
  std::vector<Value> out;
  for (const auto& [_, v] : self.as_dict().entries) out.push_back(v);
  return Value::list(std::move(out));
}

Result<Value> m_get(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"key", "default"}, 1, "get", pos));
  if (a[0]->is_string()) {
    const Value* v = self.as_dict().find(a[0]->as_string());
    if (v != nullptr) return *v;
  }
  return a[1] ? *a[1] : Value::none();
}

Result<Value> m_list_count(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"value"}, 1, "count", pos));
  int64_t n = 0;
  for (const Value& v : self.as_list().items) n += py_equal(v, *a[0]) ? 1 : 0;
  return Value::integer(n);
}

Result<Value> m_list_index(Interpreter&, const Value& self, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"value"}, 1, "index", pos));
  const auto& items = self.as_list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (py_equal(items[i], *a[0])) return Value::integer(static_cast<int64_t>(i));
  }
  return runtime_error(pos, fmt::format("{} is not in list", a[0]->repr()));
}

struct MethodEntry {
  std::string_view name;
  Method fn;
};

constexpr MethodEntry kStrMethods[] = {
    {"strip", m_strip<true, true>},
    {"lstrip", m_strip<true, false>},
    {"rstrip", m_strip<false, true>},
    {"split", m_split<false>},
    {"rsplit", m_split<true>},
    {"splitlines", m_splitlines},
    {"startswith", m_affix<false>},
    {"endswith", m_affix<true>},
    {"removeprefix", m_remove_affix<false>},
    {"removesuffix", m_remove_affix<true>},
    {"upper", m_case<py_upper>},
    {"lower", m_case<py_lower>},
    {"title", m_case<py_title>},
    {"capitalize", m_case<py_capitalize>},
    {"replace", m_replace},
    {"find", m_find<false>},
    {"rfind", m_find<true>},
    {"count", m_count},
    {"join", m_join},
};

constexpr MethodEntry kListMethods[] = {{"count", m_list_count}, {"index", m_list_index}};

constexpr MethodEntry kDictMethods[] = {
    {"items", m_items},
    {"keys", m_keys},
    {"values", m_values},
    {"get", m_get},
};

// Python methods lithe does not implement: calling one is "unsupported", not "undefined".
constexpr std::string_view kOtherStrMethods[] = {
    "casefold",  "center",      "encode",  "expandtabs", "format",   "format_map",   "index",
    "isalnum",   "isalpha",     "isascii", "isdecimal",  "isdigit",  "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle",    "isupper",  "ljust",        "maketrans",
    "partition", "rindex",      "rjust",   "rpartition", "swapcase", "translate",    "zfill"};
constexpr std::string_view kOtherDictMethods[] = {"copy", "fromkeys"};
constexpr std::string_view kOtherListMethods[] = {"copy"};
// Mutating methods: jinja2's ImmutableSandboxedEnvironment makes them undefined.
constexpr std::string_view kUnsafeDictMethods[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kUnsafeListMethods[] = {"append", "clear",  "extend",  "insert",
                                                   "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

template <size_t N>
std::optional<Value> find_method(const MethodEntry (&table)[N], const Value& self, const std::string& name) {
  for (const MethodEntry& m : table) {
    if (m.name == name) return bind(self, name, m.fn);
  }
  return std::nullopt;
}

Value unsupported_method(const Value& self, const std::string& name) {
  const std::string what = self.type_name() + "." + name + "()";
  return Value::callable(
      what, [what](Interpreter&, CallArgs&, SrcPos pos) -> Result<Value> { return unsupported(what, pos); });
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::string:
      if (auto m = find_method(kStrMethods, obj, name)) return *m;
      if (listed(kOtherStrMethods, name)) return unsupported_method(obj, name);
      return no_attribute(obj, name);
    case Value::Kind::dict: {
      if (auto m = find_method(kDictMethods, obj, name)) return *m;
      if (listed(kOtherDictMethods, name)) return unsupported_method(obj, name);
      if (listed(kUnsafeDictMethods, name)) {
        return Value::undefined(fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name));
      }
      const Value* v = obj.as_dict().find(name);
      return v != nullptr ? *v : no_attribute(obj, name);
    }
    case Value::Kind::list:
      if (auto m = find_method(kListMethods, obj, name)) return *m;
      if (listed(kOtherListMethods, name)) return unsupported_method(obj, name);
      if (listed(kUnsafeListMethods, name)) {
        return Value::undefined(
            fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
      }
      return no_attribute(obj, name);
    case Value::Kind::ns: {
      const Value* v = obj.as_ns().find(name);
      return v != nullptr ? *v : no_attribute(obj, name);
    }
    default: return no_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if ((key.is_int() || key.is_bool()) && (obj.is_list() || obj.is_string())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      const auto n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      const std::u32string cps = decode_utf8(obj.as_string());
      const auto n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        return Value::string(encode_utf8(std::u32string_view(cps).substr(static_cast<size_t>(i), 1)));
      }
    }
    return Value::undefined(fmt::format("'{} object' has no element {}", obj.type_name(), key.as_int()));
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      const Value* v = obj.as_dict().find(key.as_string());
      if (v != nullptr) return *v;
    }
    return get_attr(obj, key.as_string());  // jinja2: item first, then attribute
  }
  return Value::undefined(fmt::format("'{} object' has no element {}", obj.type_name(), key.repr()));
}

namespace {

Result<Value> g_raise_exception(Interpreter&, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"message"}, 1, "raise_exception", pos));
  return error(StatusCode::invalid_argument, "chat template raised an exception at line {}: {}", pos.line, a[0]->str());
}

Result<Value> g_range(Interpreter& in, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"start", "stop", "step"}, 1, "range", pos));
  for (const auto& v : a) {
    if (v && !v->is_int() && !v->is_bool()) {
      return runtime_error(pos, fmt::format("'{}' object cannot be interpreted as an integer", v->type_name()));
    }
  }
  int64_t start = 0, stop = a[0]->as_int(), step = 1;
  if (a[1]) {
    start = a[0]->as_int();
    stop = a[1]->as_int();
  }
  if (a[2]) step = a[2]->as_int();
  if (step == 0) return runtime_error(pos, "range() arg 3 must not be zero");
  constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses longer ranges
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      return runtime_error(pos, "range too big: the sandbox allows at most 100000 items");
    }
    items.push_back(Value::integer(i));
  }
  LITHE_TRY(in.charge(items.size(), pos));
  return Value::list(std::move(items));
}

Result<Value> kwargs_entries(CallArgs& args, std::string_view fname, SrcPos pos, Entries* out) {
  if (args.pos.size() > 1) return runtime_error(pos, fmt::format("{}() takes at most 1 positional argument", fname));
  if (args.pos.size() == 1) {
    if (!args.pos[0].is_dict()) return unsupported(fmt::format("{}() from a {}", fname, args.pos[0].type_name()), pos);
    *out = args.pos[0].as_dict().entries;
  }
  for (auto& [k, v] : args.kw) {
    auto it = std::find_if(out->begin(), out->end(), [&](const auto& e) { return e.first == k; });
    if (it != out->end()) {
      it->second = std::move(v);
    } else {
      out->emplace_back(k, std::move(v));
    }
  }
  return Value::none();
}

Result<Value> g_namespace(Interpreter& in, CallArgs& args, SrcPos pos) {
  Entries e;
  LITHE_TRY(kwargs_entries(args, "namespace", pos, &e).status());
  Value ns = Value::ns(std::move(e));
  in.track_namespace(ns);
  return ns;
}

Result<Value> g_dict(Interpreter&, CallArgs& args, SrcPos pos) {
  Entries e;
  LITHE_TRY(kwargs_entries(args, "dict", pos, &e).status());
  return Value::dict(std::move(e));
}

Result<Value> g_strftime_now(Interpreter&, CallArgs& args, SrcPos pos) {
  LITHE_ASSIGN(auto a, bind_args(args, {"format"}, 1, "strftime_now", pos));
  if (!a[0]->is_string()) return runtime_error(pos, "strftime_now() format must be str");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, a[0]->as_string().c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

Entries make_globals() {
  Entries g;
  g.emplace_back("raise_exception", Value::callable("raise_exception", g_raise_exception));
  g.emplace_back("range", Value::callable("range", g_range));
  g.emplace_back("namespace", Value::callable("namespace", g_namespace));
  g.emplace_back("dict", Value::callable("dict", g_dict));
  g.emplace_back("strftime_now", Value::callable("strftime_now", g_strftime_now));
  for (const char* name : {"lipsum", "cycler", "joiner"}) {
    g.emplace_back(name, Value::callable(name, [name](Interpreter&, CallArgs&, SrcPos pos) -> Result<Value> {
                     return unsupported(fmt::format("{}()", name), pos);
                   }));
  }
  return g;
}

}  // namespace lithe::jinja

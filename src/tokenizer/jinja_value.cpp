#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja_unicode.h"

namespace lithe::jinja {

namespace {

// Destroying a deeply nested value would recurse once per level; instead, a container destroyed
// while another is being destroyed hands its children to this list, which the outermost drains.
struct DeferredFree {
  int active = 0;
  std::vector<Value> pending;
};
thread_local DeferredFree t_free;

void free_values(std::vector<Value>&& values) {
  if (t_free.active > 0) {
    for (Value& v : values) t_free.pending.push_back(std::move(v));
    values.clear();
    return;
  }
  ++t_free.active;
  values.clear();
  while (!t_free.pending.empty()) {
    std::vector<Value> batch;
    batch.swap(t_free.pending);
    batch.clear();  // may defer the next level into t_free.pending
  }
  --t_free.active;
}

void free_entries(Entries&& entries) {
  std::vector<Value> values;
  values.reserve(entries.size());
  for (auto& e : entries) values.push_back(std::move(e.second));
  entries.clear();
  free_values(std::move(values));
}

}  // namespace

ListData::~ListData() { free_values(std::move(items)); }
DictData::~DictData() { free_entries(std::move(entries)); }
NamespaceData::~NamespaceData() { free_entries(std::move(entries)); }

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value* NamespaceData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void NamespaceData::set(const std::string& key, Value v) {
  for (auto& [k, old] : entries) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  entries.emplace_back(key, std::move(v));
}

Value Value::undefined(std::string hint) { return Value(Undef{std::make_shared<const std::string>(std::move(hint))}); }

Value Value::list(std::vector<Value> items, bool tuple) {
  return Value(std::make_shared<const ListData>(ListData{std::move(items), tuple}));
}

Value Value::dict(Entries entries) { return Value(std::make_shared<const DictData>(DictData{std::move(entries)})); }

Value Value::ns(Entries entries) { return Value(std::make_shared<NamespaceData>(NamespaceData{std::move(entries)})); }

Value Value::callable(std::string name, std::function<Result<Value>(Interpreter&, CallArgs&, SrcPos)> fn) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)}));
}

int64_t Value::as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }

double Value::as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }

std::string Value::undefined_hint() const {
  const auto& h = std::get<Undef>(v_).hint;
  return h ? *h : std::string("value is undefined");
}

bool Value::same_object(const Value& o) const {
  if (kind() != o.kind()) return false;
  switch (kind()) {
    case Kind::list: return std::get<ListPtr>(v_) == std::get<ListPtr>(o.v_);
    case Kind::dict: return std::get<DictPtr>(v_) == std::get<DictPtr>(o.v_);
    case Kind::ns: return std::get<NsPtr>(v_) == std::get<NsPtr>(o.v_);
    case Kind::callable: return std::get<FnPtr>(v_) == std::get<FnPtr>(o.v_);
    case Kind::undefined: return false;
    default: return py_equal(*this, o);  // scalars: compare by value
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return as_bool();
    case Kind::integer: return as_int() != 0;
    case Kind::floating: return as_double() != 0.0;
    case Kind::string: return !as_string().empty();
    case Kind::list: return !as_list().items.empty();
    case Kind::dict: return !as_dict().entries.empty();
    case Kind::ns:
    case Kind::callable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return as_list().tuple ? "tuple" : "list";
    case Kind::dict: return "dict";
    case Kind::ns: return "Namespace";
    case Kind::callable: return "function";
  }
  return "?";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int ndigits = static_cast<int>(digits.size());
  const int decpt = exp10 + 1;  // digits are 0.DIGITS * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= ndigits) {
      out += digits + std::string(static_cast<size_t>(decpt - ndigits), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (ndigits > 1) out += "." + digits.substr(1);
  const int x = decpt - 1;
  out += x < 0 ? "e-" : "e+";
  const int ax = x < 0 ? -x : x;
  if (ax < 10) out += "0";
  out += std::to_string(ax);
  return out;
}

namespace {

// Python's str.isprintable() for the code points templates meet: controls, format characters
// and separators other than the space are escaped by repr().
bool is_printable(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA1) || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF) return false;
  return !(cp >= 0xD800 && cp <= 0xDFFF);
}

}  // namespace

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : decode_utf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an undecodable byte
      out += fmt::format("\\udc{:02x}", static_cast<unsigned>(cp - 0xDC00));
    } else if (!is_printable(cp)) {
      const auto u = static_cast<unsigned>(cp);
      out += cp < 0x100     ? fmt::format("\\x{:02x}", u)
             : cp < 0x10000 ? fmt::format("\\u{:04x}", u)
                            : fmt::format("\\U{:08x}", u);
    } else {
      append_utf8(out, cp);
    }
  }
  out += quote;
  return out;
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::undefined: return "";
    case Kind::string: return as_string();
    default: return repr();
  }
}

std::string Value::repr(int depth) const {
  if (depth > kMaxValueDepth) return "...";
  switch (kind()) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "None";
    case Kind::boolean: return as_bool() ? "True" : "False";
    case Kind::integer: return std::to_string(as_int());
    case Kind::floating: return py_float_repr(as_double());
    case Kind::string: return py_str_repr(as_string());
    case Kind::list: {
      const ListData& l = as_list();
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += l.items[i].repr(depth + 1);
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ")" : "]";
      return out;
    }
    case Kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(k) + ": " + v.repr(depth + 1);
      }
      return out + "}";
    }
    case Kind::ns: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : as_ns().entries) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(k) + ": " + v.repr(depth + 1);
      }
      return out + "}>";
    }
    case Kind::callable: return "<function " + as_callable().name + ">";
  }
  return "";
}

bool py_equal(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  if (depth > kMaxValueDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::undefined:
    case K::none: return true;
    case K::string: return a.as_string() == b.as_string();
    case K::list: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!py_equal(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case K::dict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (w == nullptr || !py_equal(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

std::optional<int> py_compare(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return std::nullopt;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i], depth + 1)) continue;
      return py_compare(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return std::nullopt;
}

}  // namespace lithe::jinja

#include "tokenizer/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_unicode.h"

namespace lithe::jinja {

namespace {

Result<Value> from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) {
    return error(StatusCode::invalid_argument, "chat template context nests deeper than {} levels", kMaxValueDepth);
  }
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return error(StatusCode::unsupported, "chat template context holds the integer {}, beyond 64-bit signed", u);
      }
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float: return Value::floating(j.get<double>());
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) {
        LITHE_ASSIGN(Value v, from_json(x, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case T::object: {
      Entries e;
      e.reserve(j.size());
      for (const auto& [k, x] : j.items()) {
        LITHE_ASSIGN(Value v, from_json(x, depth + 1));
        e.emplace_back(k, std::move(v));
      }
      return Value::dict(std::move(e));
    }
    default:
      return error(StatusCode::invalid_argument, "chat template context holds a JSON value of type '{}'",
                   j.type_name());
  }
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : decode_utf8(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp > 0x7F)) {
          if (cp >= 0x10000) {  // a surrogate pair
            const char32_t v = cp - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
          }
        } else {
          append_utf8(out, cp);
        }
    }
  }
  out += '"';
}

struct Dumper {
  const JsonFormat& f;
  SrcPos pos;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *f.indent;
  }

  Status dump(const Value& v, int level) {
    if (level > kMaxValueDepth) return runtime_error(pos, "tojson: value nests too deeply");
    switch (v.kind()) {
      case Value::Kind::none: out += "null"; return Status::ok();
      case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return Status::ok();
      case Value::Kind::integer: out += std::to_string(v.as_int()); return Status::ok();
      case Value::Kind::floating: {
        const double d = v.as_double();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float_repr(d);
        return Status::ok();
      }
      case Value::Kind::string: json_string(out, v.as_string(), f.ensure_ascii); return Status::ok();
      case Value::Kind::list: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return Status::ok();
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += f.item_separator;
          if (f.indent) newline(level + 1);
          LITHE_TRY(dump(items[i], level + 1));
        }
        if (f.indent) newline(level);
        out += ']';
        return Status::ok();
      }
      case Value::Kind::dict: {
        std::vector<const std::pair<std::string, Value>*> entries;
        for (const auto& e : v.as_dict().entries) entries.push_back(&e);
        if (entries.empty()) {
          out += "{}";
          return Status::ok();
        }
        if (f.sort_keys) {
          std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i > 0) out += f.item_separator;
          if (f.indent) newline(level + 1);
          json_string(out, entries[i]->first, f.ensure_ascii);
          out += f.key_separator;
          LITHE_TRY(dump(entries[i]->second, level + 1));
        }
        if (f.indent) newline(level);
        out += '}';
        return Status::ok();
      }
      default: return runtime_error(pos, fmt::format("Object of type {} is not JSON serializable", v.type_name()));
    }
  }
};

}  // namespace

Result<Value> value_from_json(const nlohmann::ordered_json& j) { return from_json(j, 0); }

Result<std::string> py_json_dumps(const Value& v, const JsonFormat& f, SrcPos pos) {
  Dumper d{f, pos, {}};
  LITHE_TRY(d.dump(v, 0));
  return std::move(d.out);
}

}  // namespace lithe::jinja

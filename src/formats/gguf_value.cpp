// gguf::Value accessors, summaries and the GGML type id table.
#include <fmt/format.h>

#include <limits>

#include "lithe/formats/gguf.h"

namespace lithe::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

Value Value::of_array(ValueType elem, Array items) {
  Value v(ValueType::array, std::move(items));
  v.elem_type_ = elem;
  return v;
}

Value Value::of_strings(const std::vector<std::string>& items) {
  Array a;
  a.reserve(items.size());
  for (const auto& s : items) a.push_back(of_string(s));
  return of_array(ValueType::string, std::move(a));
}

bool Value::is_integer() const {
  return std::holds_alternative<uint64_t>(v_) || std::holds_alternative<int64_t>(v_);
}

Result<int64_t> Value::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return error(StatusCode::invalid_argument, "value {} does not fit in i64", *u);
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v_)) return *i;
  return error(StatusCode::invalid_argument, "expected an integer, found {}", value_type_name(type_));
}

Result<uint64_t> Value::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&v_)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v_)) {
    if (*i < 0) return error(StatusCode::invalid_argument, "expected a non-negative integer, found {}", *i);
    return static_cast<uint64_t>(*i);
  }
  return error(StatusCode::invalid_argument, "expected an integer, found {}", value_type_name(type_));
}

Result<double> Value::as_float() const {
  if (const auto* d = std::get_if<double>(&v_)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v_)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
  return error(StatusCode::invalid_argument, "expected a number, found {}", value_type_name(type_));
}

Result<bool> Value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v_)) return *b;
  return error(StatusCode::invalid_argument, "expected a bool, found {}", value_type_name(type_));
}

Result<std::string> Value::as_string() const {
  if (const auto* s = std::get_if<std::string>(&v_)) return *s;
  return error(StatusCode::invalid_argument, "expected a string, found {}", value_type_name(type_));
}

Result<const Value::Array*> Value::as_array() const {
  if (const auto* a = std::get_if<Array>(&v_)) return a;
  return error(StatusCode::invalid_argument, "expected an array, found {}", value_type_name(type_));
}

Result<std::vector<std::string>> Value::as_string_array() const {
  LITHE_ASSIGN(const Array* a, as_array());
  if (elem_type_ != ValueType::string)
    return error(StatusCode::invalid_argument, "expected an array of strings, found an array of {}",
                 value_type_name(elem_type_));
  std::vector<std::string> out;
  out.reserve(a->size());
  for (const auto& v : *a) out.push_back(std::get<std::string>(v.v_));
  return out;
}

std::string Value::summary(size_t max_items) const {
  struct Visitor {
    const Value& self;
    size_t max_items;
    std::string operator()(std::monostate) const { return "(empty)"; }
    std::string operator()(uint64_t u) const { return fmt::format("{}", u); }
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const { return fmt::format("{:g}", d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const {
      std::string shown = s.size() > 80 ? s.substr(0, 77) + "..." : s;
      for (char& c : shown)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      return fmt::format("\"{}\"", shown);
    }
    std::string operator()(const Array& a) const {
      std::string out = fmt::format("[{} x {}", a.size(), value_type_name(self.elem_type_));
      if (!a.empty()) {
        out += ": ";
        for (size_t i = 0; i < a.size() && i < max_items; ++i) out += (i ? ", " : "") + a[i].summary(max_items);
        if (a.size() > max_items) out += ", ...";
      }
      return out + "]";
    }
  };
  return std::visit(Visitor{*this, max_items}, v_);
}

bool Value::operator==(const Value& o) const {
  return type_ == o.type_ && (type_ != ValueType::array || elem_type_ == o.elem_type_) && v_ == o.v_;
}

// ---- GGML type ids ----------------------------------------------------------------------------

namespace {
struct GgmlType {
  uint32_t id;
  std::string_view name;
  std::optional<DType> dtype;
};
// Ids as in ggml.h; types lithe cannot decode are listed so that errors can name them.
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", DType::f32},     {1, "F16", DType::f16},     {2, "Q4_0", DType::q4_0},
    {3, "Q4_1", DType::q4_1},   {6, "Q5_0", DType::q5_0},   {7, "Q5_1", DType::q5_1},
    {8, "Q8_0", DType::q8_0},   {9, "Q8_1", DType::q8_1},   {10, "Q2_K", DType::q2_k},
    {11, "Q3_K", DType::q3_k},  {12, "Q4_K", DType::q4_k},  {13, "Q5_K", DType::q5_k},
    {14, "Q6_K", DType::q6_k},  {15, "Q8_K", DType::q8_k},  {16, "IQ2_XXS", {}},
    {17, "IQ2_XS", {}},         {18, "IQ3_XXS", {}},        {19, "IQ1_S", {}},
    {20, "IQ4_NL", {}},         {21, "IQ3_S", {}},          {22, "IQ2_S", {}},
    {23, "IQ4_XS", {}},         {24, "I8", DType::i8},      {25, "I16", DType::i16},
    {26, "I32", DType::i32},    {27, "I64", DType::i64},    {28, "F64", DType::f64},
    {29, "IQ1_M", {}},          {30, "BF16", DType::bf16},  {34, "TQ1_0", {}},
    {35, "TQ2_0", {}},          {39, "MXFP4", {}},
};
}  // namespace

std::string_view ggml_type_name(uint32_t ggml_type) {
  for (const auto& t : kGgmlTypes)
    if (t.id == ggml_type) return t.name;
  return "unknown";
}

Result<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (const auto& t : kGgmlTypes) {
    if (t.id != ggml_type) continue;
    if (t.dtype) return *t.dtype;
    return error(StatusCode::unsupported, "GGML type {} ({}) is not supported by lithe", t.name, ggml_type);
  }
  return error(StatusCode::corrupt_file, "unknown GGML type id {}", ggml_type);
}

Result<uint32_t> ggml_from_dtype(DType dtype) {
  for (const auto& t : kGgmlTypes)
    if (t.dtype && *t.dtype == dtype) return t.id;
  return error(StatusCode::unsupported, "dtype {} has no GGML type id", dtype_name(dtype));
}

}  // namespace lithe::gguf

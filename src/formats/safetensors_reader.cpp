// safetensors reader: checks the header length, the JSON and every entry against the file size
// before any tensor view is made. See include/lithe/formats/safetensors.h for the layout.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <set>
#include <utility>

#include "lithe/formats/safetensors.h"

namespace lithe::safetensors {
namespace {

using nlohmann::json;

struct NameMap {
  std::string_view name;
  DType dtype;
};

// The safetensors dtypes lithe has a type for.
constexpr std::array<NameMap, 12> kDTypes = {{
    {"F64", DType::f64}, {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16},
    {"I64", DType::i64}, {"I32", DType::i32}, {"I16", DType::i16}, {"I8", DType::i8},
    {"U8", DType::u8}, {"BOOL", DType::boolean}, {"F8_E4M3", DType::f8_e4m3}, {"F8_E5M2", DType::f8_e5m2},
}};

// Valid safetensors dtypes without a lithe type.
constexpr std::array<std::string_view, 8> kKnownUnsupported = {"U16", "U32", "U64", "F8_E8M0", "F4",
                                                               "F6_E2M3", "F6_E3M2", "C64"};

// The JSON text of a value, shortened for messages.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// Reads the entries of the header, keeping the tensors' facts and the metadata.
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& file) : file_(file) {}

  Status fail(const std::string& tensor, const std::string& msg) const {
    return Status(StatusCode::corrupt_file, fmt::format("{}: tensor '{}': {}", file_, tensor, msg));
  }

  Status parse_entry(const std::string& name, const json& e, uint64_t data_size, TensorInfo& out) const {
    if (!e.is_object()) return fail(name, fmt::format("entry must be a JSON object, got {}", brief(e)));
    out.name = name;

    // dtype
    auto it = e.find("dtype");
    if (it == e.end()) return fail(name, "field 'dtype' is missing");
    if (!it->is_string()) return fail(name, fmt::format("field 'dtype' must be a string, got {}", brief(*it)));
    Result<DType> dt = parse_dtype(it->get_ref<const std::string&>());
    if (!dt) return dt.status().with_context(fmt::format("{}: tensor '{}': field 'dtype'", file_, name));
    out.dtype = *dt;

    // shape: non-negative integers; the product of the non-zero dims times the element size
    // must fit int64 so that strides of even an empty tensor cannot overflow.
    it = e.find("shape");
    if (it == e.end()) return fail(name, "field 'shape' is missing");
    if (!it->is_array()) return fail(name, fmt::format("field 'shape' must be an array, got {}", brief(*it)));
    const uint64_t elem = static_cast<uint64_t>(dtype_traits(out.dtype).block_bytes);
    uint64_t span = elem;  // bytes of the non-zero dims
    bool has_zero = false;
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    out.shape.clear();
    out.shape.reserve(it->size());
    for (const json& d : *it) {
      if (!d.is_number_unsigned())
        return fail(name, fmt::format("field 'shape' must hold non-negative integers, got {}", brief(d)));
      const uint64_t v = d.get<uint64_t>();
      if (v == 0) {
        has_zero = true;
      } else if (v > kMax / span) {
        return fail(name, fmt::format("field 'shape' {} is too large (its size overflows)", brief(*it)));
      } else {
        span *= v;
      }
      out.shape.push_back(static_cast<int64_t>(v));
    }
    const uint64_t nbytes = has_zero ? 0 : span;

    // data_offsets: [begin, end] within the data section, end - begin == the tensor's size.
    it = e.find("data_offsets");
    if (it == e.end()) return fail(name, "field 'data_offsets' is missing");
    if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() || !(*it)[1].is_number_unsigned())
      return fail(name, fmt::format("field 'data_offsets' must be two non-negative integers [begin, end], got {}",
                                    brief(*it)));
    out.begin = (*it)[0].get<uint64_t>();
    out.end = (*it)[1].get<uint64_t>();
    if (out.begin > out.end)
      return fail(name, fmt::format("field 'data_offsets' [{}, {}] has begin after end", out.begin, out.end));
    if (out.end > data_size)
      return fail(name, fmt::format("field 'data_offsets' [{}, {}] ends past the data section ({} bytes)",
                                    out.begin, out.end, data_size));
    if (out.end - out.begin != nbytes)
      return fail(name, fmt::format("field 'data_offsets' [{}, {}] spans {} bytes but a {} {} tensor needs {}",
                                    out.begin, out.end, out.end - out.begin, dtype_code(out.dtype).value(),
                                    shape_str(out.shape), nbytes));
    return Status::ok();
  }

  Status parse_metadata(const json& m, std::map<std::string, std::string>& out) const {
    if (!m.is_object())
      return Status(StatusCode::corrupt_file,
                    fmt::format("{}: field '__metadata__' must be an object, got {}", file_, brief(m)));
    for (const auto& [k, v] : m.items()) {
      if (!v.is_string())
        return Status(StatusCode::corrupt_file,
                      fmt::format("{}: field '__metadata__' key '{}' must be a string, got {}", file_, k, brief(v)));
      out.emplace(k, v.get<std::string>());
    }
    return Status::ok();
  }

 private:
  const std::string& file_;
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

Result<DType> parse_dtype(std::string_view name) {
  for (const auto& m : kDTypes)
    if (m.name == name) return m.dtype;
  for (auto u : kKnownUnsupported)
    if (u == name)
      return error(StatusCode::unsupported, "safetensors dtype '{}' has no lithe type (supported: F64 F32 F16 "
                   "BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2)", name);
  std::string shown(name.substr(0, 64));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return error(StatusCode::corrupt_file, "unknown safetensors dtype '{}'", shown);
}

Result<std::string_view> dtype_code(DType dtype) {
  for (const auto& m : kDTypes)
    if (m.dtype == dtype) return m.name;
  return error(StatusCode::unsupported, "dtype {} has no safetensors equivalent", lithe::dtype_name(dtype));
}

Result<File> File::open(const std::string& path) {
  LITHE_ASSIGN(BufferPtr bytes, map_file(path));
  return parse(std::move(bytes), path);
}

Result<File> File::parse(BufferPtr bytes, const std::string& name) {
  if (!bytes) return error(StatusCode::invalid_argument, "{}: no bytes to parse", name);
  const uint64_t size = bytes->size();
  const auto* base = static_cast<const uint8_t*>(bytes->data());
  if (size < 8)
    return error(StatusCode::corrupt_file,
                 "{}: file is {} bytes, too short for the 8-byte header length: not a safetensors file", name, size);
  const uint64_t n = read_u64_le(base);
  if (n > kMaxHeaderBytes)
    return error(StatusCode::corrupt_file, "{}: header length {} exceeds the {} byte limit: not a safetensors file",
                 name, n, kMaxHeaderBytes);
  if (n > size - 8)
    return error(StatusCode::corrupt_file, "{}: header length {} is past the end of the file ({} bytes): truncated?",
                 name, n, size);
  const uint64_t data_size = size - 8 - n;

  // Parse the JSON, noting names that occur twice (json objects would keep only one): top-level
  // keys (tensors) and keys of each entry.
  std::string dup_top, dup_field, dup_owner, current_top;
  std::set<std::string> top_keys, entry_keys;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event != json::parse_event_t::key) return true;
    const std::string& key = parsed.get_ref<const std::string&>();
    if (depth == 1) {
      current_top = key;
      entry_keys.clear();
      if (!top_keys.insert(key).second && dup_top.empty()) dup_top = key;
    } else if (depth == 2) {
      if (!entry_keys.insert(key).second && dup_field.empty()) {
        dup_field = key;
        dup_owner = current_top;
      }
    }
    return true;
  };
  const char* text = reinterpret_cast<const char*>(base + 8);
  json header = json::parse(text, text + n, callback, /*allow_exceptions=*/false);
  if (header.is_discarded())
    return error(StatusCode::corrupt_file, "{}: header ({} bytes) is not valid JSON", name, n);
  if (!header.is_object())
    return error(StatusCode::corrupt_file, "{}: header must be a JSON object, got {}", name, brief(header));
  if (!dup_top.empty())
    return error(StatusCode::corrupt_file, "{}: tensor '{}': name occurs twice in the header", name, dup_top);
  if (!dup_field.empty())
    return error(StatusCode::corrupt_file, "{}: tensor '{}': field '{}' occurs twice", name, dup_owner, dup_field);

  File f;
  f.path_ = name;
  f.header_bytes_ = n;
  HeaderParser hp(name);
  f.tensors_.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      LITHE_TRY(hp.parse_metadata(value, f.metadata_));
      continue;
    }
    TensorInfo info;
    LITHE_TRY(hp.parse_entry(key, value, data_size, info));
    f.tensors_.push_back(std::move(info));
  }

  // Data order; non-empty ranges must not overlap (empty ones occupy no bytes).
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : f.tensors_) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end)
      return error(StatusCode::corrupt_file,
                   "{}: tensor '{}': field 'data_offsets' [{}, {}] overlaps tensor '{}' at [{}, {}]", name, t.name,
                   t.begin, t.end, prev->name, prev->begin, prev->end);
    prev = &t;
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  f.bytes_ = std::move(bytes);
  return f;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<Tensor> File::tensor(const std::string& name) const {
  const TensorInfo* info = find_tensor(name);
  if (info == nullptr) return error(StatusCode::not_found, "tensor '{}' not in {}", name, path_);
  return tensor(*info);
}

Result<Tensor> File::tensor(const TensorInfo& info) const {
  Result<Tensor> t = Tensor::view(bytes_, static_cast<size_t>(data_offset() + info.begin), info.dtype, info.shape);
  if (!t) return t.status().with_context(fmt::format("{}: tensor '{}'", path_, info.name));
  return t;
}

}  // namespace lithe::safetensors

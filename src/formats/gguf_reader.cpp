// GGUF reader. Every read goes through Parser's bounds-checked cursor; counts are checked
// against the bytes left before anything is allocated, so a hostile file cannot make us
// allocate more than a small multiple of its own size.
#include <algorithm>
#include <cstring>

#include "lithe/formats/gguf.h"

namespace lithe::gguf {

namespace {
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;
constexpr int kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxNameLen = 65535;

// Smallest encoded size of one value of each type: bounds array counts before allocating.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    case ValueType::string: return 8;   // length prefix
    case ValueType::array: return 12;   // type + count
  }
  return 1;
}
}  // namespace

class Parser {
 public:
  Parser(const uint8_t* data, uint64_t size, std::string name) : p_(data), size_(size), name_(std::move(name)) {}

  Result<File> run(BufferPtr bytes) {
    File f;
    f.path_ = name_;
    f.bytes_ = std::move(bytes);
    LITHE_ASSIGN(uint32_t magic, read<uint32_t>("magic"));
    if (magic != kMagic)
      return fail("magic is 0x{:08x}, not \"GGUF\" (0x{:08x}): not a GGUF file", magic, kMagic);
    LITHE_ASSIGN(f.version_, read<uint32_t>("version"));
    if (f.version_ == 0x03000000u || f.version_ == 0x02000000u)
      return unsupported("is a big-endian GGUF file; only little-endian files are supported");
    if (f.version_ != 2 && f.version_ != 3)
      return unsupported("has GGUF version {}; lithe reads versions 2 and 3", f.version_);
    LITHE_ASSIGN(uint64_t n_tensors, read<uint64_t>("tensor_count"));
    LITHE_ASSIGN(uint64_t n_kv, read<uint64_t>("kv_count"));
    // Each kv needs at least 8 (key len) + 1 (key) + 4 (type) + 1 bytes; each tensor info 8+1+4+4+8+8.
    if (n_kv > remaining() / 14) return fail("kv_count {} is impossible for a file of {} bytes", n_kv, size_);
    if (n_tensors > remaining() / 33)
      return fail("tensor_count {} is impossible for a file of {} bytes", n_tensors, size_);

    for (uint64_t i = 0; i < n_kv; ++i) {
      LITHE_ASSIGN(std::string key, read_string(fmt::format("key of metadata entry {}", i), kMaxNameLen));
      LITHE_ASSIGN(uint32_t type_raw, read<uint32_t>(fmt::format("type of metadata '{}'", key)));
      LITHE_ASSIGN(Value v, read_value(type_raw, key, 0));
      if (f.kv_index_.count(key)) return fail("metadata key '{}' appears twice", key);
      f.kv_index_[key] = f.kv_.size();
      f.kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const Value* a = f.find("general.alignment")) {
      if (a->type() != ValueType::u32)
        return fail("general.alignment has type {}, expected u32", value_type_name(a->type()));
      const uint64_t al = *a->as_uint();
      if (al == 0 || (al & (al - 1)) != 0 || al > (1u << 20))
        return fail("general.alignment {} is not a power of two between 1 and 1 MiB", al);
      f.alignment_ = al;
    }

    f.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo t;
      LITHE_ASSIGN(t.name, read_string(fmt::format("name of tensor {}", i), kMaxNameLen));
      LITHE_ASSIGN(uint32_t n_dims, read<uint32_t>(fmt::format("n_dims of tensor '{}'", t.name)));
      if (n_dims > kMaxDims) return fail("tensor '{}' has {} dimensions (at most {})", t.name, n_dims, kMaxDims);
      t.shape.resize(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) {
        LITHE_ASSIGN(uint64_t dim, read<uint64_t>(fmt::format("dimension {} of tensor '{}'", d, t.name)));
        if (dim > (uint64_t{1} << 40)) return fail("tensor '{}' dimension {} is {}", t.name, d, dim);
        t.shape[n_dims - 1 - d] = static_cast<int64_t>(dim);  // file is innermost-first
      }
      LITHE_ASSIGN(t.ggml_type, read<uint32_t>(fmt::format("type of tensor '{}'", t.name)));
      auto dt = dtype_from_ggml(t.ggml_type);
      if (!dt) return dt.status().with_context(fmt::format("'{}': tensor '{}'", name_, t.name));
      t.dtype = *dt;
      LITHE_ASSIGN(t.offset, read<uint64_t>(fmt::format("offset of tensor '{}'", t.name)));
      auto numel = checked_numel(t.shape);
      if (!numel) return fail("tensor '{}' shape {}: {}", t.name, shape_str(t.shape), numel.status().message());
      const auto& tr = dtype_traits(t.dtype);
      const int64_t inner = t.shape.empty() ? 1 : t.shape.back();
      if (inner % tr.block_elems != 0)
        return fail("tensor '{}' {} has a row of {} elements, not a multiple of the {} block size {}", t.name,
                    shape_str(t.shape), inner, tr.name, tr.block_elems);
      if (*numel / tr.block_elems > static_cast<int64_t>(size_ / static_cast<uint64_t>(tr.block_bytes)) + 1)
        return fail("tensor '{}' {} {} needs more bytes than the file has ({})", t.name, tr.name,
                    shape_str(t.shape), size_);
      t.nbytes = static_cast<uint64_t>(*numel / tr.block_elems * tr.block_bytes);
      if (t.offset % f.alignment_ != 0)
        return fail("tensor '{}' offset {} is not a multiple of the alignment {}", t.name, t.offset, f.alignment_);
      if (f.tensor_index_.count(t.name)) return fail("tensor name '{}' appears twice", t.name);
      f.tensor_index_[t.name] = f.tensors_.size();
      f.tensors_.push_back(std::move(t));
    }

    const uint64_t data_start = (pos_ + f.alignment_ - 1) / f.alignment_ * f.alignment_;
    if (data_start > size_ && !f.tensors_.empty())
      return fail("data section would start at {} past the end of the file ({} bytes)", data_start, size_);
    f.data_offset_ = data_start;
    const uint64_t data_size = size_ > data_start ? size_ - data_start : 0;

    // Bounds and overlap: sort by offset and walk.
    std::vector<const TensorInfo*> by_offset;
    for (const auto& t : f.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    uint64_t end_prev = 0;
    const TensorInfo* prev = nullptr;
    for (const TensorInfo* t : by_offset) {
      if (t->offset > data_size || t->nbytes > data_size - t->offset)
        return fail("tensor '{}' ({} bytes at data offset {}) runs past the end of the file: the data section "
                    "holds {} bytes (file truncated?)",
                    t->name, t->nbytes, t->offset, data_size);
      if (prev && t->nbytes > 0 && t->offset < end_prev)
        return fail("tensors '{}' and '{}' overlap in the data section", prev->name, t->name);
      if (t->nbytes > 0) {
        end_prev = t->offset + t->nbytes;
        prev = t;
      }
    }
    return f;
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  template <typename... Args>
  Status fail(fmt::format_string<Args...> f, Args&&... args) const {
    return Status(StatusCode::corrupt_file, fmt::format("'{}': ", name_) + fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  Status unsupported(fmt::format_string<Args...> f, Args&&... args) const {
    return Status(StatusCode::unsupported, fmt::format("'{}' ", name_) + fmt::format(f, std::forward<Args>(args)...));
  }

  template <typename T>
  Result<T> read(const std::string& field) {
    if (remaining() < sizeof(T))
      return fail("truncated at byte {} while reading {} ({} bytes needed, {} left)", pos_, field, sizeof(T),
                  remaining());
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> read_string(const std::string& field, uint64_t max_len) {
    LITHE_ASSIGN(uint64_t len, read<uint64_t>("length of " + field));
    if (len > remaining())
      return fail("{} has length {} but only {} bytes are left in the file", field, len, remaining());
    if (len > max_len) return fail("{} is {} bytes long (at most {})", field, len, max_len);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  Result<Value> read_value(uint32_t type_raw, const std::string& key, int depth) {
    if (type_raw > static_cast<uint32_t>(ValueType::f64))
      return fail("metadata '{}' has unknown value type {}", key, type_raw);
    const auto type = static_cast<ValueType>(type_raw);
    switch (type) {
      case ValueType::u8: { LITHE_ASSIGN(uint8_t v, read<uint8_t>(key)); return Value::of_u8(v); }
      case ValueType::i8: { LITHE_ASSIGN(int8_t v, read<int8_t>(key)); return Value::of_i8(v); }
      case ValueType::u16: { LITHE_ASSIGN(uint16_t v, read<uint16_t>(key)); return Value::of_u16(v); }
      case ValueType::i16: { LITHE_ASSIGN(int16_t v, read<int16_t>(key)); return Value::of_i16(v); }
      case ValueType::u32: { LITHE_ASSIGN(uint32_t v, read<uint32_t>(key)); return Value::of_u32(v); }
      case ValueType::i32: { LITHE_ASSIGN(int32_t v, read<int32_t>(key)); return Value::of_i32(v); }
      case ValueType::u64: { LITHE_ASSIGN(uint64_t v, read<uint64_t>(key)); return Value::of_u64(v); }
      case ValueType::i64: { LITHE_ASSIGN(int64_t v, read<int64_t>(key)); return Value::of_i64(v); }
      case ValueType::f32: { LITHE_ASSIGN(float v, read<float>(key)); return Value::of_f32(v); }
      case ValueType::f64: { LITHE_ASSIGN(double v, read<double>(key)); return Value::of_f64(v); }
      case ValueType::boolean: {
        LITHE_ASSIGN(uint8_t v, read<uint8_t>(key));
        if (v > 1) return fail("metadata '{}' is a bool with byte value {}", key, v);
        return Value::of_bool(v != 0);
      }
      case ValueType::string: {
        LITHE_ASSIGN(std::string s, read_string("metadata '" + key + "'", size_));
        return Value::of_string(std::move(s));
      }
      case ValueType::array: {
        if (depth >= kMaxArrayDepth) return fail("metadata '{}' nests arrays deeper than {}", key, kMaxArrayDepth);
        LITHE_ASSIGN(uint32_t elem_raw, read<uint32_t>("element type of " + key));
        if (elem_raw > static_cast<uint32_t>(ValueType::f64))
          return fail("metadata '{}' is an array of unknown value type {}", key, elem_raw);
        LITHE_ASSIGN(uint64_t n, read<uint64_t>("element count of " + key));
        const auto elem = static_cast<ValueType>(elem_raw);
        if (n > remaining() / min_encoded_size(elem))
          return fail("metadata '{}' claims {} elements of {} but only {} bytes are left", key, n,
                      value_type_name(elem), remaining());
        Value::Array items;
        items.reserve(n);
        for (uint64_t i = 0; i < n; ++i) {
          LITHE_ASSIGN(Value v, read_value(elem_raw, key, depth + 1));
          items.push_back(std::move(v));
        }
        return Value::of_array(elem, std::move(items));
      }
    }
    return fail("metadata '{}' has unknown value type {}", key, type_raw);
  }

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string name_;
};

Result<File> File::parse(BufferPtr bytes, const std::string& name) {
  if (bytes->device() != Device::cpu)
    return error(StatusCode::invalid_argument, "GGUF bytes for '{}' must be in host memory", name);
  Parser p(static_cast<const uint8_t*>(bytes->data()), bytes->size(), name);
  return p.run(bytes);
}

Result<File> File::open(const std::string& path) {
  LITHE_ASSIGN(BufferPtr bytes, map_file(path));
  return parse(std::move(bytes), path);
}

const Value* File::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

Result<const Value*> File::get(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return error(StatusCode::not_found, "'{}' has no metadata key '{}'", path_, key);
  return v;
}

namespace {
template <typename T, typename F>
Result<T> typed_get(const File& f, const std::string& key, F&& conv) {
  LITHE_ASSIGN(const Value* v, f.get(key));
  auto r = conv(*v);
  if (!r) return r.status().with_context(fmt::format("'{}': metadata '{}'", f.path(), key));
  return r;
}
}  // namespace

Result<std::string> File::get_string(const std::string& key) const {
  return typed_get<std::string>(*this, key, [](const Value& v) { return v.as_string(); });
}
Result<int64_t> File::get_int(const std::string& key) const {
  return typed_get<int64_t>(*this, key, [](const Value& v) { return v.as_int(); });
}
Result<double> File::get_float(const std::string& key) const {
  return typed_get<double>(*this, key, [](const Value& v) { return v.as_float(); });
}
int64_t File::get_int_or(const std::string& key, int64_t def) const {
  auto r = get_int(key);
  return r ? *r : def;
}
double File::get_float_or(const std::string& key, double def) const {
  auto r = get_float(key);
  return r ? *r : def;
}
std::string File::get_string_or(const std::string& key, const std::string& def) const {
  auto r = get_string(key);
  return r ? *r : def;
}
bool File::get_bool_or(const std::string& key, bool def) const {
  const Value* v = find(key);
  if (v == nullptr) return def;
  auto r = v->as_bool();
  return r ? *r : def;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<Tensor> File::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) return error(StatusCode::not_found, "'{}' has no tensor '{}'", path_, name);
  return tensor(*t);
}

Result<Tensor> File::tensor(const TensorInfo& info) const {
  return Tensor::view(bytes_, static_cast<size_t>(data_offset_ + info.offset), info.dtype, info.shape);
}

uint64_t File::file_size() const { return bytes_ ? bytes_->size() : 0; }

}  // namespace lithe::gguf

// GGUF v3 writer: header, metadata, tensor infos, aligned tensor data. Streams to a temporary
// file and renames it into place, so a crash never leaves a half-written model.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "lithe/core/file_util.h"
#include "lithe/formats/gguf.h"

namespace lithe::gguf {

namespace {

using Sink = std::function<Status(const void*, size_t)>;

class Emitter {
 public:
  explicit Emitter(Sink sink) : sink_(std::move(sink)) {}
  template <typename T>
  Status put(T v) {
    pos_ += sizeof(T);
    return sink_(&v, sizeof(T));
  }
  Status bytes(const void* p, size_t n) {
    pos_ += n;
    return n ? sink_(p, n) : Status::ok();
  }
  Status str(const std::string& s) {
    LITHE_TRY(put<uint64_t>(s.size()));
    return bytes(s.data(), s.size());
  }
  Status pad_to(uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    uint64_t n = (alignment - pos_ % alignment) % alignment;
    while (n > 0) {
      const uint64_t k = std::min<uint64_t>(n, sizeof zeros);
      LITHE_TRY(bytes(zeros, k));
      n -= k;
    }
    return Status::ok();
  }
  uint64_t pos() const { return pos_; }

  Status value(const Value& v) {
    struct V {
      Emitter& e;
      ValueType t;
      Status operator()(std::monostate) { return error(StatusCode::internal, "empty GGUF value"); }
      Status operator()(uint64_t u) { return integer(u); }
      Status operator()(int64_t i) { return integer(static_cast<uint64_t>(i)); }
      Status integer(uint64_t u) {
        switch (t) {
          case ValueType::u8: case ValueType::i8: return e.put<uint8_t>(static_cast<uint8_t>(u));
          case ValueType::u16: case ValueType::i16: return e.put<uint16_t>(static_cast<uint16_t>(u));
          case ValueType::u32: case ValueType::i32: return e.put<uint32_t>(static_cast<uint32_t>(u));
          default: return e.put<uint64_t>(u);
        }
      }
      Status operator()(double d) {
        return t == ValueType::f32 ? e.put<float>(static_cast<float>(d)) : e.put<double>(d);
      }
      Status operator()(bool b) { return e.put<uint8_t>(b ? 1 : 0); }
      Status operator()(const std::string& s) { return e.str(s); }
      Status operator()(const Value::Array&) { return error(StatusCode::internal, "array handled by caller"); }
    };
    if (v.type() == ValueType::array) {
      const auto* a = *v.as_array();
      LITHE_TRY(put<uint32_t>(static_cast<uint32_t>(v.elem_type())));
      LITHE_TRY(put<uint64_t>(a->size()));
      for (const auto& item : *a) {
        if (item.type() != v.elem_type())
          return error(StatusCode::invalid_argument, "GGUF array of {} holds a {}", value_type_name(v.elem_type()),
                       value_type_name(item.type()));
        LITHE_TRY(value(item));
      }
      return Status::ok();
    }
    return std::visit(V{*this, v.type()}, v.raw());
  }

 private:
  Sink sink_;
  uint64_t pos_ = 0;
};

}  // namespace

void Writer::set(const std::string& key, Value value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

Status Writer::add_tensor(const std::string& name, DType dtype, const Shape& shape, std::span<const uint8_t> data) {
  for (const auto& t : tensors_)
    if (t.name == name) return error(StatusCode::invalid_argument, "tensor '{}' added twice", name);
  LITHE_TRY(ggml_from_dtype(dtype).status());
  const auto& tr = dtype_traits(dtype);
  if (shape.size() > 4) return error(StatusCode::invalid_argument, "tensor '{}' has {} dims (GGUF allows 4)", name, shape.size());
  if (tr.is_block && (shape.empty() || shape.back() % tr.block_elems != 0))
    return error(StatusCode::invalid_argument, "tensor '{}' {} does not fit {} blocks of {}", name, shape_str(shape),
                 tr.name, tr.block_elems);
  LITHE_ASSIGN(int64_t numel, checked_numel(shape));
  const auto expected = static_cast<size_t>(numel / tr.block_elems * tr.block_bytes);
  if (data.size() != expected)
    return error(StatusCode::invalid_argument, "tensor '{}' {} {} needs {} bytes, got {}", name, tr.name,
                 shape_str(shape), expected, data.size());
  tensors_.push_back({name, dtype, shape, data});
  return Status::ok();
}

Status Writer::add_tensor(const std::string& name, const Tensor& t) {
  if (t.device() != Device::cpu || !t.is_contiguous())
    return error(StatusCode::invalid_argument, "tensor '{}' ({}) must be contiguous host memory", name, t.describe());
  return add_tensor(name, t.dtype(), t.shape(),
                    std::span<const uint8_t>(static_cast<const uint8_t*>(t.data()), t.nbytes()));
}

Status Writer::emit(const std::function<Status(const void*, size_t)>& sink) const {
  Emitter e(sink);
  const bool add_alignment = alignment_ != 32 && std::none_of(kv_.begin(), kv_.end(), [](const auto& kv) {
    return kv.first == "general.alignment";
  });
  LITHE_TRY(e.put<uint32_t>(0x46554747));  // "GGUF"
  LITHE_TRY(e.put<uint32_t>(3));
  LITHE_TRY(e.put<uint64_t>(tensors_.size()));
  LITHE_TRY(e.put<uint64_t>(kv_.size() + (add_alignment ? 1 : 0)));
  auto put_kv = [&](const std::string& key, const Value& v) -> Status {
    LITHE_TRY(e.str(key));
    LITHE_TRY(e.put<uint32_t>(static_cast<uint32_t>(v.type())));
    return e.value(v);
  };
  for (const auto& [key, v] : kv_) LITHE_TRY(put_kv(key, v));
  if (add_alignment) LITHE_TRY(put_kv("general.alignment", Value::of_u32(static_cast<uint32_t>(alignment_))));
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    LITHE_TRY(e.str(t.name));
    LITHE_TRY(e.put<uint32_t>(static_cast<uint32_t>(t.shape.size())));
    for (size_t d = t.shape.size(); d-- > 0;) LITHE_TRY(e.put<uint64_t>(static_cast<uint64_t>(t.shape[d])));
    LITHE_TRY(e.put<uint32_t>(*ggml_from_dtype(t.dtype)));
    LITHE_TRY(e.put<uint64_t>(offset));
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  LITHE_TRY(e.pad_to(alignment_));
  for (const auto& t : tensors_) {
    LITHE_TRY(e.bytes(t.data.data(), t.data.size()));
    LITHE_TRY(e.pad_to(alignment_));
  }
  return Status::ok();
}

Result<std::vector<uint8_t>> Writer::serialize() const {
  std::vector<uint8_t> out;
  LITHE_TRY(emit([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return Status::ok();
  }));
  return out;
}

Status Writer::write(const std::string& path) const {
  return write_file_atomic_with(path, [&](std::FILE* f) -> Status {
    return emit([&](const void* p, size_t n) -> Status {
      if (std::fwrite(p, 1, n, f) != n) return error(StatusCode::io_error, "cannot write {} bytes to '{}'", n, path);
      return Status::ok();
    });
  });
}

}  // namespace lithe::gguf

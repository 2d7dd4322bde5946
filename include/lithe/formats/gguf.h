// GGUF v2/v3: reader (memory-mapped, every offset checked against the file size) and writer.
// Layout: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv pairs, tensor infos,
// padding to `general.alignment` (default 32), tensor data. Tensor dims in the file are
// innermost-first; GgufTensorInfo::shape is outermost-first (numpy order).
// This module knows no model: names and meanings of keys belong to models/ and tokenizer/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "lithe/core/status.h"
#include "lithe/core/tensor.h"

namespace lithe::gguf {

// Metadata value types, numbered as in the file.
enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Arrays hold their element type and elements (nested arrays allowed).
class Value {
 public:
  using Array = std::vector<Value>;
  Value() = default;
  static Value of_u8(uint8_t v) { return Value(ValueType::u8, uint64_t{v}); }
  static Value of_i8(int8_t v) { return Value(ValueType::i8, int64_t{v}); }
  static Value of_u16(uint16_t v) { return Value(ValueType::u16, uint64_t{v}); }
  static Value of_i16(int16_t v) { return Value(ValueType::i16, int64_t{v}); }
  static Value of_u32(uint32_t v) { return Value(ValueType::u32, uint64_t{v}); }
  static Value of_i32(int32_t v) { return Value(ValueType::i32, int64_t{v}); }
  static Value of_u64(uint64_t v) { return Value(ValueType::u64, v); }
  static Value of_i64(int64_t v) { return Value(ValueType::i64, v); }
  static Value of_f32(float v) { return Value(ValueType::f32, double{v}); }
  static Value of_f64(double v) { return Value(ValueType::f64, v); }
  static Value of_bool(bool v) { return Value(ValueType::boolean, v); }
  static Value of_string(std::string v) { return Value(ValueType::string, std::move(v)); }
  static Value of_array(ValueType elem, Array items);
  static Value of_strings(const std::vector<std::string>& items);

  ValueType type() const { return type_; }
  ValueType elem_type() const { return elem_type_; }  // arrays only
  bool is_integer() const;
  bool is_float() const { return type_ == ValueType::f32 || type_ == ValueType::f64; }

  // Typed access; errors name the actual type. Integers convert when the value fits.
  Result<int64_t> as_int() const;
  Result<uint64_t> as_uint() const;
  Result<double> as_float() const;  // any number
  Result<bool> as_bool() const;
  Result<std::string> as_string() const;
  Result<const Array*> as_array() const;
  Result<std::vector<std::string>> as_string_array() const;

  // Short human form: 42, 1e+05, "llama", [49152 x string] ...
  std::string summary(size_t max_items = 4) const;
  bool operator==(const Value& o) const;

  // Raw storage (exposed to the reader/writer).
  const std::variant<std::monostate, uint64_t, int64_t, double, bool, std::string, Array>& raw() const { return v_; }

 private:
  template <typename T>
  Value(ValueType t, T v) : type_(t), v_(std::move(v)) {}
  ValueType type_ = ValueType::u8;
  ValueType elem_type_ = ValueType::u8;
  std::variant<std::monostate, uint64_t, int64_t, double, bool, std::string, Array> v_;
};

struct TensorInfo {
  std::string name;
  Shape shape;              // outermost-first
  DType dtype;
  uint32_t ggml_type;       // the type id as stored
  uint64_t offset;          // relative to the start of the data section
  uint64_t nbytes;
};

// GGML type ids <-> lithe dtypes.
Result<DType> dtype_from_ggml(uint32_t ggml_type);
Result<uint32_t> ggml_from_dtype(DType dtype);
std::string_view ggml_type_name(uint32_t ggml_type);  // "Q4_K", "F32", "type 99"

class File {
 public:
  // Maps and parses `path`. Every size, count, string length, offset and alignment is checked
  // against the file size; errors name the file and the field.
  static Result<File> open(const std::string& path);
  // Parses bytes already in memory (fuzzing, tests). `name` is used in messages.
  static Result<File> parse(BufferPtr bytes, const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return path_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(const std::string& key) const;  // nullptr when absent
  Result<const Value*> get(const std::string& key) const;  // not_found names the key and file
  // Convenience getters with a default for optional keys.
  Result<std::string> get_string(const std::string& key) const;
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t def) const;
  double get_float_or(const std::string& key, double def) const;
  std::string get_string_or(const std::string& key, const std::string& def) const;
  bool get_bool_or(const std::string& key, bool def) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  // A zero-copy view of the tensor's bytes in the mapped file (read-only).
  Result<Tensor> tensor(const std::string& name) const;
  Result<Tensor> tensor(const TensorInfo& info) const;
  uint64_t file_size() const;

 private:
  std::string path_;
  BufferPtr bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  friend class Parser;
};

// Builds a GGUF v3 file. Metadata keeps insertion order (re-setting a key replaces it in place);
// tensors are written in insertion order, each aligned. write() is atomic (temp file + rename).
class Writer {
 public:
  explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}
  void set(const std::string& key, Value value);
  // The tensor's bytes are copied when write() runs; `data` must stay valid until then.
  // Shape is outermost-first; data must hold exactly the bytes of a contiguous tensor.
  Status add_tensor(const std::string& name, DType dtype, const Shape& shape, std::span<const uint8_t> data);
  Status add_tensor(const std::string& name, const Tensor& t);  // host tensor, contiguous
  Status write(const std::string& path) const;
  // The whole file in memory (tests).
  Result<std::vector<uint8_t>> serialize() const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    Shape shape;
    std::span<const uint8_t> data;
  };
  Status emit(const std::function<Status(const void*, size_t)>& sink) const;
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Pending> tensors_;
};

}  // namespace lithe::gguf

// safetensors: reader (memory-mapped, zero-copy tensor views, every field checked against the
// file size before any tensor byte is touched) and writer (one file, or shards plus an index).
// Layout: u64 little-endian N, N bytes of UTF-8 JSON header, then the data section:
//   {"<name>": {"dtype": "F16", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string value>", ...}}
// data_offsets are relative to the data section (byte 8 + N) and end - begin is exactly the
// tensor's byte size. Shapes are outermost-first (numpy order), as in lithe.
// This module knows no model: tensor names belong to models/.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/core/status.h"
#include "lithe/core/tensor.h"

namespace lithe::safetensors {

// Largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// safetensors dtype codes ("F16", "BF16", "BOOL", "F8_E4M3", ...) <-> lithe dtypes.
// Unknown names, and valid safetensors types lithe has no type for (U16, U32, U64, F8_E8M0, F4),
// are errors naming the dtype.
Result<DType> parse_dtype(std::string_view name);
// Block dtypes (q4_0, ...) have no safetensors name: unsupported.
Result<std::string_view> dtype_code(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;     // outermost-first; empty for a 0-d tensor
  uint64_t begin;  // byte range [begin, end) relative to the start of the data section
  uint64_t end;
  uint64_t nbytes() const { return end - begin; }
};

class File {
 public:
  // Maps and parses `path`. Errors name the file, the tensor and the field.
  static Result<File> open(const std::string& path);
  // Parses bytes already in memory (fuzzing, tests). `name` is used in messages.
  static Result<File> parse(BufferPtr bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint64_t header_bytes() const { return header_bytes_; }  // N
  uint64_t data_offset() const { return 8 + header_bytes_; }
  uint64_t file_size() const { return bytes_ ? bytes_->size() : 0; }

  // "__metadata__" (string -> string); empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensors in data order (ascending begin offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  // A zero-copy, read-only view of the tensor's bytes in the mapped file. The data section starts
  // 8-byte aligned; a tensor is aligned to its element size when the writer ordered tensors by
  // alignment (the Hugging Face writers do), which the format itself does not require.
  Result<Tensor> tensor(const std::string& name) const;
  Result<Tensor> tensor(const TensorInfo& info) const;

 private:
  std::string path_;
  BufferPtr bytes_;
  uint64_t header_bytes_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

// Where the tensors of a sharded write went (write_sharded()).
struct ShardedWrite {
  std::vector<std::string> files;  // paths written, shards first, then the index (if any)
  bool sharded = false;            // false: a single <prefix>.safetensors
};

// Builds safetensors files. Tensors are written in insertion order, back to back (the format
// allows no holes); the header is padded with spaces to a multiple of 8 so the data section
// starts 8-byte aligned. Add wider dtypes first if every tensor must be aligned to its element.
// Writes are atomic (temp file + rename).
class Writer {
 public:
  // The bytes are copied when a write runs; `data` must stay valid until then.
  // `data` must hold exactly the bytes of a contiguous tensor of `shape`.
  Status add_tensor(const std::string& name, DType dtype, const Shape& shape, std::span<const uint8_t> data);
  // A contiguous tensor on any device (device tensors are copied to the host now; host tensors
  // are kept alive by the writer and read when a write runs).
  Status add_tensor(const std::string& name, const Tensor& t);
  // Keys and values must be UTF-8 (the header is JSON).
  Status set_metadata(const std::string& key, const std::string& value);

  size_t num_tensors() const { return tensors_.size(); }
  uint64_t total_bytes() const;  // sum of the tensors' byte sizes

  // One file holding every tensor.
  Status write(const std::string& path) const;
  // The whole single file in memory (tests, fuzz seeds).
  Result<std::vector<uint8_t>> serialize() const;
  // Writes `dir`/<prefix>.safetensors when the tensors fit in `max_shard_bytes`, else shards
  // `dir`/<prefix>-00001-of-0000K.safetensors (tensors in insertion order, a new shard started
  // when the next tensor would overflow; a tensor larger than the limit gets a shard of its own)
  // plus `dir`/<prefix>.safetensors.index.json with metadata.total_size and weight_map.
  // Every shard carries the writer's metadata.
  Result<ShardedWrite> write_sharded(const std::string& dir, uint64_t max_shard_bytes,
                                     const std::string& prefix = "model") const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    Shape shape;
    std::span<const uint8_t> data;
    Tensor keep;  // holds the buffer of a tensor added by add_tensor(name, Tensor)
  };
  // Header JSON (padded) for tensors [first, last).
  std::string header_for(size_t first, size_t last) const;
  Status write_range(const std::string& path, size_t first, size_t last) const;

  std::vector<Pending> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lithe::safetensors

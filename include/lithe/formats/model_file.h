// One read-only view over any file lithe accepts as a model: a GGUF file, a safetensors file, or
// a checkpoint directory (config.json + safetensors shards). Gives the tensor table, zero-copy
// tensor views and the metadata, without knowing any model architecture.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lithe/core/tensor.h"

namespace lithe {
namespace gguf {
class File;
class Value;
}  // namespace gguf

struct ModelTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;       // outermost-first
  uint64_t nbytes;
  uint64_t offset;   // byte offset inside its file's data section
};

struct ModelFileInfo {
  std::string format;          // "gguf", "safetensors", "checkpoint"
  std::string format_version;  // "v3", ...
  nlohmann::json metadata_json;  // GGUF kv / safetensors __metadata__ / config.json; long arrays summarised
  std::vector<std::pair<std::string, std::string>> metadata_text;  // one line per key, for people
  int64_t parameter_count = 0;
  uint64_t tensor_bytes = 0;
};

class ModelFile {
 public:
  virtual ~ModelFile() = default;
  virtual const ModelFileInfo& info() const = 0;
  virtual const std::vector<ModelTensorInfo>& tensors() const = 0;
  virtual Result<Tensor> tensor(const std::string& name) const = 0;
  // The underlying GGUF file when this is one (tokenizer and model metadata live there).
  virtual const gguf::File* gguf() const { return nullptr; }
  // config.json of a checkpoint directory (null json otherwise).
  virtual const nlohmann::json& config() const;
  // Directory holding the model's side files (tokenizer.json ...), empty for single files.
  virtual std::string directory() const { return {}; }
};

// Opens by content: a directory is a checkpoint; a file starting with "GGUF" is GGUF; anything
// else is tried as safetensors. Errors name the path and say what was expected.
Result<std::unique_ptr<ModelFile>> open_model_file(const std::string& path);

// JSON for one GGUF value; arrays longer than `max_items` become {"type","count","head"}.
nlohmann::json gguf_value_to_json(const gguf::Value& v, size_t max_items = 64);

}  // namespace lithe

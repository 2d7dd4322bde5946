// A Hugging Face-style checkpoint directory:
//   config.json                          model hyper-parameters (parsed here as JSON only)
//   model.safetensors                    all weights, or
//   model.safetensors.index.json         {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
//   model-00001-of-0000K.safetensors...  the shards it names
//   tokenizer.json, generation_config.json, ...  other files, exposed by name (files())
// One name -> Tensor lookup spans all shards. This module knows no model.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lithe/core/status.h"
#include "lithe/core/tensor.h"
#include "lithe/formats/safetensors.h"

namespace lithe {

class CheckpointDir {
 public:
  // Opens `dir`: model.safetensors if present, else the sharded index (every shard it names must
  // exist and hold the tensors mapped to it). config.json is parsed when present.
  static Result<CheckpointDir> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  const std::vector<safetensors::File>& shards() const { return shards_; }

  // Tensor names in shard order, then data order within a shard.
  const std::vector<std::string>& tensor_names() const { return names_; }
  bool has_tensor(const std::string& name) const { return where_.count(name) != 0; }
  const safetensors::TensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  // A zero-copy view into the mapped shard; not_found names the tensor and the directory.
  Result<Tensor> tensor(const std::string& name) const;
  // Union of the shards' __metadata__ (the first shard wins on a conflicting key).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // metadata.total_size of the index (sum of tensor bytes as HF counts it); 0 when absent.
  uint64_t index_total_size() const { return index_total_size_; }

  // config.json; nullptr when the directory has none.
  const nlohmann::json* config() const { return has_config_ ? &config_ : nullptr; }
  // Paths of the directory's regular files by file name ("tokenizer.json" -> "<dir>/tokenizer.json").
  const std::map<std::string, std::string>& files() const { return files_; }
  std::optional<std::string> file_path(const std::string& file_name) const;

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<safetensors::File> shards_;
  std::vector<std::string> names_;
  std::map<std::string, size_t> where_;  // tensor name -> index in shards_
  std::map<std::string, std::string> metadata_;
  uint64_t index_total_size_ = 0;
  bool has_config_ = false;
  nlohmann::json config_;
  std::map<std::string, std::string> files_;
};

}  // namespace lithe

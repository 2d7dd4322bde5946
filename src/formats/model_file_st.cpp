// ModelFile over a single safetensors file and over a checkpoint directory.
#include "lithe/formats/checkpoint_dir.h"
#include "lithe/formats/model_file.h"
#include "lithe/formats/safetensors.h"

namespace lithe {
namespace {

void add_tensor_info(ModelFileInfo& info, std::vector<ModelTensorInfo>& out, const safetensors::TensorInfo& t) {
  out.push_back({t.name, t.dtype, t.shape, t.nbytes(), t.begin});
  info.parameter_count += *checked_numel(t.shape);
  info.tensor_bytes += t.nbytes();
}

void add_metadata(ModelFileInfo& info, const std::map<std::string, std::string>& md) {
  info.metadata_json = nlohmann::json::object();
  for (const auto& [k, v] : md) {
    info.metadata_json[k] = v;
    info.metadata_text.emplace_back(k, v);
  }
}

class SafetensorsModelFile final : public ModelFile {
 public:
  explicit SafetensorsModelFile(safetensors::File f) : f_(std::move(f)) {
    info_.format = "safetensors";
    add_metadata(info_, f_.metadata());
    for (const auto& t : f_.tensors()) add_tensor_info(info_, tensors_, t);
  }
  const ModelFileInfo& info() const override { return info_; }
  const std::vector<ModelTensorInfo>& tensors() const override { return tensors_; }
  Result<Tensor> tensor(const std::string& name) const override { return f_.tensor(name); }

 private:
  safetensors::File f_;
  ModelFileInfo info_;
  std::vector<ModelTensorInfo> tensors_;
};

class CheckpointModelFile final : public ModelFile {
 public:
  explicit CheckpointModelFile(CheckpointDir d) : d_(std::move(d)) {
    info_.format = "checkpoint";
    info_.format_version = d_.sharded() ? fmt::format("{} safetensors shards", d_.shards().size()) : "safetensors";
    add_metadata(info_, d_.metadata());
    if (d_.config() != nullptr) {
      info_.metadata_json["config.json"] = *d_.config();
      for (const auto& [k, v] : d_.config()->items()) info_.metadata_text.emplace_back("config." + k, v.dump());
    }
    for (const auto& name : d_.tensor_names()) add_tensor_info(info_, tensors_, *d_.find_tensor(name));
  }
  const ModelFileInfo& info() const override { return info_; }
  const std::vector<ModelTensorInfo>& tensors() const override { return tensors_; }
  Result<Tensor> tensor(const std::string& name) const override { return d_.tensor(name); }
  const nlohmann::json& config() const override { return d_.config() ? *d_.config() : ModelFile::config(); }
  std::string directory() const override { return d_.dir(); }

 private:
  CheckpointDir d_;
  ModelFileInfo info_;
  std::vector<ModelTensorInfo> tensors_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> open_model_safetensors(const std::string& path) {
  auto f = safetensors::File::open(path);
  if (!f)
    return f.status().with_context(fmt::format("'{}' is neither GGUF nor a valid safetensors file", path));
  return std::unique_ptr<ModelFile>(std::make_unique<SafetensorsModelFile>(std::move(*f)));
}

Result<std::unique_ptr<ModelFile>> open_model_checkpoint(const std::string& dir) {
  LITHE_ASSIGN(CheckpointDir d, CheckpointDir::open(dir));
  return std::unique_ptr<ModelFile>(std::make_unique<CheckpointModelFile>(std::move(d)));
}

}  // namespace lithe

#include "lithe/formats/model_file.h"

#include <sys/stat.h>

#include <cstdio>

#include "lithe/formats/gguf.h"

namespace lithe {

const nlohmann::json& ModelFile::config() const {
  static const nlohmann::json null_json;
  return null_json;
}

nlohmann::json gguf_value_to_json(const gguf::Value& v, size_t max_items) {
  using gguf::ValueType;
  if (v.type() == ValueType::array) {
    const auto* a = *v.as_array();
    nlohmann::json items = nlohmann::json::array();
    for (size_t i = 0; i < a->size() && i < max_items; ++i) items.push_back(gguf_value_to_json((*a)[i], max_items));
    if (a->size() <= max_items) return items;
    return {{"type", "array"}, {"elem_type", gguf::value_type_name(v.elem_type())}, {"count", a->size()},
            {"head", items}};
  }
  if (v.type() == ValueType::boolean) return *v.as_bool();
  if (v.type() == ValueType::string) return *v.as_string();
  if (v.is_float()) return *v.as_float();
  if (v.type() == ValueType::u64) return *v.as_uint();
  return *v.as_int();
}

namespace {

void fill_totals(ModelFileInfo& info, const std::vector<ModelTensorInfo>& ts) {
  for (const auto& t : ts) {
    info.parameter_count += *checked_numel(t.shape);
    info.tensor_bytes += t.nbytes;
  }
}

class GgufModelFile final : public ModelFile {
 public:
  explicit GgufModelFile(gguf::File f) : f_(std::move(f)) {
    info_.format = "gguf";
    info_.format_version = fmt::format("v{}", f_.version());
    info_.metadata_json = nlohmann::json::object();
    for (const auto& [k, v] : f_.metadata()) {
      info_.metadata_json[k] = gguf_value_to_json(v);
      info_.metadata_text.emplace_back(k, v.summary());
    }
    for (const auto& t : f_.tensors()) tensors_.push_back({t.name, t.dtype, t.shape, t.nbytes, t.offset});
    fill_totals(info_, tensors_);
  }
  const ModelFileInfo& info() const override { return info_; }
  const std::vector<ModelTensorInfo>& tensors() const override { return tensors_; }
  Result<Tensor> tensor(const std::string& name) const override { return f_.tensor(name); }
  const gguf::File* gguf() const override { return &f_; }

 private:
  gguf::File f_;
  ModelFileInfo info_;
  std::vector<ModelTensorInfo> tensors_;
};

}  // namespace

Result<std::unique_ptr<ModelFile>> open_model_safetensors(const std::string& path);  // model_file_st.cpp
Result<std::unique_ptr<ModelFile>> open_model_checkpoint(const std::string& dir);    // model_file_st.cpp

Result<std::unique_ptr<ModelFile>> open_model_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return error(StatusCode::not_found, "model '{}' does not exist: give a .gguf file, a .safetensors file or a "
                 "checkpoint directory", path);
  if (S_ISDIR(st.st_mode)) return open_model_checkpoint(path);
  char magic[4] = {};
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    const size_t n = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (n == 4 && std::string_view(magic, 4) == "GGUF") {
      LITHE_ASSIGN(gguf::File g, gguf::File::open(path));
      return std::unique_ptr<ModelFile>(std::make_unique<GgufModelFile>(std::move(g)));
    }
  } else {
    return error(StatusCode::io_error, "cannot open model '{}'", path);
  }
  return open_model_safetensors(path);
}

}  // namespace lithe

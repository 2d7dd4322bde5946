// Export a Llama-family model (GGUF file or checkpoint directory) as a Hugging Face directory:
// config.json, generation_config.json, model.safetensors (sharded past 4 GiB) and, when the
// source has a tokenizer, tokenizer.json + tokenizer_config.json. Weights are dequantized with
// the reference kernels and stored as f16, bf16 or f32; GGUF q/k rows are un-permuted.
// The directory is written to a temporary sibling and renamed into place.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "lithe/core/dtype.h"
#include "lithe/formats/hf_config.h"
#include "lithe/formats/model_file.h"

namespace lithe {

struct HfExportOptions {
  std::string out_dir;
  DType dtype = DType::f16;  // f16 | bf16 | f32
  bool force = false;        // replace an existing out_dir
  uint64_t max_shard_bytes = uint64_t{4} << 30;
};

struct HfExportReport {
  int tensors = 0;
  uint64_t bytes = 0;
  bool tokenizer = false;
};

Result<HfExportReport> export_hf(const ModelFile& model, const HfExportOptions& opts);

// ---- Pieces shared with other Hugging Face-style writers (compress/checkpoint.cpp) ----

// The HF config export_hf writes for `model` (from GGUF metadata or config.json), torch_dtype
// set from `dtype`. A GGUF with rope_freqs.weight is unsupported; a bare safetensors file has no
// config (invalid_argument).
Result<HfLlamaConfig> hf_export_config(const ModelFile& model, DType dtype);

// One source tensor as export_hf stores it: HF name, GGUF q/k rows un-permuted, in `dtype`.
struct HfTensor {
  std::string name;
  Tensor tensor;
};
Result<HfTensor> hf_export_tensor(const ModelFile& model, const ModelTensorInfo& ti, const HfLlamaConfig& cfg,
                                  DType dtype);

// config.json (to_json(cfg) with the keys of `extra` merged over it) and generation_config.json.
Status write_hf_config_files(const std::string& dir, const HfLlamaConfig& cfg,
                             const nlohmann::json& extra = nlohmann::json::object());

// A temporary sibling of `out`, removed on failure; renamed onto `out` by commit_staging.
struct StagingDir {
  std::filesystem::path out, tmp;
  bool done = false;
  StagingDir() = default;
  StagingDir(StagingDir&& o) noexcept;
  StagingDir& operator=(StagingDir&&) = delete;
  ~StagingDir();
};
// already_exists (naming out_dir and --force) when out_dir exists and !force.
Result<StagingDir> make_staging(const std::string& out_dir, bool force);
Status commit_staging(StagingDir& s);

}  // namespace lithe

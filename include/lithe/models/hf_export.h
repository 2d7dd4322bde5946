// Export a Llama-family model (GGUF file or checkpoint directory) as a Hugging Face directory:
// config.json, generation_config.json, model.safetensors (sharded past 4 GiB) and, when the
// source has a tokenizer, tokenizer.json + tokenizer_config.json. Weights are dequantized with
// the reference kernels and stored as f16, bf16 or f32; GGUF q/k rows are un-permuted.
// The directory is written to a temporary sibling and renamed into place.
#pragma once

#include <string>

#include "lithe/core/dtype.h"
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

}  // namespace lithe

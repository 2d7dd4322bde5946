// Writers of compressed checkpoints (on-disk layouts in compress/checkpoint.h): the lithe
// checkpoint of a loaded model with some linears replaced by their compressed form, and
// `lithe export --format gptq` (AutoGPTQ layout of a 4- or 8-bit lithe checkpoint). Both write a
// temporary sibling directory and rename it into place.
#pragma once

#include <string>
#include <vector>

#include "lithe/compress/checkpoint.h"

namespace lithe {
class Model;
}

namespace lithe::compress {

struct CheckpointWriteOptions {
  DType dtype = DType::f16;        // non-compressed tensors: f16 | bf16 | f32
  DType scale_dtype = DType::f16;  // f16 (GPTQ-like) or f32 (dequantizes exactly to the solver's values)
  bool force = false;              // replace an existing out_dir
  uint64_t max_shard_bytes = uint64_t{4} << 30;
};

// Writes the lithe checkpoint of `src` (its file, config and tokenizer) with `linears` replacing
// the corresponding <hf_name>.weight tensors. Refuses an existing out_dir unless opts.force.
Status write_lithe_checkpoint(const Model& src, const std::vector<CompressedLinear>& linears,
                              const CompressionInfo& info, const std::string& out_dir,
                              const CheckpointWriteOptions& opts = {});

struct GptqExportReport {
  int linears = 0, tensors = 0;
  bool tokenizer = false;
};
// `lithe export --format gptq`: a lithe checkpoint (bits 4 or 8; invalid_argument naming the bits
// otherwise) rewritten in the AutoGPTQ layout (compress/checkpoint.h). Masks are dropped (pruned weights are the
// zero code already). Atomic directory write; refuses an existing out_dir unless force.
Result<GptqExportReport> export_gptq(const ModelFile& lithe_ckpt, const std::string& out_dir, bool force);

}  // namespace lithe::compress

// Architecture-neutral hyperparameters of a decoder-only transformer, filled by an architecture's
// loader from GGUF metadata or config.json. Everything the forward pass reads lives here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/formats/hf_config.h"
#include "lithe/kernels/cpu.h"

namespace lithe {

struct ModelConfig {
  std::string arch;        // registry name: llama, mistral, qwen2
  int64_t n_layers = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t d_ff = 0;
  int64_t vocab_size = 0;
  int64_t max_context = 0;  // trained context length
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t rope_dim = 0;     // rotated dimensions per head (== head_dim for these families)
  RopeScaling rope_scaling;
  cpu::RopeStyle rope_style = cpu::RopeStyle::interleaved;  // interleaved for permuted GGUF q/k
  bool tied_embeddings = false;
  bool qkv_bias = false;
  std::vector<int32_t> eos_ids;
  int32_t bos_id = -1;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Checks ranges and divisibility; errors name the field.
  Status validate() const;
};

// inv_freq of the rotary embedding, with linear or llama3 scaling applied.
cpu::RopeTable make_rope_table(const ModelConfig& c);

}  // namespace lithe

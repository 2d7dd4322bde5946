// Llama-family tensor names: GGUF ("blk.3.attn_q.weight") <-> Hugging Face
// ("model.layers.3.self_attn.q_proj.weight"), and the row permutation llama.cpp's converter
// applies to q/k projections of the "llama" architecture (interleaved RoPE pairs in GGUF,
// rotate-half layout in HF).
#pragma once

#include <string>
#include <string_view>

#include "lithe/core/tensor.h"
#include "lithe/formats/hf_config.h"

namespace lithe {
namespace gguf { class File; }

enum class RopePermute { none, q, k };

struct HfName {
  std::string name;
  RopePermute permute = RopePermute::none;
};

// Maps a GGUF tensor name of a Llama-family model to its HF name. `permute_qk` says whether the
// architecture's converter permuted q/k (llama, mistral: yes; qwen2: no).
// Unknown names give not_found naming the tensor.
Result<HfName> gguf_to_hf_name(std::string_view gguf_name, bool permute_qk);
Result<std::string> hf_to_gguf_name(std::string_view hf_name);

// Undoes llama.cpp's q/k permutation on rows: `t` is [n_heads * head_dim, cols] (or a bias
// [n_heads * head_dim]); returns a new f32 tensor in HF's rotate-half layout.
Result<Tensor> unpermute_rope_rows(const Tensor& t_f32, int64_t n_heads);
// The forward permutation (HF -> GGUF), for round-trip tests and GGUF export.
Result<Tensor> permute_rope_rows(const Tensor& t_f32, int64_t n_heads);

// The architectures this mapping serves, from general.architecture.
bool is_llama_family_arch(std::string_view arch);  // llama, mistral, qwen2
bool arch_permutes_qk(std::string_view arch);

// HF config from GGUF metadata ({arch}.block_count, .embedding_length, ...) and the tensor table
// (no output.weight means tied embeddings). Errors name the missing or inconsistent key.
Result<HfLlamaConfig> llama_config_from_gguf(const gguf::File& f);

}  // namespace lithe

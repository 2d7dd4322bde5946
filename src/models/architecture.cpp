#include "lithe/models/architecture.h"

#include <fmt/ranges.h>

#include "lithe/formats/gguf.h"
#include "lithe/models/llama_names.h"

namespace lithe {

std::vector<const Architecture*>& architecture_registry() {
  static std::vector<const Architecture*> archs;
  return archs;
}

Result<const Architecture*> find_architecture(std::string_view name) {
  std::vector<std::string> known;
  for (const Architecture* a : architecture_registry()) {
    if (name == a->name) return a;
    known.emplace_back(a->name);
  }
  return error(StatusCode::unsupported, "unknown architecture '{}': lithe runs {}", name, fmt::join(known, ", "));
}

namespace {

ModelConfig from_hf_fields(const HfLlamaConfig& h) {
  ModelConfig c;
  c.n_layers = h.num_hidden_layers;
  c.d_model = h.hidden_size;
  c.n_heads = h.num_attention_heads;
  c.n_kv_heads = h.num_key_value_heads > 0 ? h.num_key_value_heads : h.num_attention_heads;
  c.head_dim = h.head_dim > 0 ? h.head_dim : h.hidden_size / std::max<int64_t>(1, h.num_attention_heads);
  c.rope_dim = c.head_dim;
  c.d_ff = h.intermediate_size;
  c.vocab_size = h.vocab_size;
  c.max_context = h.max_position_embeddings;
  c.rms_eps = h.rms_norm_eps;
  c.rope_theta = h.rope_theta;
  c.rope_scaling = h.rope_scaling;
  c.tied_embeddings = h.tie_word_embeddings;
  c.qkv_bias = h.attention_bias;
  for (int64_t id : h.eos_token_ids) c.eos_ids.push_back(static_cast<int32_t>(id));
  if (!h.bos_token_ids.empty()) c.bos_id = static_cast<int32_t>(h.bos_token_ids[0]);
  return c;
}

}  // namespace

Result<ModelConfig> config_from_gguf(const gguf::File& f) {
  LITHE_ASSIGN(std::string arch_name, f.get_string("general.architecture"));
  LITHE_ASSIGN(const Architecture* arch, find_architecture(arch_name));
  LITHE_ASSIGN(HfLlamaConfig h, llama_config_from_gguf(f));
  ModelConfig c = from_hf_fields(h);
  c.arch = arch->name;
  c.rope_dim = f.get_int_or(arch_name + ".rope.dimension_count", c.head_dim);
  c.rope_style = arch->gguf_interleaved_rope ? cpu::RopeStyle::interleaved : cpu::RopeStyle::half;
  arch->adjust(c);
  LITHE_TRY(c.validate().with_context(f.path()));
  return c;
}

Result<ModelConfig> config_from_hf(const HfLlamaConfig& h) {
  LITHE_ASSIGN(const Architecture* arch, find_architecture(h.model_type));
  ModelConfig c = from_hf_fields(h);
  c.arch = arch->name;
  c.rope_style = cpu::RopeStyle::half;  // HF checkpoints keep q/k in rotate-half order
  arch->adjust(c);
  LITHE_TRY(c.validate().with_context("config.json"));
  return c;
}

}  // namespace lithe

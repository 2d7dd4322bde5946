#include "lithe/models/llama_names.h"

#include <array>
#include <cstring>

#include "lithe/formats/gguf.h"

namespace lithe {
namespace {

struct NamePair {
  std::string_view gguf;  // suffix after "blk.N." for per-layer names, or the whole name
  std::string_view hf;    // suffix after "model.layers.N." or the whole name
  RopePermute permute;
};

constexpr std::array<NamePair, 3> kGlobal = {{
    {"token_embd.weight", "model.embed_tokens.weight", RopePermute::none},
    {"output_norm.weight", "model.norm.weight", RopePermute::none},
    {"output.weight", "lm_head.weight", RopePermute::none},
}};

constexpr std::array<NamePair, 14> kLayer = {{
    {"attn_norm.weight", "input_layernorm.weight", RopePermute::none},
    {"attn_q.weight", "self_attn.q_proj.weight", RopePermute::q},
    {"attn_k.weight", "self_attn.k_proj.weight", RopePermute::k},
    {"attn_v.weight", "self_attn.v_proj.weight", RopePermute::none},
    {"attn_output.weight", "self_attn.o_proj.weight", RopePermute::none},
    {"attn_q.bias", "self_attn.q_proj.bias", RopePermute::q},
    {"attn_k.bias", "self_attn.k_proj.bias", RopePermute::k},
    {"attn_v.bias", "self_attn.v_proj.bias", RopePermute::none},
    {"attn_output.bias", "self_attn.o_proj.bias", RopePermute::none},
    {"ffn_norm.weight", "post_attention_layernorm.weight", RopePermute::none},
    {"ffn_gate.weight", "mlp.gate_proj.weight", RopePermute::none},
    {"ffn_up.weight", "mlp.up_proj.weight", RopePermute::none},
    {"ffn_down.weight", "mlp.down_proj.weight", RopePermute::none},
    {"attn_rot_embd", "self_attn.rotary_emb.inv_freq", RopePermute::none},
}};

// Splits "<prefix><digits>.<rest>" into layer index and rest.
bool split_layer(std::string_view name, std::string_view prefix, long* layer, std::string_view* rest) {
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  size_t i = 0;
  long v = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 9) v = v * 10 + (name[i++] - '0');
  if (i == 0 || i >= name.size() || name[i] != '.') return false;
  *layer = v;
  *rest = name.substr(i + 1);
  return true;
}

// Row permutation between GGUF (per head: pairs (2i, 2i+1) interleaved) and HF (per head: first
// half, second half). to_hf: dst row h*D + half*D/2 + i takes src row h*D + 2i + half.
Result<Tensor> permute_rows(const Tensor& t, int64_t n_heads, bool to_hf) {
  if (t.dtype() != DType::f32 || t.device() != Device::cpu || !t.is_contiguous() || t.ndim() < 1 || t.ndim() > 2)
    return error(StatusCode::invalid_argument, "rope permutation needs a contiguous f32 host matrix or vector, got {}",
                 t.describe());
  const int64_t rows = t.dim(0);
  const int64_t cols = t.ndim() == 2 ? t.dim(1) : 1;
  if (n_heads <= 0 || rows % n_heads != 0 || (rows / n_heads) % 2 != 0)
    return error(StatusCode::invalid_argument, "cannot split {} rows into {} heads of even size", rows, n_heads);
  const int64_t d = rows / n_heads;
  LITHE_ASSIGN(Tensor out, Tensor::empty(DType::f32, t.shape()));
  const float* src = t.data_as<float>();
  float* dst = out.data_as<float>();
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t i = 0; i < d / 2; ++i) {
        const int64_t hf_row = h * d + half * (d / 2) + i;
        const int64_t gg_row = h * d + 2 * i + half;
        const int64_t from = to_hf ? gg_row : hf_row;
        const int64_t to = to_hf ? hf_row : gg_row;
        std::memcpy(dst + to * cols, src + from * cols, static_cast<size_t>(cols) * sizeof(float));
      }
  return out;
}

}  // namespace

Result<HfName> gguf_to_hf_name(std::string_view gguf_name, bool permute_qk) {
  for (const auto& p : kGlobal)
    if (p.gguf == gguf_name) return HfName{std::string(p.hf), RopePermute::none};
  long layer = 0;
  std::string_view rest;
  if (split_layer(gguf_name, "blk.", &layer, &rest)) {
    for (const auto& p : kLayer)
      if (p.gguf == rest)
        return HfName{fmt::format("model.layers.{}.{}", layer, p.hf), permute_qk ? p.permute : RopePermute::none};
  }
  return error(StatusCode::not_found, "GGUF tensor '{}' has no Hugging Face Llama-family name", gguf_name);
}

Result<std::string> hf_to_gguf_name(std::string_view hf_name) {
  for (const auto& p : kGlobal)
    if (p.hf == hf_name) return std::string(p.gguf);
  long layer = 0;
  std::string_view rest;
  if (split_layer(hf_name, "model.layers.", &layer, &rest)) {
    for (const auto& p : kLayer)
      if (p.hf == rest) return fmt::format("blk.{}.{}", layer, p.gguf);
  }
  return error(StatusCode::not_found, "Hugging Face tensor '{}' has no GGUF Llama-family name", hf_name);
}

Result<Tensor> unpermute_rope_rows(const Tensor& t, int64_t n_heads) { return permute_rows(t, n_heads, true); }
Result<Tensor> permute_rope_rows(const Tensor& t, int64_t n_heads) { return permute_rows(t, n_heads, false); }

bool is_llama_family_arch(std::string_view arch) { return arch == "llama" || arch == "mistral" || arch == "qwen2"; }
bool arch_permutes_qk(std::string_view arch) { return arch == "llama" || arch == "mistral"; }

Result<HfLlamaConfig> llama_config_from_gguf(const gguf::File& f) {
  LITHE_ASSIGN(std::string arch, f.get_string("general.architecture"));
  if (!is_llama_family_arch(arch))
    return error(StatusCode::unsupported, "'{}': architecture '{}' is not a Llama-family model (llama, mistral, qwen2)",
                 f.path(), arch);
  auto key = [&](const char* k) { return arch + "." + k; };
  HfLlamaConfig c;
  c.model_type = arch == "qwen2" ? "qwen2" : "llama";
  c.architectures = {arch == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  LITHE_ASSIGN(c.num_hidden_layers, f.get_int(key("block_count")));
  LITHE_ASSIGN(c.hidden_size, f.get_int(key("embedding_length")));
  LITHE_ASSIGN(c.intermediate_size, f.get_int(key("feed_forward_length")));
  LITHE_ASSIGN(c.num_attention_heads, f.get_int(key("attention.head_count")));
  c.num_key_value_heads = f.get_int_or(key("attention.head_count_kv"), c.num_attention_heads);
  c.max_position_embeddings = f.get_int_or(key("context_length"), 2048);
  c.rms_norm_eps = f.get_float_or(key("attention.layer_norm_rms_epsilon"), 1e-5);
  c.rope_theta = f.get_float_or(key("rope.freq_base"), 10000.0);
  if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
    return error(StatusCode::corrupt_file, "'{}': {} ({}) does not divide {} ({})", f.path(), key("attention.head_count"),
                 c.num_attention_heads, key("embedding_length"), c.hidden_size);
  c.head_dim = f.get_int_or(key("attention.key_length"), c.hidden_size / c.num_attention_heads);
  const std::string scaling = f.get_string_or(key("rope.scaling.type"), "none");
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::linear;
    c.rope_scaling.factor = f.get_float_or(key("rope.scaling.factor"), 1.0);
  } else if (scaling != "none") {
    return error(StatusCode::unsupported, "'{}': rope scaling '{}' is not supported", f.path(), scaling);
  }
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) return error(StatusCode::not_found, "'{}' has no tensor 'token_embd.weight'", f.path());
  c.vocab_size = f.get_int_or(key("vocab_size"), embd->shape.at(0));
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (const auto bos = f.get_int("tokenizer.ggml.bos_token_id"); bos) c.bos_token_ids = {*bos};
  if (const auto eos = f.get_int("tokenizer.ggml.eos_token_id"); eos) c.eos_token_ids = {*eos};
  return c;
}

}  // namespace lithe

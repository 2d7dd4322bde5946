// config.json of Llama-family Hugging Face checkpoints (model_type llama, mistral, qwen2; SmolLM2
// checkpoints are model_type llama). Parsing checks types and ranges with errors naming the field;
// to_json writes a config.json that `transformers` loads. Absent optional keys take the
// transformers defaults of the model type.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lithe/core/status.h"

namespace lithe {

// rope_scaling: absent/null/"default" -> none; "linear" divides positions by factor; "llama3"
// rescales frequencies by wavelength (Llama 3.1). Other types (dynamic, yarn, longrope...) are
// rejected naming the type.
struct RopeScaling {
  enum class Type { none, linear, llama3 };
  Type type = Type::none;
  double factor = 1.0;                                // linear, llama3
  double low_freq_factor = 1.0;                       // llama3
  double high_freq_factor = 4.0;                      // llama3
  int64_t original_max_position_embeddings = 8192;    // llama3
  bool operator==(const RopeScaling&) const = default;
};
std::string_view rope_scaling_name(RopeScaling::Type t);  // "none" | "linear" | "llama3"

struct HfLlamaConfig {
  std::string model_type = "llama";        // llama | mistral | qwen2
  std::vector<std::string> architectures;  // e.g. ["LlamaForCausalLM"]; may be empty
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;         // default: num_attention_heads (no GQA)
  int64_t head_dim = 0;                    // default: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;     // default per model type (llama 2048)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;             // q/k/v (and for llama o) projection biases; qwen2: always
  bool mlp_bias = false;
  std::string hidden_act = "silu";         // only silu is accepted
  std::optional<int64_t> sliding_window;   // mistral; qwen2 only with use_sliding_window
  std::vector<int64_t> bos_token_ids;      // bos_token_id: an int or a list (empty when null)
  std::vector<int64_t> eos_token_ids;      // eos_token_id: an int or a list (Llama 3.1 has three)
  std::string torch_dtype;                 // "bfloat16", "float16", "float32"; empty when absent
  bool operator==(const HfLlamaConfig&) const = default;
};

// Errors are invalid_argument naming the field ("config.json: field 'num_key_value_heads' (3) must
// divide num_attention_heads (32)"), or unsupported for a model_type / rope type / activation
// lithe does not implement.
Result<HfLlamaConfig> parse_hf_llama_config(const nlohmann::json& config);
// A config.json for the same family: model_type and architectures of cfg.model_type (llama ->
// "LlamaForCausalLM", mistral -> "MistralForCausalLM", qwen2 -> "Qwen2ForCausalLM").
nlohmann::json to_json(const HfLlamaConfig& cfg);

}  // namespace lithe

// config.json <-> HfLlamaConfig for llama, mistral and qwen2 model types.
#include "lithe/formats/hf_config.h"

#include <cmath>
#include <limits>

namespace lithe {
namespace {

using nlohmann::json;

// Sizes above this are surely wrong and would overflow int32 indexing in kernels.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

Status bad(const std::string& field, const std::string& msg) {
  return Status(StatusCode::invalid_argument, fmt::format("config.json: field '{}' {}", field, msg));
}

// Reads keys of one JSON object; a key holding null counts as absent (transformers treats None
// as "use the default").
class Reader {
 public:
  Reader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  const json* find(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string field(const std::string& key) const { return prefix_ + key; }

  // An integer in [lo, hi]; `def` when absent, an error when absent and there is no default.
  Result<int64_t> integer(const std::string& key, std::optional<int64_t> def, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (def) return *def;
      return bad(field(key), "is required");
    }
    if (!v->is_number_integer()) return bad(field(key), fmt::format("must be an integer, got {}", brief(*v)));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
      return bad(field(key), fmt::format("({}) must be at most {}", brief(*v), hi));
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return bad(field(key), fmt::format("({}) must be in [{}, {}]", x, lo, hi));
    return x;
  }
  // A finite number > lo (strictly) when `open` else >= lo.
  Result<double> number(const std::string& key, double def, double lo, bool open) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_number()) return bad(field(key), fmt::format("must be a number, got {}", brief(*v)));
    const double x = v->get<double>();
    if (!std::isfinite(x) || (open ? x <= lo : x < lo))
      return bad(field(key), fmt::format("({}) must be finite and {} {}", x, open ? ">" : ">=", lo));
    return x;
  }
  Result<bool> boolean(const std::string& key, bool def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) return bad(field(key), fmt::format("must be true or false, got {}", brief(*v)));
    return v->get<bool>();
  }
  Result<std::string> string(const std::string& key, const std::string& def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_string()) return bad(field(key), fmt::format("must be a string, got {}", brief(*v)));
    return v->get<std::string>();
  }
  // An int, a list of ints, or absent (-> def); each id in [0, limit).
  Result<std::vector<int64_t>> token_ids(const std::string& key, std::vector<int64_t> def, int64_t limit) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    std::vector<int64_t> out;
    auto take = [&](const json& x) -> Status {
      if (!x.is_number_integer())
        return bad(field(key), fmt::format("must be a token id or a list of them, got {}", brief(x)));
      if (x.is_number_unsigned() ? x.get<uint64_t>() >= static_cast<uint64_t>(limit)
                                 : (x.get<int64_t>() < 0 || x.get<int64_t>() >= limit))
        return bad(field(key), fmt::format("token id {} is outside the vocabulary [0, {})", brief(x), limit));
      out.push_back(x.get<int64_t>());
      return Status::ok();
    };
    if (v->is_array()) {
      for (const json& x : *v) LITHE_TRY(take(x));
    } else {
      LITHE_TRY(take(*v));
    }
    return out;
  }

 private:
  const json& obj_;
  std::string prefix_;
};

Result<RopeScaling> parse_rope_scaling(const json& rs, const std::string& key) {
  if (!rs.is_object()) return bad(key, fmt::format("must be an object or null, got {}", brief(rs)));
  Reader r(rs, key + ".");
  // "rope_type" (current) or "type" (older configs).
  LITHE_ASSIGN(std::string type, r.string("rope_type", ""));
  if (type.empty()) {
    LITHE_ASSIGN(type, r.string("type", ""));
  }
  RopeScaling out;
  if (type.empty() || type == "default") return out;
  if (type == "linear") {
    out.type = RopeScaling::Type::linear;
    if (r.find("factor") == nullptr) return bad(key + ".factor", "is required for linear scaling");
    LITHE_ASSIGN(out.factor, r.number("factor", 0.0, 0.0, true));
    return out;
  }
  if (type == "llama3") {
    out.type = RopeScaling::Type::llama3;
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (r.find(k) == nullptr) return bad(key + "." + k, "is required for llama3 scaling");
    LITHE_ASSIGN(out.factor, r.number("factor", 0.0, 0.0, true));
    LITHE_ASSIGN(out.low_freq_factor, r.number("low_freq_factor", 0.0, 0.0, true));
    LITHE_ASSIGN(out.high_freq_factor, r.number("high_freq_factor", 0.0, 0.0, true));
    LITHE_ASSIGN(out.original_max_position_embeddings,
                 r.integer("original_max_position_embeddings", std::nullopt, 1, kMaxSize));
    if (out.high_freq_factor <= out.low_freq_factor)
      return bad(key + ".high_freq_factor",
                 fmt::format("({}) must be greater than low_freq_factor ({})", out.high_freq_factor, out.low_freq_factor));
    return out;
  }
  return Status(StatusCode::unsupported,
                fmt::format("config.json: field '{}' has rope type '{}', which lithe does not support (supported: "
                            "default, linear, llama3)", key, type));
}

const char* architecture_of(const std::string& model_type) {
  if (model_type == "mistral") return "MistralForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

json ids_to_json(const std::vector<int64_t>& ids) {
  if (ids.empty()) return nullptr;
  if (ids.size() == 1) return ids[0];
  return ids;
}

}  // namespace

std::string_view rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::none: return "none";
    case RopeScaling::Type::linear: return "linear";
    case RopeScaling::Type::llama3: return "llama3";
  }
  return "none";
}

Result<HfLlamaConfig> parse_hf_llama_config(const json& config) {
  if (!config.is_object()) return error(StatusCode::invalid_argument, "config.json must hold a JSON object");
  Reader r(config, "");
  HfLlamaConfig c;

  // Family first: it picks the defaults.
  if (r.find("model_type") == nullptr) return bad("model_type", "is required (llama, mistral or qwen2)");
  LITHE_ASSIGN(c.model_type, r.string("model_type", ""));
  const bool is_mistral = c.model_type == "mistral";
  const bool is_qwen2 = c.model_type == "qwen2";
  if (c.model_type != "llama" && !is_mistral && !is_qwen2)
    return error(StatusCode::unsupported,
                 "config.json: field 'model_type' is '{}', which is not a Llama-family model lithe supports "
                 "(llama, mistral, qwen2)", c.model_type);
  if (const json* a = r.find("architectures")) {
    if (!a->is_array()) return bad("architectures", fmt::format("must be a list of strings, got {}", brief(*a)));
    for (const json& s : *a) {
      if (!s.is_string()) return bad("architectures", fmt::format("must be a list of strings, got {}", brief(s)));
      c.architectures.push_back(s.get<std::string>());
    }
  }

  LITHE_ASSIGN(c.vocab_size, r.integer("vocab_size", std::nullopt, 1, kMaxSize));
  LITHE_ASSIGN(c.hidden_size, r.integer("hidden_size", std::nullopt, 1, kMaxSize));
  LITHE_ASSIGN(c.intermediate_size, r.integer("intermediate_size", std::nullopt, 1, kMaxSize));
  LITHE_ASSIGN(c.num_hidden_layers, r.integer("num_hidden_layers", std::nullopt, 1, kMaxSize));
  LITHE_ASSIGN(c.num_attention_heads, r.integer("num_attention_heads", std::nullopt, 1, kMaxSize));
  // transformers' class defaults for an absent key differ by family (mistral 8, qwen2 32); every
  // real config states it, and "no GQA" is the only default that is never inconsistent.
  LITHE_ASSIGN(c.num_key_value_heads, r.integer("num_key_value_heads", c.num_attention_heads, 1, kMaxSize));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return bad("num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})", c.num_key_value_heads,
                                                  c.num_attention_heads));
  if (r.find("head_dim") != nullptr) {
    // An explicit head_dim need not equal hidden_size / heads (q/o project to heads * head_dim).
    LITHE_ASSIGN(c.head_dim, r.integer("head_dim", std::nullopt, 1, kMaxSize));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      return bad("num_attention_heads", fmt::format("({}) must divide hidden_size ({})", c.num_attention_heads,
                                                    c.hidden_size));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  const int64_t max_pos_default = is_mistral ? 4096 * 32 : is_qwen2 ? 32768 : 2048;
  LITHE_ASSIGN(c.max_position_embeddings, r.integer("max_position_embeddings", max_pos_default, 1, kMaxSize));
  LITHE_ASSIGN(c.rms_norm_eps, r.number("rms_norm_eps", 1e-6, 0.0, true));
  if (c.rms_norm_eps >= 1.0) return bad("rms_norm_eps", fmt::format("({}) must be below 1", c.rms_norm_eps));

  // RoPE: top-level rope_theta / rope_scaling, or transformers v5's rope_parameters.
  const json* rope_params = r.find("rope_parameters");
  if (rope_params != nullptr && !rope_params->is_object())
    return bad("rope_parameters", fmt::format("must be an object, got {}", brief(*rope_params)));
  if (r.find("rope_theta") == nullptr && rope_params != nullptr) {
    LITHE_ASSIGN(c.rope_theta, Reader(*rope_params, "rope_parameters.").number("rope_theta", 10000.0, 0.0, true));
  } else {
    LITHE_ASSIGN(c.rope_theta, r.number("rope_theta", 10000.0, 0.0, true));
  }
  if (const json* rs = r.find("rope_scaling")) {
    LITHE_ASSIGN(c.rope_scaling, parse_rope_scaling(*rs, "rope_scaling"));
  } else if (rope_params != nullptr) {
    LITHE_ASSIGN(c.rope_scaling, parse_rope_scaling(*rope_params, "rope_parameters"));
  }

  LITHE_ASSIGN(c.tie_word_embeddings, r.boolean("tie_word_embeddings", false));
  // Qwen2 always has q/k/v biases; Mistral never has any (transformers ignores the key there).
  if (is_qwen2) {
    c.attention_bias = true;
  } else if (!is_mistral) {
    LITHE_ASSIGN(c.attention_bias, r.boolean("attention_bias", false));
    LITHE_ASSIGN(c.mlp_bias, r.boolean("mlp_bias", false));
  }
  LITHE_ASSIGN(c.hidden_act, r.string("hidden_act", "silu"));
  if (c.hidden_act != "silu")
    return error(StatusCode::unsupported,
                 "config.json: field 'hidden_act' is '{}'; Llama-family models in lithe use silu", c.hidden_act);
  if (is_mistral) {
    if (config.contains("sliding_window")) {  // null: full attention
      if (r.find("sliding_window") != nullptr) {
        LITHE_ASSIGN(c.sliding_window, r.integer("sliding_window", std::nullopt, 1, kMaxSize));
      }
    } else {
      c.sliding_window = 4096;
    }
  } else if (is_qwen2) {
    LITHE_ASSIGN(bool use_sw, r.boolean("use_sliding_window", false));
    if (use_sw) {
      LITHE_ASSIGN(c.sliding_window, r.integer("sliding_window", 4096, 1, kMaxSize));
    }
  }

  // Llama and Mistral default to bos 1 / eos 2 when the key is absent; Qwen2 has no default.
  const std::vector<int64_t> bos_def = is_qwen2 ? std::vector<int64_t>{} : std::vector<int64_t>{1};
  const std::vector<int64_t> eos_def = is_qwen2 ? std::vector<int64_t>{} : std::vector<int64_t>{2};
  LITHE_ASSIGN(c.bos_token_ids, r.token_ids("bos_token_id", config.contains("bos_token_id") ? std::vector<int64_t>{} : bos_def,
                                            c.vocab_size));
  LITHE_ASSIGN(c.eos_token_ids, r.token_ids("eos_token_id", config.contains("eos_token_id") ? std::vector<int64_t>{} : eos_def,
                                            c.vocab_size));

  // torch_dtype (transformers v5 writes "dtype").
  const std::string dtype_key = r.find("torch_dtype") == nullptr && r.find("dtype") != nullptr ? "dtype" : "torch_dtype";
  LITHE_ASSIGN(c.torch_dtype, r.string(dtype_key, ""));
  if (!c.torch_dtype.empty() && c.torch_dtype != "float32" && c.torch_dtype != "float16" &&
      c.torch_dtype != "bfloat16" && c.torch_dtype != "float64")
    return bad(dtype_key, fmt::format("('{}') must be float32, float16, bfloat16 or float64", c.torch_dtype));
  return c;
}

json to_json(const HfLlamaConfig& c) {
  const bool is_mistral = c.model_type == "mistral";
  const bool is_qwen2 = c.model_type == "qwen2";
  json j = json::object();
  j["architectures"] = json::array({architecture_of(c.model_type)});
  j["model_type"] = is_mistral || is_qwen2 ? c.model_type : "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  switch (c.rope_scaling.type) {
    case RopeScaling::Type::none: j["rope_scaling"] = nullptr; break;
    case RopeScaling::Type::linear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
      break;
    case RopeScaling::Type::llama3:
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
      break;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!is_mistral && !is_qwen2) {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
  }
  j["hidden_act"] = c.hidden_act;
  if (is_mistral) j["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  if (is_qwen2) {
    j["use_sliding_window"] = c.sliding_window.has_value();
    if (c.sliding_window) j["sliding_window"] = *c.sliding_window;
  }
  j["bos_token_id"] = ids_to_json(c.bos_token_ids);
  j["eos_token_id"] = ids_to_json(c.eos_token_ids);
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  return j;
}

}  // namespace lithe

// config.json parsing for Llama-family models: real configs, defaults, validation, to_json.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "lithe/formats/hf_config.h"

namespace lithe {
namespace {

using nlohmann::json;

void expect_error(const Result<HfLlamaConfig>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning " << *parts.begin();
  for (const auto& p : parts)
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message '" << r.status().message() << "' does not mention '" << p << "'";
}

// SmolLM2-135M's config.json (model_type llama, tied embeddings, GQA 9/3).
json smollm2() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9,
    "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 49152})");
}

// Llama 3.1 8B: llama3 rope scaling, three eos ids.
json llama31() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})");
}

// Qwen2.5-0.5B: q/k/v biases implied by the model type.
json qwen25() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// Mistral 7B v0.1: sliding window.
json mistral() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "vocab_size": 32000})");
}

json minimal() {
  return json{{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 64}, {"intermediate_size", 128},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
}

TEST(HfConfig, SmolLM2) {
  auto c = parse_hf_llama_config(smollm2());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->num_hidden_layers, 30);
  EXPECT_EQ(c->num_attention_heads, 9);
  EXPECT_EQ(c->num_key_value_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 100000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::none);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{0});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{0});
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  EXPECT_FALSE(c->sliding_window.has_value());
}

TEST(HfConfig, Llama31RopeScalingAndEosList) {
  auto c = parse_hf_llama_config(llama31());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(rope_scaling_name(c->rope_scaling.type), "llama3");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{128000});
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
}

TEST(HfConfig, Qwen2ImpliesAttentionBias) {
  auto c = parse_hf_llama_config(qwen25());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_FALSE(c->sliding_window.has_value());  // use_sliding_window false
  json sw = qwen25();
  sw["use_sliding_window"] = true;
  EXPECT_EQ(parse_hf_llama_config(sw)->sliding_window, 32768);
}

TEST(HfConfig, MistralSlidingWindow) {
  auto c = parse_hf_llama_config(mistral());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_FALSE(c->attention_bias);
  json j = mistral();
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(parse_hf_llama_config(j)->sliding_window.has_value());
  j.erase("sliding_window");
  EXPECT_EQ(parse_hf_llama_config(j)->sliding_window, 4096);  // MistralConfig's default
}

TEST(HfConfig, DefaultsForAbsentKeys) {
  auto c = parse_hf_llama_config(minimal());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  EXPECT_TRUE(c->torch_dtype.empty());
  EXPECT_TRUE(c->architectures.empty());
  // Null means "default" as in transformers; null token ids mean "none".
  json j = minimal();
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  j["bos_token_id"] = nullptr;
  auto n = parse_hf_llama_config(j);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n->num_key_value_heads, 4);
  EXPECT_EQ(n->head_dim, 16);
  EXPECT_TRUE(n->bos_token_ids.empty());
  // An explicit head_dim need not be hidden / heads.
  j["head_dim"] = 32;
  EXPECT_EQ(parse_hf_llama_config(j)->head_dim, 32);
}

TEST(HfConfig, RopeScalingVariants) {
  json j = minimal();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // older key name
  auto c = parse_hf_llama_config(j);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_hf_llama_config(j)->rope_scaling.type, RopeScaling::Type::none);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto y = parse_hf_llama_config(j);
  expect_error(y, {"rope_scaling", "'yarn'"});
  EXPECT_EQ(y.status().code(), StatusCode::unsupported);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  expect_error(parse_hf_llama_config(j), {"'dynamic'"});
  j["rope_scaling"] = {{"rope_type", "linear"}};
  expect_error(parse_hf_llama_config(j), {"'rope_scaling.factor'", "required"});
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -1}};
  expect_error(parse_hf_llama_config(j), {"'rope_scaling.factor'"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
  expect_error(parse_hf_llama_config(j), {"'rope_scaling.high_freq_factor'", "required"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  expect_error(parse_hf_llama_config(j), {"'rope_scaling.high_freq_factor'", "greater"});
  j["rope_scaling"] = "linear";
  expect_error(parse_hf_llama_config(j), {"'rope_scaling'", "object"});
  // transformers v5 keeps theta and scaling in rope_parameters.
  json v5 = minimal();
  v5["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 3.0}, {"rope_theta", 5e5}};
  auto p = parse_hf_llama_config(v5);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_DOUBLE_EQ(p->rope_theta, 5e5);
  EXPECT_EQ(p->rope_scaling.type, RopeScaling::Type::linear);
  EXPECT_DOUBLE_EQ(p->rope_scaling.factor, 3.0);
}

TEST(HfConfig, ValidationNamesTheField) {
  auto with = [](const char* key, json v) {
    json j = minimal();
    j[key] = std::move(v);
    return parse_hf_llama_config(j);
  };
  auto without = [](const char* key) {
    json j = minimal();
    j.erase(key);
    return parse_hf_llama_config(j);
  };
  expect_error(parse_hf_llama_config(json::array()), {"JSON object"});
  expect_error(without("model_type"), {"'model_type'", "required"});
  auto gpt2 = with("model_type", "gpt2");
  expect_error(gpt2, {"'model_type'", "'gpt2'"});
  EXPECT_EQ(gpt2.status().code(), StatusCode::unsupported);
  expect_error(with("model_type", 3), {"'model_type'", "string"});
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    SCOPED_TRACE(k);
    expect_error(without(k), {fmt::format("'{}'", k), "required"});
    expect_error(with(k, 0), {fmt::format("'{}'", k)});
    expect_error(with(k, -5), {fmt::format("'{}'", k)});
    expect_error(with(k, 64.5), {fmt::format("'{}'", k), "integer"});
    expect_error(with(k, "64"), {fmt::format("'{}'", k), "integer"});
    expect_error(with(k, json(18446744073709551615ull)), {fmt::format("'{}'", k)});
  }
  expect_error(with("num_attention_heads", 5), {"'num_attention_heads'", "hidden_size"});
  expect_error(with("num_key_value_heads", 3), {"'num_key_value_heads'", "divide"});
  expect_error(with("num_key_value_heads", 0), {"'num_key_value_heads'"});
  expect_error(with("head_dim", 0), {"'head_dim'"});
  expect_error(with("max_position_embeddings", 0), {"'max_position_embeddings'"});
  expect_error(with("rms_norm_eps", 0), {"'rms_norm_eps'"});
  expect_error(with("rms_norm_eps", 2.0), {"'rms_norm_eps'"});
  expect_error(with("rms_norm_eps", "1e-5"), {"'rms_norm_eps'", "number"});
  expect_error(with("rope_theta", -1.0), {"'rope_theta'"});
  expect_error(with("tie_word_embeddings", 1), {"'tie_word_embeddings'", "true or false"});
  expect_error(with("attention_bias", "yes"), {"'attention_bias'"});
  expect_error(with("bos_token_id", 100), {"'bos_token_id'", "vocabulary"});
  expect_error(with("eos_token_id", json({1, -2})), {"'eos_token_id'"});
  expect_error(with("eos_token_id", "2"), {"'eos_token_id'"});
  expect_error(with("architectures", "LlamaForCausalLM"), {"'architectures'"});
  expect_error(with("architectures", json({1})), {"'architectures'"});
  expect_error(with("torch_dtype", "int8"), {"'torch_dtype'", "'int8'"});
  expect_error(with("hidden_act", "gelu"), {"'hidden_act'", "'gelu'"});
  expect_error(with("rope_parameters", 5), {"'rope_parameters'"});
}

TEST(HfConfig, ToJsonRoundTrips) {
  for (const json& src : {smollm2(), llama31(), qwen25(), mistral(), minimal()}) {
    auto c = parse_hf_llama_config(src);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    const json out = to_json(*c);
    auto back = parse_hf_llama_config(out);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string() << "\n" << out.dump(2);
    HfLlamaConfig expect = *c;
    expect.architectures = out["architectures"].get<std::vector<std::string>>();
    EXPECT_EQ(*back, expect) << out.dump(2);
  }
}

TEST(HfConfig, ToJsonForLlama) {
  const json out = to_json(*parse_hf_llama_config(llama31()));
  EXPECT_EQ(out["model_type"], "llama");
  EXPECT_EQ(out["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(out["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(out["rope_scaling"]["original_max_position_embeddings"], 8192);
  EXPECT_EQ(out["eos_token_id"], json({128001, 128008, 128009}));
  EXPECT_EQ(out["bos_token_id"], 128000);
  EXPECT_EQ(out["num_key_value_heads"], 8);
  EXPECT_EQ(out["head_dim"], 128);
  EXPECT_EQ(out["torch_dtype"], "bfloat16");
  EXPECT_EQ(out["hidden_act"], "silu");
  EXPECT_EQ(out["tie_word_embeddings"], false);
  const json smol = to_json(*parse_hf_llama_config(smollm2()));
  EXPECT_TRUE(smol["rope_scaling"].is_null());
  EXPECT_EQ(smol["tie_word_embeddings"], true);
  const json q = to_json(*parse_hf_llama_config(qwen25()));
  EXPECT_EQ(q["model_type"], "qwen2");
  EXPECT_EQ(q["architectures"], json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(q["use_sliding_window"], false);
}

}  // namespace
}  // namespace lithe

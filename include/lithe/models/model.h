// A loaded decoder-only model: config, weights in their stored format (or f32 with
// dequantize), its tokenizer, and the forward pass of the shared Llama block on a Backend.
//
// Forward takes a batch of sequences, each with its own KV cache, runs every linear layer once
// over all their new tokens (so prefill and batched decode use matrix-matrix kernels), and
// returns logits for the last token of each sequence, or for all its tokens.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lithe/formats/model_file.h"
#include "lithe/models/model_config.h"
#include "lithe/runtime/backend.h"
#include "lithe/runtime/kv_cache.h"
#include "lithe/tokenizer/tokenizer.h"

namespace lithe {

struct LayerWeights {
  Tensor attn_norm, wq, wk, wv, wo, bq, bk, bv;  // biases only when config.qkv_bias
  Tensor ffn_norm, w_gate, w_up, w_down;
};

struct ModelWeights {
  Tensor tok_embd;  // [vocab, d_model]
  Tensor out_norm;  // [d_model]
  Tensor output;    // [vocab, d_model]; the embedding itself when tied
  std::vector<LayerWeights> layers;
};

// The shapes of a well-known model by name (llama2-7b, llama3-8b, llama2-13b), for synthetic runs.
Result<ModelConfig> synthetic_config(std::string_view name);

struct LoadOptions {
  Device device = Device::cpu;
  bool dequantize = false;  // every matrix as f32: the full-precision baseline
};

struct SequenceInput {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;  // one per token
  bool all_logits = false;             // logits for every token (perplexity) or just the last
};

class Model {
 public:
  // A .gguf file or a checkpoint directory (config.json + safetensors + tokenizer.json).
  static Result<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& chat_template() const { return chat_template_; }
  Backend& backend() { return *backend_; }
  const ModelWeights& weights() const { return weights_; }
  // Bytes of weights one decode step reads (every matrix once, the embedding row negligible).
  uint64_t weight_bytes_per_token() const;
  const std::string& path() const { return path_; }

  Result<KvCache> new_cache(int64_t capacity, DType kv_dtype = DType::f32);

  // Logits rows in batch order: for each sequence, all its tokens or only the last one.
  // logits has rows x vocab_size floats afterwards.
  Status forward(std::span<const SequenceInput> batch, std::vector<float>& logits);
  // One sequence; positions continue from cache.size().
  Status forward(KvCache& cache, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);
  // As forward, but only the k largest logits of each row leave the backend (value descending,
  // ties by smaller id): vals/ids have rows x k entries afterwards. Greedy and top-k sampling
  // need nothing more, so a GPU copies k values per token instead of the vocabulary.
  Status forward_top_k(std::span<const SequenceInput> batch, int k, std::vector<float>& vals,
                       std::vector<int32_t>& ids);
  Status forward_top_k(KvCache& cache, std::span<const int32_t> tokens, int k, std::vector<float>& vals,
                       std::vector<int32_t>& ids);
  // A model with `config`'s shapes and uniform random weights of `dtype` made on the device (no
  // file, no tokenizer): for measuring speed at real sizes without real weights.
  static Result<std::unique_ptr<Model>> synthetic(const ModelConfig& config, DType dtype, Device device,
                                                  uint64_t seed = 1);
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

 private:
  Model() = default;
  // Runs the batch and leaves its logits rows in logits_; returns the number of rows.
  Result<int64_t> forward_device(std::span<const SequenceInput> batch);
  Status forward_ops(std::span<const SequenceInput> batch, const std::vector<int32_t>& ids,
                     const std::vector<int32_t>& pos, int64_t m);
  Status run_layers(int64_t m, std::span<const SequenceInput> batch, const std::vector<int32_t>& pos);
  Status ensure_workspace(int64_t m, int64_t out_rows);

  std::string path_;
  std::unique_ptr<ModelFile> file_;  // keeps the mapped weights alive
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string chat_template_;
  ModelConfig config_;
  ModelWeights weights_;
  cpu::RopeTable rope_;
  std::vector<Tensor> owned_;  // dequantized weights when LoadOptions::dequantize

  // Activations, grown on demand (and otherwise stable, so a captured step stays valid): [rows, features].
  int64_t ws_rows_ = 0, out_rows_ = 0;
  uint64_t ws_generation_ = 0;  // bumped whenever a workspace tensor moves (part of the step key)
  Tensor x_, h_, q_, k_, v_, attn_, gate_, up_;
  Tensor head_in_, logits_;  // [out_rows, d_model], [out_rows, vocab]
};

}  // namespace lithe

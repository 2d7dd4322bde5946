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
#include "lithe/runtime/cache_policy.h"
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
  // A compressed checkpoint's quantized linears run packed, through the backend's gq kernels
  // (Backend::prepare_quantized); false, or a matrix no kernel runs: dequantized at load.
  bool packed_linears = true;
  // The linears (and the output head) also get the backend's batch layout (Backend::add_batch_layout):
  // faster batched steps for more memory (CPU q4_1: 2x its bytes or more). For serving.
  bool batch_layouts = false;
};

struct SequenceInput {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;  // one per token
  bool all_logits = false;             // logits for every token (perplexity) or just the last
};

// The linear layers of a block, and the four sites where their inputs are observed (layers of
// one site share one input: q/k/v the normed block input, gate/up the normed attention residual).
enum class LinearKind { q, k, v, o, gate, up, down };
enum class LinearSite { qkv, o, gate_up, down };
inline constexpr LinearKind kAllLinearKinds[] = {LinearKind::q,    LinearKind::k,  LinearKind::v,   LinearKind::o,
                                                 LinearKind::gate, LinearKind::up, LinearKind::down};
LinearSite site_of(LinearKind kind);
// GGUF-style tensor stem without the block prefix: "attn_q", ..., "ffn_down".
const char* linear_kind_name(LinearKind kind);
const char* linear_site_name(LinearSite site);

// Sees the input rows of each linear site while a block runs (calibration).
class LinearObserver {
 public:
  virtual ~LinearObserver() = default;
  // x: the site's input, f32 [>= m, n_in] contiguous on the model's backend device (host memory
  // on the cpu backend, device memory on cuda, where the ops that wrote it may still be running:
  // a device reader orders itself after them, e.g. by synchronizing the device); its first m
  // rows are valid only during the call. Return false to stop the block right there (the rest of
  // the block is skipped and its output is undefined).
  virtual bool on_input(int64_t layer, LinearSite site, const Tensor& x, int64_t m) = 0;
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
  // The file or checkpoint directory the weights were loaded from (kept open and mapped).
  const ModelFile& file() const { return *file_; }

  Result<KvCache> new_cache(int64_t capacity, DType kv_dtype = DType::f32);
  // A cache of spec's policy (cache_policy.h); a full one holds ctx tokens.
  Result<KvCache> new_cache(const CacheSpec& spec, int64_t ctx, DType kv_dtype = DType::f32);
  // A paged KV store for many sequences on this model's device (kv_pool.h), and a cache of
  // spec's policy in it (its blocks taken by KvCache::reserve).
  Result<std::shared_ptr<KvPool>> new_kv_pool(int64_t num_blocks, int64_t block_size, DType kv_dtype = DType::f32);
  Result<KvCache> new_cache(const CacheSpec& spec, int64_t ctx, std::shared_ptr<KvPool> pool);

  // Logits rows in batch order: for each sequence, all its tokens or only the last one.
  // logits has rows x vocab_size floats afterwards.
  Status forward(std::span<const SequenceInput> batch, std::vector<float>& logits);
  // One sequence; positions continue the cache's (a rolling cache assigns its own).
  Status forward(KvCache& cache, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);
  // As forward, but only the k largest logits of each row leave the backend (value descending,
  // ties by smaller id): vals/ids have rows x k entries afterwards. Greedy and top-k sampling
  // need nothing more, so a GPU copies k values per token instead of the vocabulary.
  Status forward_top_k(std::span<const SequenceInput> batch, int k, std::vector<float>& vals,
                       std::vector<int32_t>& ids);
  Status forward_top_k(KvCache& cache, std::span<const int32_t> tokens, int k, std::vector<float>& vals,
                       std::vector<int32_t>& ids);
  // forward_top_k in two halves (Backend::top_k_launch): the step and its top-k are queued, and
  // fetch_top_k returns the oldest queued result. With a token kArgmaxToken, the argmax of the
  // previous launch, greedy decoding queues step N+1 before step N's token reaches the host: the
  // host's work between steps (staging, sampling, text) overlaps the device's.
  Status launch_top_k(KvCache& cache, std::span<const int32_t> tokens, int k);
  Status fetch_top_k(std::vector<float>& vals, std::vector<int32_t>& ids);
  // One sequence's tokens, every row scored: out[i] = log p(targets[i] | tokens[..i]) (a negative
  // target gives 0). Only these floats leave the backend (perplexity on a GPU).
  Status forward_logprobs(KvCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                          std::vector<float>& out);
  // A model with `config`'s shapes and uniform random weights of `dtype` made on the device (no
  // file, no tokenizer): for measuring speed at real sizes without real weights. With `linears`,
  // the block's linear layers are random gq matrices of that format (group 0: per channel) packed
  // by the backend, and the other weights are of `dtype`.
  static Result<std::unique_ptr<Model>> synthetic(const ModelConfig& config, DType dtype, Device device,
                                                  uint64_t seed = 1, const QuantFormat* linears = nullptr);
  // The same by names, as the CLI takes them: synthetic_config(name) with weights of `dtype`
  // ("f16", "bf16", "f32", or a gq format for the linears as gq::parse_format reads it, e.g.
  // "int4-g128", with f16 embeddings); errors name the bad value. tokens_of: a model whose
  // tokenizer and chat template the synthetic one takes, its vocabulary size too (serving random
  // weights of a real shape: the text is noise, the speed is real).
  static Result<std::unique_ptr<Model>> synthetic(std::string_view name, std::string_view dtype, Device device,
                                                  uint64_t seed = 1, const Model* tokens_of = nullptr);
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

  // ---- block-wise execution for calibration (model/compress pipelines) ----
  // Activations live on the backend's device (host f32 on the cpu backend, device f32 on cuda).
  // x_out = the embeddings of ids: [ids.size(), d_model] f32 on the backend's device (allocated
  // if x_out is not such a tensor with enough rows).
  Status embed(std::span<const int32_t> ids, Tensor& x_out);
  // Runs block `layer` in place over x ([>= m, d_model] f32, contiguous, on the backend's device):
  // one sequence of m tokens at positions 0..m-1, causal, with a private scratch KV cache. obs
  // (may be null) sees each site's inputs in block order (qkv, o, gate_up, down) before those
  // linears run. On a device backend the ops are queued on the backend's stream and may still be
  // running on return.
  Status block_forward(int64_t layer, Tensor& x, int64_t m, LinearObserver* obs = nullptr);
  // The weight tensor of one linear, to be replaced by a compressed one. cpu backend: f32 host
  // weights only (a model loaded with dequantize): overwrite its data when its buffer is writable
  // (a dequantized copy), else assign a new [n_out, n_in] f32 host tensor (a read-only view of
  // the file). cuda backend: the device weight (f32, f16 or bf16), overwritten in place.
  Result<Tensor*> linear_weight(int64_t layer, LinearKind kind);

 private:
  Model() = default;
  // Runs the batch and leaves its logits rows in logits_; returns the number of rows.
  Result<int64_t> forward_device(std::span<const SequenceInput> batch);
  Status forward_ops(std::span<const SequenceInput> batch, const std::vector<int32_t>& ids,
                     const std::vector<int32_t>& pos, int64_t m);
  Status run_layers(int64_t m, std::span<const SequenceInput> batch, const std::vector<int32_t>& pos);
  // One block over the m rows of x_: attention reads/writes layer kv_layer of each sequence's
  // cache at `slots` (kv_layer == layer in forward; 0 for block_forward's one-layer scratch).
  Status run_block(int64_t layer, int64_t kv_layer, int64_t m, std::span<const SequenceInput> batch,
                   const std::vector<int32_t>& pos, const std::vector<std::vector<int64_t>>& slots,
                   LinearObserver* obs);
  // OK when x is an f32 contiguous [>= rows, d_model] tensor on the backend's device.
  Status check_block_tensor(const Tensor& x, int64_t rows, const char* what) const;
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
  KvCache block_cache_;      // block_forward's one-layer scratch cache
};

}  // namespace lithe

// Loading a model (any ModelFile + its tokenizer) and the forward pass of the shared Llama block.
#include "lithe/models/model.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "lithe/compress/checkpoint.h"
#include "lithe/core/log.h"
#include "lithe/formats/gguf.h"
#include "lithe/kernels/convert.h"
#include "lithe/models/architecture.h"
#include "lithe/models/llama_names.h"

namespace lithe {
namespace {

// Reads one weight by its GGUF-style name from a GGUF file or (renamed) a checkpoint directory,
// checking its shape.
class WeightReader {
 public:
  WeightReader(const ModelFile& f, bool gguf) : f_(f), gguf_(gguf) {}

  Result<Tensor> get(const std::string& gguf_name, const Shape& want) const {
    std::string name = gguf_name;
    if (!gguf_) {
      LITHE_ASSIGN(HfName n, gguf_to_hf_name(gguf_name, false));
      name = n.name;
    }
    auto t = f_.tensor(name);
    // Compressed checkpoints (lithe, gptq): <linear>.qweight instead of <linear>.weight is
    // dequantized on load to f32 (compress/checkpoint.h).
    if (!t && !gguf_ && name.ends_with(".weight")) {
      const std::string base = name.substr(0, name.size() - 7);
      if (exists(base + ".qweight")) {
        t = compress::read_compressed_linear(f_, base, DType::f32);
        if (!t) return t.status();
      }
    }
    if (!t) return error(StatusCode::not_found, "model is missing tensor '{}'", name);
    if (t->shape() != want)
      return error(StatusCode::invalid_argument, "tensor '{}' has shape {}, expected {} from the model config", name,
                   shape_str(t->shape()), shape_str(want));
    return t;
  }
  // The runtime form of a compressed checkpoint's quantized linear (compress/checkpoint.h), or
  // nullopt when the weight is stored otherwise.
  Result<std::optional<gq::Matrix>> quantized(const std::string& gguf_name, const Shape& want) const {
    if (gguf_) return std::optional<gq::Matrix>{};
    LITHE_ASSIGN(HfName n, gguf_to_hf_name(gguf_name, false));
    if (!n.name.ends_with(".weight") || exists(n.name)) return std::optional<gq::Matrix>{};
    const std::string base = n.name.substr(0, n.name.size() - 7);
    if (!exists(base + ".qweight")) return std::optional<gq::Matrix>{};
    LITHE_ASSIGN(gq::Matrix q, compress::read_runtime_linear(f_, base));
    if (Shape{q.n_out, q.n_in} != want)
      return error(StatusCode::invalid_argument, "linear '{}' is [{}, {}], expected {} from the model config", base,
                   q.n_out, q.n_in, shape_str(want));
    return std::optional<gq::Matrix>(std::move(q));
  }
  bool has(const std::string& gguf_name) const {
    std::string name = gguf_name;
    if (!gguf_) {
      auto n = gguf_to_hf_name(gguf_name, false);
      if (!n) return false;
      name = n->name;
    }
    return exists(name) || (!gguf_ && name.ends_with(".weight") && exists(name.substr(0, name.size() - 7) + ".qweight"));
  }

 private:
  bool exists(const std::string& name) const {
    for (const auto& t : f_.tensors())
      if (t.name == name) return true;
    return false;
  }
  const ModelFile& f_;
  bool gguf_;
};

}  // namespace

namespace {
// LoadOptions::batch_layouts: the head and every linear of every layer.
Status add_batch_layouts(Backend& backend, ModelWeights& w) {
  size_t extra = 0;
  auto add = [&](Tensor& t) -> Status {
    LITHE_ASSIGN(t, backend.add_batch_layout(t));
    if (const BatchLayout* b = t.batch_layout()) extra += b->buffer->size();
    return Status::ok();
  };
  LITHE_TRY(add(w.output));
  for (LayerWeights& L : w.layers)
    for (Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) LITHE_TRY(add(*t));
  if (extra > 0) log::info("batch layouts of the weights: {:.1f} MiB", static_cast<double>(extra) / (1 << 20));
  return Status::ok();
}
}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->path_ = path;
  LITHE_ASSIGN(m->file_, open_model_file(path));
  const gguf::File* g = m->file_->gguf();
  if (g != nullptr) {
    LITHE_ASSIGN(m->config_, config_from_gguf(*g));
    LITHE_ASSIGN(m->tokenizer_, load_tokenizer(*g));
  } else {
    if (m->file_->config().is_null())
      return error(StatusCode::invalid_argument, "'{}' has no config.json: give a .gguf file or a checkpoint directory",
                   path);
    LITHE_ASSIGN(HfLlamaConfig hf, parse_hf_llama_config(m->file_->config()));
    LITHE_ASSIGN(m->config_, config_from_hf(hf));
    LITHE_ASSIGN(m->tokenizer_, load_tokenizer_json(m->file_->directory()));
  }
  m->chat_template_ = m->tokenizer_->spec().chat_template;
  if (m->config_.eos_ids.empty() && m->tokenizer_->eos_id() >= 0) m->config_.eos_ids = {m->tokenizer_->eos_id()};
  LITHE_ASSIGN(m->backend_, make_backend(options.device));
  m->rope_ = make_rope_table(m->config_);

  const ModelConfig& c = m->config_;
  WeightReader r(*m->file_, g != nullptr);
  if (g != nullptr && g->find_tensor("rope_freqs.weight") != nullptr) {
    // Llama 3.1 GGUFs carry the llama3 frequency scaling as per-frequency divisors.
    LITHE_ASSIGN(Tensor f, r.get("rope_freqs.weight", {c.rope_dim / 2}));
    LITHE_ASSIGN(Tensor f32, convert(f, DType::f32));
    for (int64_t i = 0; i < c.rope_dim / 2; ++i) m->rope_.inv_freq[static_cast<size_t>(i)] /= f32.data_as<float>()[i];
  }
  // Matrices stay in their stored format unless dequantize; vectors (norms, biases) become f32.
  bool warned = false;
  auto prep = [&](Tensor t) -> Result<Tensor> {
    const bool matrix = t.ndim() == 2;
    DType want = t.dtype();
    if (!matrix || options.dequantize) want = DType::f32;
    else if (!m->backend_->supports_weight(t.dtype())) want = m->backend_->fallback_weight_dtype();
    if (want != t.dtype()) {
      if (matrix && !options.dequantize && !std::exchange(warned, true))
        log::warn("{} weights are not supported by the {} kernels: dequantizing to {}", dtype_name(t.dtype()),
                  m->backend_->name(), dtype_name(want));
      LITHE_ASSIGN(Tensor f, convert(t, want));
      m->owned_.push_back(f);
      t = f;
    }
    return m->backend_->prepare_weight(t);
  };
  // A compressed linear packed for the backend's gq kernels; nullopt when the weight is stored
  // otherwise, or when no kernel here runs it (it is then dequantized; one warning says why).
  int64_t unpacked = 0;
  auto packed = [&](const std::string& name, const Shape& shape) -> Result<std::optional<Tensor>> {
    auto q = r.quantized(name, shape);
    if (q && !q->has_value()) return std::optional<Tensor>{};
    Status why = q.status();
    if (q) {
      auto t = m->backend_->prepare_quantized(**q);
      if (t) return std::optional<Tensor>(std::move(*t));
      why = t.status();
    }
    if (why.code() != StatusCode::unsupported) return why.with_context(name);
    if (unpacked++ == 0)
      log::warn("{}: {}; such matrices are dequantized to {} at load", name, why.message(),
                dtype_name(m->backend_->fallback_weight_dtype()));
    return std::optional<Tensor>{};
  };
  auto load = [&](Tensor& dst, const std::string& name, const Shape& shape) -> Status {
    if (!options.dequantize && options.packed_linears) {
      LITHE_ASSIGN(std::optional<Tensor> p, packed(name, shape));
      if (p) {
        dst = std::move(*p);
        return Status::ok();
      }
    }
    LITHE_ASSIGN(Tensor t, r.get(name, shape));
    LITHE_ASSIGN(dst, prep(std::move(t)));
    return Status::ok();
  };
  ModelWeights& w = m->weights_;
  LITHE_TRY(load(w.tok_embd, "token_embd.weight", {c.vocab_size, c.d_model}));
  LITHE_TRY(load(w.out_norm, "output_norm.weight", {c.d_model}));
  if (r.has("output.weight")) {
    LITHE_TRY(load(w.output, "output.weight", {c.vocab_size, c.d_model}));
  } else {
    w.output = w.tok_embd;  // tied embeddings
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    auto nm = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    LITHE_TRY(load(L.attn_norm, nm("attn_norm.weight"), {c.d_model}));
    LITHE_TRY(load(L.wq, nm("attn_q.weight"), {c.q_dim(), c.d_model}));
    LITHE_TRY(load(L.wk, nm("attn_k.weight"), {c.kv_dim(), c.d_model}));
    LITHE_TRY(load(L.wv, nm("attn_v.weight"), {c.kv_dim(), c.d_model}));
    LITHE_TRY(load(L.wo, nm("attn_output.weight"), {c.d_model, c.q_dim()}));
    if (c.qkv_bias) {
      LITHE_TRY(load(L.bq, nm("attn_q.bias"), {c.q_dim()}));
      LITHE_TRY(load(L.bk, nm("attn_k.bias"), {c.kv_dim()}));
      LITHE_TRY(load(L.bv, nm("attn_v.bias"), {c.kv_dim()}));
    }
    LITHE_TRY(load(L.ffn_norm, nm("ffn_norm.weight"), {c.d_model}));
    LITHE_TRY(load(L.w_gate, nm("ffn_gate.weight"), {c.d_ff, c.d_model}));
    LITHE_TRY(load(L.w_up, nm("ffn_up.weight"), {c.d_ff, c.d_model}));
    LITHE_TRY(load(L.w_down, nm("ffn_down.weight"), {c.d_model, c.d_ff}));
  }
  if (unpacked > 1) log::warn("{} compressed linears were dequantized at load", unpacked);
  if (options.batch_layouts) LITHE_TRY(add_batch_layouts(*m->backend_, w));
  return m;
}

uint64_t Model::weight_bytes_per_token() const {
  uint64_t b = weights_.output.nbytes() + weights_.out_norm.nbytes();
  for (const auto& L : weights_.layers)
    for (const Tensor* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.ffn_norm, &L.w_gate,
                            &L.w_up, &L.w_down})
      if (t->defined()) b += t->nbytes();
  return b;
}

Result<KvCache> Model::new_cache(int64_t capacity, DType kv_dtype) {
  return KvCache::create(config_.n_layers, capacity, config_.kv_dim(), kv_dtype, backend_->device());
}

Result<KvCache> Model::new_cache(const CacheSpec& spec, int64_t ctx, DType kv_dtype) {
  return make_cache(spec, config_.n_layers, ctx, config_.kv_dim(), kv_dtype, backend_->device());
}

Result<std::shared_ptr<KvPool>> Model::new_kv_pool(int64_t num_blocks, int64_t block_size, DType kv_dtype) {
  return KvPool::create(config_.n_layers, num_blocks, block_size, config_.kv_dim(), kv_dtype, backend_->device());
}

Result<KvCache> Model::new_cache(const CacheSpec& spec, int64_t ctx, std::shared_ptr<KvPool> pool) {
  if (pool != nullptr && (pool->n_layers() != config_.n_layers || pool->kv_dim() != config_.kv_dim() ||
                          pool->device() != backend_->device()))
    return error(StatusCode::invalid_argument, "KV pool of {} layers x {} on {} does not fit this model ({} x {} on {})",
                 pool->n_layers(), pool->kv_dim(), device_name(pool->device()), config_.n_layers, config_.kv_dim(),
                 device_name(backend_->device()));
  return make_paged_cache(spec, ctx, std::move(pool));
}

Status Model::ensure_workspace(int64_t m, int64_t out_rows) {
  const ModelConfig& c = config_;
  if (m > ws_rows_) {
    const int64_t rows = std::max<int64_t>(m, 1);
    LITHE_ASSIGN(x_, backend_->alloc(DType::f32, {rows, c.d_model}));
    LITHE_ASSIGN(h_, backend_->alloc(DType::f32, {rows, c.d_model}));
    LITHE_ASSIGN(q_, backend_->alloc(DType::f32, {rows, c.q_dim()}));
    LITHE_ASSIGN(k_, backend_->alloc(DType::f32, {rows, c.kv_dim()}));
    LITHE_ASSIGN(v_, backend_->alloc(DType::f32, {rows, c.kv_dim()}));
    LITHE_ASSIGN(attn_, backend_->alloc(DType::f32, {rows, c.q_dim()}));
    LITHE_ASSIGN(gate_, backend_->alloc(DType::f32, {rows, c.d_ff}));
    LITHE_ASSIGN(up_, backend_->alloc(DType::f32, {rows, c.d_ff}));
    ws_rows_ = rows;
    ++ws_generation_;
  }
  if (out_rows > out_rows_) {
    LITHE_ASSIGN(head_in_, backend_->alloc(DType::f32, {out_rows, c.d_model}));
    LITHE_ASSIGN(logits_, backend_->alloc(DType::f32, {out_rows, c.vocab_size}));
    out_rows_ = out_rows;
    ++ws_generation_;
  }
  return Status::ok();
}

namespace {
// Positions continuing the cache's last one.
std::vector<int32_t> next_positions(const KvCache& cache, size_t n) {
  std::vector<int32_t> pos(n);
  const int32_t start = cache.size() == 0 ? 0 : cache.positions()[cache.size() - 1] + 1;
  for (size_t i = 0; i < n; ++i) pos[i] = start + static_cast<int32_t>(i);
  return pos;
}
}  // namespace

Status Model::forward(KvCache& cache, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
  const std::vector<int32_t> pos = next_positions(cache, tokens.size());
  SequenceInput in{&cache, tokens, pos, all_logits};
  return forward(std::span<const SequenceInput>(&in, 1), logits);
}

Status Model::forward_top_k(KvCache& cache, std::span<const int32_t> tokens, int k, std::vector<float>& vals,
                            std::vector<int32_t>& ids) {
  const std::vector<int32_t> pos = next_positions(cache, tokens.size());
  SequenceInput in{&cache, tokens, pos, false};
  return forward_top_k(std::span<const SequenceInput>(&in, 1), k, vals, ids);
}

Status Model::launch_top_k(KvCache& cache, std::span<const int32_t> tokens, int k) {
  const std::vector<int32_t> pos = next_positions(cache, tokens.size());
  SequenceInput in{&cache, tokens, pos, false};
  LITHE_ASSIGN(int64_t rows, forward_device(std::span<const SequenceInput>(&in, 1)));
  return backend_->top_k_launch(logits_, rows, k);
}

Status Model::fetch_top_k(std::vector<float>& vals, std::vector<int32_t>& ids) {
  return backend_->top_k_fetch(vals, ids);
}

Status Model::forward_logprobs(KvCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                               std::vector<float>& out) {
  if (targets.size() != tokens.size())
    return error(StatusCode::invalid_argument, "forward_logprobs: {} targets for {} tokens", targets.size(),
                 tokens.size());
  const std::vector<int32_t> pos = next_positions(cache, tokens.size());
  SequenceInput in{&cache, tokens, pos, true};
  LITHE_ASSIGN(int64_t rows, forward_device(std::span<const SequenceInput>(&in, 1)));
  out.resize(static_cast<size_t>(rows));
  return backend_->token_logprobs(logits_, rows, targets.data(), out.data());
}

Status Model::forward(std::span<const SequenceInput> batch, std::vector<float>& logits) {
  LITHE_ASSIGN(int64_t rows, forward_device(batch));
  logits.resize(static_cast<size_t>(rows * config_.vocab_size));
  return backend_->to_host(logits_, rows, logits.data());
}

Status Model::forward_top_k(std::span<const SequenceInput> batch, int k, std::vector<float>& vals,
                            std::vector<int32_t>& ids) {
  LITHE_ASSIGN(int64_t rows, forward_device(batch));
  vals.resize(static_cast<size_t>(rows * k));
  ids.resize(static_cast<size_t>(rows * k));
  return backend_->top_k(logits_, rows, k, vals.data(), ids.data());
}

Result<int64_t> Model::forward_device(std::span<const SequenceInput> batch) {
  std::vector<int32_t> ids, pos;
  int64_t out_rows = 0;
  bool decode = true;  // one token per sequence: a step the backend may capture and replay
  for (const auto& s : batch) {
    if (s.cache == nullptr || s.tokens.size() != s.positions.size() || s.tokens.empty())
      return error(StatusCode::invalid_argument, "forward: each sequence needs a cache and one position per token "
                   "({} tokens, {} positions)", s.tokens.size(), s.positions.size());
    for (size_t i = 0; i < s.tokens.size(); ++i) {  // (a loop: GCC 12's -Warray-bounds misfires on insert here)
      ids.push_back(s.tokens[i]);
      pos.push_back(s.positions[i]);
    }
    out_rows += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
    decode = decode && s.tokens.size() == 1;
  }
  const auto m = static_cast<int64_t>(ids.size());
  LITHE_TRY(ensure_workspace(m, out_rows));
  // The step's structure: which caches, how many rows, which workspace. Equal keys, equal ops.
  uint64_t key = 0;
  if (decode) {
    auto mix = [&key](uint64_t v) { key = (key ^ v) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull; };
    mix(static_cast<uint64_t>(m));
    mix(ws_generation_);
    for (const auto& s : batch) {
      mix(s.cache->id());
      mix(s.all_logits ? 1 : 2);
    }
    LITHE_TRY(backend_->begin_step(key));
  }
  Status st = forward_ops(batch, ids, pos, m);
  if (decode) {
    Status end = backend_->end_step(st.is_ok());
    if (st.is_ok()) st = end;
  }
  LITHE_TRY(st);
  return out_rows;
}

Status Model::forward_ops(std::span<const SequenceInput> batch, const std::vector<int32_t>& ids,
                          const std::vector<int32_t>& pos, int64_t m) {
  const ModelConfig& c = config_;
  LITHE_TRY(backend_->embedding(weights_.tok_embd, ids.data(), m, x_));
  LITHE_TRY(run_layers(m, batch, pos));
  // Final norm of only the rows whose logits are wanted, written straight into the head's input.
  int64_t r0 = 0, out_r = 0;
  for (const auto& s : batch) {
    const auto n = static_cast<int64_t>(s.tokens.size());
    const int64_t k = s.all_logits ? n : 1;
    LITHE_ASSIGN(Tensor src, x_.slice_rows(r0 + n - k, r0 + n));
    LITHE_ASSIGN(Tensor dst, head_in_.slice_rows(out_r, out_r + k));
    LITHE_TRY(backend_->rmsnorm(src, k, weights_.out_norm, static_cast<float>(c.rms_eps), dst));
    r0 += n;
    out_r += k;
  }
  return backend_->linear(weights_.output, head_in_, out_r, logits_);
}

Status Model::run_layers(int64_t m, std::span<const SequenceInput> batch, const std::vector<int32_t>& pos) {
  const ModelConfig& c = config_;
  // Cache slots for every sequence's new tokens (positions recorded once for all layers). A rolling
  // cache re-indexes positions inside itself: its tokens' queries sit at the positions it gave them.
  std::vector<std::vector<int64_t>> slots;
  std::vector<int32_t> q_pos = pos;
  size_t r0 = 0;
  for (const auto& s : batch) {
    LITHE_ASSIGN(auto sl, s.cache->append(s.positions.data(), static_cast<int64_t>(s.positions.size())));
    if (s.cache->rolling())
      for (size_t i = 0; i < sl.size(); ++i) q_pos[r0 + i] = s.cache->positions()[sl[i]];
    r0 += sl.size();
    slots.push_back(std::move(sl));
  }
  for (int64_t l = 0; l < c.n_layers; ++l) LITHE_TRY(run_block(l, l, m, batch, q_pos, slots, nullptr));
  return Status::ok();
}

Status Model::run_block(int64_t l, int64_t kv_layer, int64_t m, std::span<const SequenceInput> batch,
                         const std::vector<int32_t>& pos, const std::vector<std::vector<int64_t>>& slots,
                         LinearObserver* obs) {
  const ModelConfig& c = config_;
  const auto eps = static_cast<float>(c.rms_eps);
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  Backend& be = *backend_;
  // Hands a site's input rows (on the backend's device) to the observer.
  auto observe = [&](LinearSite site, const Tensor& t) { return obs == nullptr || obs->on_input(l, site, t, m); };
  const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
  // The norms fold into the projections after them (x_ stays un-normalized); an observer needs
  // the normed rows, so then they are materialized in h_ first.
  const Tensor* qkv_w[] = {&L.wq, &L.wk, &L.wv};
  Tensor* qkv_y[] = {&q_, &k_, &v_};
  const InputNorm attn_norm{&L.attn_norm, eps, &h_}, ffn_norm{&L.ffn_norm, eps, &h_};
  if (obs == nullptr && !c.qkv_bias && batch.size() == 1) {  // the block's input to x += o(attention) in one op
    LITHE_TRY(be.qkv_rope_attention(attn_norm, qkv_w, x_, m, qkv_y, *batch[0].cache, kv_layer, pos.data(),
                                    slots[0].data(), rope_, c.rope_style, shape, attn_, OutProjection{&L.wo, &x_, &h_}));
  } else {
    if (obs == nullptr) {
      LITHE_TRY(be.rmsnorm_linear_many(attn_norm, qkv_w, x_, m, qkv_y));
    } else {
      LITHE_TRY(be.rmsnorm(x_, m, L.attn_norm, eps, h_));
      if (!observe(LinearSite::qkv, h_)) return Status::ok();
      LITHE_TRY(be.linear_many(qkv_w, h_, m, qkv_y));
    }
    if (c.qkv_bias) {
      LITHE_TRY(be.add_bias(q_, m, L.bq));
      LITHE_TRY(be.add_bias(k_, m, L.bk));
      LITHE_TRY(be.add_bias(v_, m, L.bv));
    }
    // RoPE of q and k, cache store and attention of every sequence over its own cache.
    std::vector<BatchSeq> seqs(batch.size());
    int64_t r0 = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto n = static_cast<int64_t>(batch[i].tokens.size());
      seqs[i] = BatchSeq{batch[i].cache, r0, n, slots[i].data()};
      r0 += n;
    }
    LITHE_TRY(be.rope_attention_batch(seqs, kv_layer, q_, k_, v_, m, pos.data(), rope_, c.rope_style, shape, attn_));
    if (!observe(LinearSite::o, attn_)) return Status::ok();
    LITHE_TRY(be.linear_residual(L.wo, attn_, m, x_, h_));
  }
  if (obs == nullptr) {
    LITHE_TRY(be.rmsnorm_swiglu(ffn_norm, L.w_gate, L.w_up, x_, m, gate_, up_));
  } else {
    LITHE_TRY(be.rmsnorm(x_, m, L.ffn_norm, eps, h_));
    if (!observe(LinearSite::gate_up, h_)) return Status::ok();
    LITHE_TRY(be.swiglu(L.w_gate, L.w_up, h_, m, gate_, up_));
  }
  if (!observe(LinearSite::down, gate_)) return Status::ok();
  LITHE_TRY(be.linear_residual(L.w_down, gate_, m, x_, h_));
  return Status::ok();
}

// ---- block-wise execution for calibration ----

LinearSite site_of(LinearKind kind) {
  switch (kind) {
    case LinearKind::q:
    case LinearKind::k:
    case LinearKind::v: return LinearSite::qkv;
    case LinearKind::o: return LinearSite::o;
    case LinearKind::gate:
    case LinearKind::up: return LinearSite::gate_up;
    case LinearKind::down: return LinearSite::down;
  }
  return LinearSite::qkv;
}

const char* linear_kind_name(LinearKind kind) {
  switch (kind) {
    case LinearKind::q: return "attn_q";
    case LinearKind::k: return "attn_k";
    case LinearKind::v: return "attn_v";
    case LinearKind::o: return "attn_output";
    case LinearKind::gate: return "ffn_gate";
    case LinearKind::up: return "ffn_up";
    case LinearKind::down: return "ffn_down";
  }
  return "?";
}

const char* linear_site_name(LinearSite site) {
  switch (site) {
    case LinearSite::qkv: return "qkv";
    case LinearSite::o: return "o";
    case LinearSite::gate_up: return "gate_up";
    case LinearSite::down: return "down";
  }
  return "?";
}

Status Model::check_block_tensor(const Tensor& x, int64_t rows, const char* what) const {
  const Device d = backend_->device();
  if (!x.defined() || x.dtype() != DType::f32 || x.device() != d || x.ndim() != 2 || x.dim(0) < rows ||
      x.dim(1) != config_.d_model || !x.is_contiguous())
    return error(StatusCode::invalid_argument, "{}: expected an f32 [>= {}, {}] tensor on {}, got {}", what, rows,
                 config_.d_model, device_name(d), x.describe());
  return Status::ok();
}

Status Model::embed(std::span<const int32_t> ids, Tensor& x_out) {
  const auto n = static_cast<int64_t>(ids.size());
  if (!check_block_tensor(x_out, n, "embed").is_ok()) {
    LITHE_ASSIGN(x_out, backend_->alloc(DType::f32, {std::max<int64_t>(n, 1), config_.d_model}));
  }
  return backend_->embedding(weights_.tok_embd, ids.data(), n, x_out);
}

Status Model::block_forward(int64_t layer, Tensor& x, int64_t m, LinearObserver* obs) {
  const ModelConfig& c = config_;
  if (layer < 0 || layer >= c.n_layers)
    return error(StatusCode::invalid_argument, "block_forward: layer {} out of range [0, {})", layer, c.n_layers);
  if (m <= 0) return error(StatusCode::invalid_argument, "block_forward: {} rows", m);
  LITHE_TRY(check_block_tensor(x, m, "block_forward"));
  LITHE_TRY(ensure_workspace(m, 0));
  if (block_cache_.capacity() < m) {
    LITHE_ASSIGN(block_cache_, KvCache::create(1, m, c.kv_dim(), DType::f32, backend_->device()));
  }
  block_cache_.clear();
  std::vector<int32_t> pos(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::vector<std::vector<int64_t>> slots(1);
  LITHE_ASSIGN(slots[0], block_cache_.append(pos.data(), m));
  // Only the token count and positions of the batch entry are read (ids are not: x is given).
  SequenceInput in{&block_cache_, std::span<const int32_t>(pos), pos, false};
  const std::span<const SequenceInput> batch(&in, 1);
  if (backend_->device() == Device::cpu) {
    const size_t bytes = static_cast<size_t>(m * c.d_model) * sizeof(float);
    std::memcpy(x_.data(), x.data(), bytes);
    LITHE_TRY(run_block(layer, 0, m, batch, pos, slots, obs));
    std::memcpy(x.data(), x_.data(), bytes);
    return Status::ok();
  }
  // A device backend runs the block on x itself (no copy to order against its stream): x stands
  // in for the residual stream workspace for this call.
  Tensor saved = std::exchange(x_, x);
  Status st = run_block(layer, 0, m, batch, pos, slots, obs);
  x_ = std::move(saved);
  LITHE_TRY(st);
  return backend_->settle();  // the caller reads x as it likes
}

Result<Tensor*> Model::linear_weight(int64_t layer, LinearKind kind) {
  if (layer < 0 || layer >= config_.n_layers)
    return error(StatusCode::invalid_argument, "linear_weight: layer {} out of range [0, {})", layer,
                 config_.n_layers);
  LayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
  Tensor* t = nullptr;
  switch (kind) {
    case LinearKind::q: t = &L.wq; break;
    case LinearKind::k: t = &L.wk; break;
    case LinearKind::v: t = &L.wv; break;
    case LinearKind::o: t = &L.wo; break;
    case LinearKind::gate: t = &L.w_gate; break;
    case LinearKind::up: t = &L.w_up; break;
    case LinearKind::down: t = &L.w_down; break;
  }
  if (backend_->device() == Device::cpu) {
    if (t->dtype() != DType::f32 || t->device() != Device::cpu || !t->is_contiguous())
      return error(StatusCode::unsupported, "blk.{}.{} is {}: compression on the cpu needs f32 host weights (load "
                   "the model with dequantize)", layer, linear_kind_name(kind), t->describe());
  } else if (t->device() != backend_->device() || !t->is_contiguous() || t->ndim() != 2 ||
             (t->dtype() != DType::f32 && t->dtype() != DType::f16 && t->dtype() != DType::bf16)) {
    return error(StatusCode::unsupported, "blk.{}.{} is {}: compression on {} needs contiguous f32, f16 or bf16 "
                 "weights on the device", layer, linear_kind_name(kind), t->describe(), backend_->name());
  }
  return t;
}

}  // namespace lithe

// Synthetic models: the exact shapes of well-known checkpoints with uniform random weights made
// on the backend's device, so speed at real sizes is measured without downloading real weights.
#include <cmath>
#include <map>

#include "lithe/models/model.h"

namespace lithe {

Result<ModelConfig> synthetic_config(std::string_view name) {
  ModelConfig c;
  c.arch = "llama";
  c.head_dim = 128;
  c.rms_eps = 1e-5;
  c.max_context = 4096;
  c.rope_style = cpu::RopeStyle::interleaved;
  if (name == "llama2-7b") {
    c.n_layers = 32, c.d_model = 4096, c.n_heads = 32, c.n_kv_heads = 32, c.d_ff = 11008, c.vocab_size = 32000;
  } else if (name == "llama3-8b") {
    c.n_layers = 32, c.d_model = 4096, c.n_heads = 32, c.n_kv_heads = 8, c.d_ff = 14336, c.vocab_size = 128256;
    c.rope_theta = 500000.0;
    c.max_context = 8192;
  } else if (name == "llama2-13b") {
    c.n_layers = 40, c.d_model = 5120, c.n_heads = 40, c.n_kv_heads = 40, c.d_ff = 13824, c.vocab_size = 32000;
  } else {
    return error(StatusCode::invalid_argument, "unknown synthetic model '{}': use llama2-7b, llama3-8b or llama2-13b",
                 name);
  }
  c.rope_dim = c.head_dim;
  LITHE_TRY(c.validate());
  return c;
}

Result<std::unique_ptr<Model>> Model::synthetic(std::string_view name, std::string_view dtype, Device device,
                                                uint64_t seed, const Model* tokens_of) {
  LITHE_ASSIGN(ModelConfig c, synthetic_config(name));
  if (tokens_of != nullptr) {
    if (!tokens_of->has_tokenizer())
      return error(StatusCode::invalid_argument, "{} has no tokenizer to lend the synthetic model", tokens_of->path());
    c.vocab_size = tokens_of->config().vocab_size;
    c.eos_ids = tokens_of->config().eos_ids;
  }
  std::unique_ptr<Model> m;
  if (dtype.starts_with("int")) {
    LITHE_ASSIGN(QuantFormat f, gq::parse_format(dtype));
    LITHE_ASSIGN(m, synthetic(c, DType::f16, device, seed, &f));
  } else {
    const auto dt = dtype_from_name(dtype);
    if (!dt)
      return error(StatusCode::invalid_argument, "--dtype '{}' is not a dtype: use f16, bf16, f32 or a gq format such "
                   "as int4-g128", dtype);
    LITHE_ASSIGN(m, synthetic(c, *dt, device, seed));
  }
  if (tokens_of != nullptr) {
    LITHE_ASSIGN(m->tokenizer_, Tokenizer::create(tokens_of->tokenizer().spec()));
    m->chat_template_ = tokens_of->chat_template();
  }
  return m;
}

Result<std::unique_ptr<Model>> Model::synthetic(const ModelConfig& config, DType dtype, Device device, uint64_t seed,
                                                const QuantFormat* linears) {
  LITHE_TRY(config.validate());
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    return error(StatusCode::invalid_argument, "synthetic models are f32, f16 or bf16, not {}", dtype_name(dtype));
  std::unique_ptr<Model> m(new Model());
  m->path_ = "synthetic:" + config.arch;
  m->config_ = config;
  LITHE_ASSIGN(m->backend_, make_backend(device));
  m->rope_ = make_rope_table(config);
  const ModelConfig& c = m->config_;
  // Uniform in +-sqrt(3 / n_in): unit-variance inputs give unit-variance outputs, so activations
  // stay in f16 range through every layer; norm weights are 1 +- 0.1.
  auto make = [&](Tensor& dst, Shape shape, DType dt, float center, float scale) -> Status {
    LITHE_ASSIGN(dst, m->backend_->alloc(dt, shape));
    return m->backend_->fill_random(dst, seed++, center, scale);
  };
  // gq linears: one random matrix packed per shape, copied to every layer (packing 7B-sized
  // matrices on the host once per layer would dominate the start-up; the speed is the same).
  std::map<std::pair<int64_t, int64_t>, Tensor> packed;
  auto matrix = [&](Tensor& dst, int64_t n_out, int64_t n_in) -> Status {
    const float amp = std::sqrt(3.0f / static_cast<float>(n_in));
    if (linears == nullptr) return make(dst, {n_out, n_in}, dtype, 0.0f, amp);
    auto it = packed.find({n_out, n_in});
    if (it == packed.end()) {
      QuantFormat f = *linears;
      if (f.group == 0) f.group = n_in;
      const gq::Matrix q = gq::random_matrix(f, n_out, n_in, seed++, false, 2.0f * amp);
      LITHE_ASSIGN(Tensor t, m->backend_->prepare_quantized(q));
      it = packed.emplace(std::pair{n_out, n_in}, std::move(t)).first;
    }
    LITHE_ASSIGN(dst, it->second.to(device));
    return Status::ok();
  };
  auto norm = [&](Tensor& dst) { return make(dst, {c.d_model}, DType::f32, 1.0f, 0.1f); };
  ModelWeights& w = m->weights_;
  LITHE_TRY(make(w.tok_embd, {c.vocab_size, c.d_model}, dtype, 0.0f, 1.0f));
  LITHE_TRY(norm(w.out_norm));
  LITHE_TRY(matrix(w.output, c.vocab_size, c.d_model));
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& L : w.layers) {
    LITHE_TRY(norm(L.attn_norm));
    LITHE_TRY(matrix(L.wq, c.q_dim(), c.d_model));
    LITHE_TRY(matrix(L.wk, c.kv_dim(), c.d_model));
    LITHE_TRY(matrix(L.wv, c.kv_dim(), c.d_model));
    LITHE_TRY(matrix(L.wo, c.d_model, c.q_dim()));
    LITHE_TRY(norm(L.ffn_norm));
    LITHE_TRY(matrix(L.w_gate, c.d_ff, c.d_model));
    LITHE_TRY(matrix(L.w_up, c.d_ff, c.d_model));
    LITHE_TRY(matrix(L.w_down, c.d_model, c.d_ff));
  }
  return m;
}

}  // namespace lithe

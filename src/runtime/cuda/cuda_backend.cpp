// The CUDA backend: activations, weights and KV caches in device memory; ops are the kernels of
// kernels/cuda_ops.h plus cuBLAS for prefill GEMMs. All work goes on one stream; decode steps are
// captured as CUDA graphs (step_graph.h). Weights run as f32, f16 or bf16; other formats are
// converted to f16 at load (fallback_weight_dtype); compressed checkpoints' quantized linears run
// packed (gq: the Marlin-class GEMM or the GEMV kernels of kernels/cuda_gq.h).
//
// Linear layers: up to kMatvecMaxRows rows use the matvec kernel (weights streamed once, fused
// q/k/v, swiglu and residual epilogues, the preceding RMSNorm folded in); more rows use
// cublasGemmEx on an f16/bf16 copy of the activations with f32 output (f32 weights: f32 GEMM, no
// TF32). Attention: rope_attention rotates q/k and fills the cache in one launch, then one decode
// launch (split-K with the merge in its last blocks) or the prefill kernel; at decode sizes
// qkv_rope_attention does the rotation and the store in the q/k/v matvec's or gq GEMV's epilogue instead.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string_view>

#include "lithe/kernels/cuda_device.h"
#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/cuda_ops.h"
#include "lithe/runtime/backend.h"
#include "lithe/runtime/kv_cache.h"
#include "step_graph.h"

namespace lithe {
namespace {

using cuda_backend::check;
using cuda_backend::StepGraph;

Status check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return error(StatusCode::internal, "{} failed: {}", what, cublasGetStatusString(s));
}

Result<cuda::WeightType> weight_type(const Tensor& w) {
  switch (w.dtype()) {
    case DType::f32: return cuda::WeightType::f32;
    case DType::f16: return cuda::WeightType::f16;
    case DType::bf16: return cuda::WeightType::bf16;
    default:
      return error(StatusCode::unsupported, "the cuda backend cannot run {} weights ({}); they are converted to f16 "
                   "at load unless the tensor came from elsewhere", dtype_name(w.dtype()), w.describe());
  }
}

Status check_act(const Tensor& t, int64_t m, int64_t cols, const char* what) {
  return check_activation(t, Device::cuda, m, cols, what);
}

Status check_weight(const Tensor& w, const char* what) {
  if (w.device() != Device::cuda || !w.is_contiguous() || w.ndim() != 2)
    return error(StatusCode::invalid_argument, "{}: expected a contiguous cuda matrix, got {}", what, w.describe());
  return Status::ok();
}

// A device scratch buffer that only grows. With `zero_on`, fresh memory is zeroed on that stream
// (scratch whose contents must start at zero: attention_decode's merge counters). Growing frees
// the old memory, which recorded step graphs may point at: they are dropped first.
struct Scratch {
  Tensor t;
  StepGraph* steps = nullptr;
  Result<void*> get(size_t bytes, cudaStream_t zero_on = nullptr) {
    if (!t.defined() || t.nbytes() < bytes) {
      if (t.defined() && steps != nullptr) LITHE_TRY(steps->forget());
      LITHE_ASSIGN(t, Tensor::empty(DType::u8, {static_cast<int64_t>(std::max<size_t>(bytes, 256))}, Device::cuda));
      if (zero_on != nullptr)
        LITHE_TRY(check(cudaMemsetAsync(t.data(), 0, t.nbytes(), zero_on), "cudaMemsetAsync (scratch)"));
    }
    return t.data();
  }
};

// Pinned host memory that only grows: device-to-host copies into it are truly asynchronous DMA (a
// copy into pageable memory goes through a driver bounce buffer and costs several microseconds).
struct PinnedHost {
  void* p = nullptr;
  size_t cap = 0;
  PinnedHost() = default;
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  ~PinnedHost() {
    if (p != nullptr) cudaFreeHost(p);
  }
  Result<void*> get(size_t bytes) {
    if (bytes > cap) {
      if (p != nullptr) cudaFreeHost(p);
      p = nullptr;
      cap = std::max<size_t>(bytes, 4096);
      const Status st = check(cudaMallocHost(&p, cap), "cudaMallocHost (result buffer)");
      if (!st.is_ok()) cap = 0;
      LITHE_TRY(st);
    }
    return p;
  }
};

// top_k / token_logprobs keep n f32 values and then n int32 ids (or targets) in one buffer; the ids
// start at this byte offset (16-byte aligned).
size_t ids_offset(size_t n) { return (n * sizeof(float) + 15) / 16 * 16; }

// Whether the matvec kernel (not cuBLAS) runs an m-row product with rows of n_in.
bool matvec_path(int64_t m, int64_t n_in) { return m <= cuda::kMatvecMaxRows && n_in % 8 == 0; }
// The same for weight w: dense weights only (gq weights have kernels of their own, project_gq).
bool matvec_path(const Tensor& w, int64_t m) { return w.dtype() != DType::gq && matvec_path(m, w.dim(1)); }
// Whether an RMSNorm of x folds into that kernel, which then reads x itself (16-byte loads; the
// materialized norm it otherwise reads is always aligned).
bool norm_folds(const Tensor& w, int64_t m, const Tensor& x) {
  return matvec_path(w, m) && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0;
}
// Whether gq weights ws run as one launch of the GEMV kernel with epilogue e (and a folded norm):
// m <= kGemvMaxRows (16), all in the GEMV layout with one format, n_in and act-order; swiglu: gate and up of equal
// n_out without act-order; rope_kv: q, k, v (the caller checks that head_dim divides kGemvItemRows).
bool gemv_fuses(std::span<const Tensor* const> ws, int64_t m, cuda::Epilogue e) {
  if (m > cuda::kGemvMaxRows || ws.empty() || ws.size() > 3) return false;
  const PackedWeight* p0 = ws[0]->packed();
  for (const Tensor* w : ws) {
    const PackedWeight* p = w->packed();
    if (w->dtype() != DType::gq || p == nullptr || w->device() != Device::cuda || p->layout != cuda::kLayoutGemv ||
        p->fmt.bits != p0->fmt.bits || p->fmt.group != p0->fmt.group || p->fmt.sparse24 != p0->fmt.sparse24 ||
        p->n_in != p0->n_in || p->has_perm != p0->has_perm)
      return false;
  }
  if (e == cuda::Epilogue::swiglu) return ws.size() == 2 && !p0->has_perm && ws[1]->packed()->n_out == p0->n_out;
  if (e == cuda::Epilogue::rope_kv) return ws.size() == 3;
  return e == cuda::Epilogue::store || e == cuda::Epilogue::accumulate;
}

// The layout a gq matrix gets on the GPU. Default: the GEMV layout (batch <= 16 in its own kernel,
// larger batches through a dense f16 copy and cuBLAS), which measured faster end to end than the
// Marlin-class GEMM on an H100 at both decode and prefill (bench/RESULTS.md, "Compressed-weight
// kernels"); LITHE_GQ_KERNEL=marlin picks the Marlin-class GEMM (int4, group 128 or per channel,
// 2:4 on sparse tensor cores) wherever it runs the format and shape.
Result<cuda::PackedHost> pack_for_cuda(const gq::Matrix& m) {
  static const char* force = std::getenv("LITHE_GQ_KERNEL");
  const bool marlin_first = force != nullptr && std::string_view(force) == "marlin";
  const Status marlin = cuda::marlin_supports(m.fmt, m.n_out, m.n_in);
  if (marlin_first && marlin.is_ok()) return cuda::pack_marlin(m);
  const Status gemv = cuda::gemv_supports(m.fmt, m.n_out, m.n_in);
  if (gemv.is_ok()) return cuda::pack_gemv(m);
  if (marlin.is_ok()) return cuda::pack_marlin(m);
  return error(StatusCode::unsupported, "no cuda kernel runs {} weights [{}, {}]: {}; {}", format_name(m.fmt, m.n_in),
               m.n_out, m.n_in, marlin.message(), gemv.message());
}

// False when the environment sets `name` to "0": turns a decode optimisation off for side-by-side
// timing (LITHE_QKV_ROPE: the rope_kv epilogue). Read once.
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || std::string_view(e) != "0";
}

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> create() {
    if (!cuda_available())
      return error(StatusCode::unsupported, "--device cuda: no CUDA device is visible (check nvidia-smi / "
                   "CUDA_VISIBLE_DEVICES), or use --device cpu");
    std::unique_ptr<CudaBackend> b(new CudaBackend());
    LITHE_ASSIGN(b->info_, cuda::device_info());
    if (b->info_.major < 8)
      return error(StatusCode::unsupported, "--device cuda needs compute capability 8.0 or newer; {} is {}.{}",
                   b->info_.name, b->info_.major, b->info_.minor);
    LITHE_TRY(check(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    LITHE_TRY(check_blas(cublasCreate(&b->blas_), "cublasCreate"));
    LITHE_TRY(check_blas(cublasSetStream(b->blas_, b->stream_), "cublasSetStream"));
    LITHE_ASSIGN(void* ws, b->blas_ws_.get(32u << 20));
    LITHE_TRY(check_blas(cublasSetWorkspace(b->blas_, ws, 32u << 20), "cublasSetWorkspace"));
    b->steps_ = std::make_unique<StepGraph>(b->stream_);
    LITHE_ASSIGN(b->best_, Tensor::empty(DType::i32, {kBestMax}, Device::cuda));
    for (TopKSlot& s : b->topk_slots_)
      LITHE_TRY(check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate"));
    for (Scratch* sc : {&b->blas_ws_, &b->x16_, &b->attn_ws_, &b->topk_, &b->keys_, &b->marlin_ws_,
                        &b->w16_, &b->gemv_ws_, &b->resid_ws_, &b->ready_ws_})
      sc->steps = b->steps_.get();
    return std::unique_ptr<Backend>(std::move(b));
  }
  ~CudaBackend() override {
    steps_.reset();
    for (TopKSlot& s : topk_slots_)
      if (s.done != nullptr) cudaEventDestroy(s.done);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string_view name() const override { return "cuda"; }
  DType fallback_weight_dtype() const override { return DType::f16; }

  Result<Tensor> alloc(DType dtype, const Shape& shape) override { return Tensor::empty(dtype, shape, Device::cuda); }
  bool supports_weight(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
  }
  Result<Tensor> prepare_weight(const Tensor& w) override {
    if (w.ndim() == 2) {
      LITHE_TRY(weight_type(w).status());
    }
    if (w.ndim() != 2 && w.dtype() != DType::f32)
      return error(StatusCode::unsupported, "the cuda backend takes vectors as f32, got {}", w.describe());
    if (w.device() == Device::cuda) return w;
    return w.to(Device::cuda);
  }
  Result<Tensor> prepare_quantized(const gq::Matrix& m) override {
    LITHE_ASSIGN(cuda::PackedHost p, pack_for_cuda(m));
    LITHE_ASSIGN(BufferPtr buf, alloc_device(p.bytes.size()));
    LITHE_TRY(check(cudaMemcpy(buf->data(), p.bytes.data(), p.bytes.size(), cudaMemcpyHostToDevice),
                    "cudaMemcpy (gq weight)"));
    return Tensor::packed(std::move(buf), 0, p.desc);
  }

  Status embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) override {
    LITHE_TRY(settle_if({&out}));
    const int64_t vocab = table.dim(0), d = table.dim(1);
    LITHE_TRY(check_act(out, n, d, "embedding output"));
    LITHE_TRY(check_weight(table, "embedding table"));
    LITHE_ASSIGN(cuda::WeightType wt, weight_type(table));
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] == kArgmaxToken && i < best_rows_ && best_vocab_ == vocab) continue;  // read on the device
      if (ids[i] == kArgmaxToken)
        return error(StatusCode::invalid_argument, "token {} asks for the argmax of row {} of the last top_k, which "
                     "had {} rows on the device (over a vocabulary of {}, this table's is {})", i, i, best_rows_,
                     best_vocab_, vocab);
      if (ids[i] < 0 || ids[i] >= vocab)
        return error(StatusCode::invalid_argument, "token id {} is out of range for a vocabulary of {}", ids[i], vocab);
    }
    LITHE_ASSIGN(const void* dids, steps_->stage(ids, static_cast<size_t>(n) * sizeof(int32_t)));
    if (steps_->replaying()) return Status::ok();
    return cuda::embedding(table.data(), wt, d, static_cast<const int32_t*>(dids), n, out.data_as<float>(), stream_,
                           best_.data_as<int32_t>());
  }

  Status linear(const Tensor& w, const Tensor& x, int64_t m, Tensor& y) override {
    LITHE_TRY(settle_if({&x, &y}));
    const Tensor* ws[] = {&w};
    Tensor* ys[] = {&y};
    return project(ws, ys, x, m, cuda::Epilogue::store);
  }
  Status linear_many(std::span<const Tensor* const> ws, const Tensor& x, int64_t m, std::span<Tensor*> ys) override {
    LITHE_TRY(settle_if({&x}));
    LITHE_TRY(settle_if(ys));
    if (ws.size() != ys.size() || ws.empty())
      return error(StatusCode::invalid_argument, "linear_many: {} weights but {} outputs", ws.size(), ys.size());
    if ((m <= cuda::kMatvecMaxRows && ws.size() <= 3 && ws[0]->dtype() != DType::gq) ||
        gemv_fuses(ws, m, cuda::Epilogue::store))
      return project(ws, ys, x, m, cuda::Epilogue::store);
    for (size_t j = 0; j < ws.size(); ++j) LITHE_TRY(linear(*ws[j], x, m, *ys[j]));
    return Status::ok();
  }
  // GEMV weights at decode sizes defer the sum (see pend_); the others accumulate into y directly
  // (matvec epilogue or GEMM beta = 1).
  Status linear_residual(const Tensor& w, const Tensor& x, int64_t m, Tensor& y, Tensor& scratch) override {
    (void)scratch;
    return residual_into(w, x, m, y, nullptr);
  }
  // linear_residual; `ready` (x's producer's flags, the launch just before) where the sum is deferred.
  Status residual_into(const Tensor& w, const Tensor& x, int64_t m, Tensor& y, const cuda::GemvReady* ready) {
    const Tensor* ws[] = {&w};
    Tensor* ys[] = {&y};
    LITHE_TRY(settle_if({&x}));
    if (!defers(w, m, y)) {
      LITHE_TRY(settle_if({&y}));
      return project(ws, ys, x, m, cuda::Epilogue::accumulate);
    }
    LITHE_TRY(check_act(y, m, w.packed()->n_out, "linear output"));
    const int64_t n = m * w.packed()->n_out;
    LITHE_TRY(reserve_residual(n));
    cuda::GemvResidual r;
    const int next = pend_.acc == 0 ? 1 : 0;
    r.add = residual_acc(next);
    r.fold = pend_.acc >= 0 ? residual_acc(pend_.acc) : nullptr;
    LITHE_TRY(project(ws, ys, x, m, cuda::Epilogue::accumulate, nullptr, nullptr, &r, ready));
    pend_ = {next, y.data_as<float>(), n};
    return Status::ok();
  }
  // Whether linear_residual(w, .., m, y) defers its sums (deferred residual sums, below).
  bool defers(const Tensor& w, int64_t m, const Tensor& y) const {
    static const bool on = env_on("LITHE_GEMV_DEFER");
    const Tensor* ws[] = {&w};
    return on && m <= cuda::kGemvResidualMaxRows && gemv_fuses(ws, m, cuda::Epilogue::accumulate) &&
           !(pend_.acc >= 0 && (pend_.y != y.data() || pend_.n != m * y.dim(1)));
  }
  Status swiglu(const Tensor& w_gate, const Tensor& w_up, const Tensor& x, int64_t m, Tensor& gate,
                Tensor& up) override {
    LITHE_TRY(settle_if({&x, &gate, &up}));
    const Tensor* ws[] = {&w_gate, &w_up};
    Tensor* ys[] = {&gate, &up};
    if (matvec_path(w_gate, m) || gemv_fuses(ws, m, cuda::Epilogue::swiglu))
      return project(ws, ys, x, m, cuda::Epilogue::swiglu);
    LITHE_TRY(project(std::span<const Tensor* const>(ws, 1), std::span<Tensor*>(ys, 1), x, m, cuda::Epilogue::store));
    LITHE_TRY(project(std::span<const Tensor* const>(ws + 1, 1), std::span<Tensor*>(ys + 1, 1), x, m,
                      cuda::Epilogue::store));
    return silu_mul(gate, up, m);
  }
  // The norm folds into the matvec kernel; otherwise (GEMM path) the default composition.
  Status rmsnorm_linear_many(const InputNorm& norm, std::span<const Tensor* const> ws, const Tensor& x, int64_t m,
                             std::span<Tensor*> ys) override {
    LITHE_TRY(settle_if(ys));
    if (ws.size() != ys.size() || ws.empty())
      return error(StatusCode::invalid_argument, "rmsnorm_linear_many: {} weights but {} outputs", ws.size(),
                   ys.size());
    if ((ws.size() <= 3 && norm_folds(*ws[0], m, x)) || gemv_fuses(ws, m, cuda::Epilogue::store)) {
      LITHE_ASSIGN(const cuda::GemvResidual r, read_residual(ws, x, m, cuda::Epilogue::store));
      return project(ws, ys, x, m, cuda::Epilogue::store, &norm, nullptr, &r);
    }
    return Backend::rmsnorm_linear_many(norm, ws, x, m, ys);
  }
  Status rmsnorm_swiglu(const InputNorm& norm, const Tensor& w_gate, const Tensor& w_up, const Tensor& x, int64_t m,
                        Tensor& gate, Tensor& up) override {
    LITHE_TRY(settle_if({&gate, &up}));
    const Tensor* ws[] = {&w_gate, &w_up};
    Tensor* ys[] = {&gate, &up};
    if (norm_folds(w_gate, m, x) || gemv_fuses(ws, m, cuda::Epilogue::swiglu)) {
      LITHE_ASSIGN(const cuda::GemvResidual r, read_residual(ws, x, m, cuda::Epilogue::swiglu));
      return project(ws, ys, x, m, cuda::Epilogue::swiglu, &norm, nullptr, &r);
    }
    return Backend::rmsnorm_swiglu(norm, w_gate, w_up, x, m, gate, up);
  }

  Status add_bias(Tensor& y, int64_t m, const Tensor& bias) override {
    LITHE_TRY(settle_if({&y}));
    LITHE_TRY(check_act(y, m, bias.numel(), "bias target"));
    if (steps_->replaying()) return Status::ok();
    return cuda::add_bias(y.data_as<float>(), bias.data_as<float>(), m, bias.numel(), stream_);
  }
  Status rmsnorm(const Tensor& x, int64_t m, const Tensor& weight, float eps, Tensor& y) override {
    LITHE_TRY(settle_if({&x, &y}));
    const int64_t n = weight.numel();
    LITHE_TRY(check_act(x, m, n, "rmsnorm input"));
    LITHE_TRY(check_act(y, m, n, "rmsnorm output"));
    if (steps_->replaying()) return Status::ok();
    return cuda::rmsnorm(x.data_as<float>(), weight.data_as<float>(), eps, m, n, y.data_as<float>(), stream_);
  }
  Status rope(Tensor& x, int64_t m, int64_t n_heads, int64_t head_dim, const int32_t* pos, const cpu::RopeTable& table,
              cpu::RopeStyle style) override {
    LITHE_TRY(settle_if({&x}));
    LITHE_TRY(check_act(x, m, n_heads * head_dim, "rope input"));
    LITHE_ASSIGN(const float* freq, rope_freqs(table));
    LITHE_ASSIGN(const void* dpos, steps_->stage(pos, static_cast<size_t>(m) * sizeof(int32_t)));
    if (steps_->replaying()) return Status::ok();
    return cuda::rope(x.data_as<float>(), m, n_heads, head_dim, static_cast<const int32_t*>(dpos), freq, table.rot_dim,
                      style == cpu::RopeStyle::interleaved ? cuda::RopeMode::interleaved : cuda::RopeMode::half,
                      stream_);
  }
  Status silu_mul(Tensor& gate, const Tensor& up, int64_t m) override {
    LITHE_TRY(settle_if({&gate, &up}));
    LITHE_TRY(check_act(gate, m, up.dim(1), "silu_mul gate"));
    if (steps_->replaying()) return Status::ok();
    return cuda::silu_mul(gate.data_as<float>(), up.data_as<float>(), m * up.dim(1), stream_);
  }
  Status add(Tensor& y, const Tensor& x, int64_t m) override {
    LITHE_TRY(settle_if({&y, &x}));
    LITHE_TRY(check_act(y, m, x.dim(1), "add target"));
    if (steps_->replaying()) return Status::ok();
    return cuda::add(y.data_as<float>(), x.data_as<float>(), m * x.dim(1), stream_);
  }

  Status attention(KvCache& cache, int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, int64_t m,
                   const int32_t* q_pos, const int64_t* slots, const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(settle_if({&q, &k, &v, &out}));
    return attend(cache, layer, q, k, v, m, q_pos, slots, shape, out, Prologue::store);
  }
  // One launch rotates q and k and stores k and v (cuda::rope_kv_store), then attention.
  Status rope_attention(KvCache& cache, int64_t layer, Tensor& q, Tensor& k, const Tensor& v, int64_t m,
                        const int32_t* q_pos, const int64_t* slots, const cpu::RopeTable& table, cpu::RopeStyle style,
                        const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(settle_if({&q, &k, &v, &out}));
    if (cache.keys_pre_rope())  // a rolling (sink / window) cache keeps its keys un-rotated
      return pre_rope_attention(cache, layer, q, k, v, m, q_pos, slots, table, style, shape, out);
    const Rope r{&table, style, q.data_as<float>(), k.data_as<float>()};
    return attend(cache, layer, q, k, v, m, q_pos, slots, shape, out, Prologue::rope_store, &r);
  }
  // A batch's one-token sequences over full caches: each one's rope + store launch as
  // rope_attention's, then one attention_decode_batch for all of them (instead of a launch per
  // sequence). Other sequences (prefill chunks, rolling caches) go one at a time.
  Status rope_attention_batch(std::span<const BatchSeq> seqs, int64_t layer, Tensor& q, Tensor& k, const Tensor& v,
                              int64_t m, const int32_t* q_pos, const cpu::RopeTable& table, cpu::RopeStyle style,
                              const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(settle_if({&q, &k, &v, &out}));
    LITHE_TRY(check_batch(seqs, m));
    std::vector<BatchSeq> solo;
    std::vector<cuda::DecodeSeq> ds;
    cuda::AttentionParams p;  // what the batch shares (checked as the first sequence's)
    for (const BatchSeq& s : seqs) {
      if (s.n != 1 || s.cache->keys_pre_rope() || seqs.size() < 2) {
        solo.push_back(s);
        continue;
      }
      LITHE_ASSIGN(Tensor qs, q.slice_rows(s.row0, s.row0 + 1));
      LITHE_ASSIGN(Tensor ks, k.slice_rows(s.row0, s.row0 + 1));
      LITHE_ASSIGN(Tensor vs, v.slice_rows(s.row0, s.row0 + 1));
      LITHE_ASSIGN(Tensor os, out.slice_rows(s.row0, s.row0 + 1));
      const Rope r{&table, style, qs.data_as<float>(), ks.data_as<float>()};
      cuda::AttentionParams a;
      LITHE_TRY(attend(*s.cache, layer, qs, ks, vs, 1, q_pos + s.row0, s.slots, shape, os, Prologue::rope_store, &r, &a));
      if (ds.empty()) {
        p = a;
      } else if (a.kv != p.kv || a.kv_stride != p.kv_stride) {
        return error(StatusCode::invalid_argument, "rope_attention_batch: caches of one batch differ in type or width");
      }
      p.kv_capacity = std::max(p.kv_capacity, a.kv_capacity);
      ds.push_back({a.q, a.q_pos, a.k, a.v, a.kv_pos, a.n_kv, a.pages, a.out});
    }
    if (!ds.empty()) LITHE_TRY(attend_batch(p, ds));
    return solo.empty() ? Status::ok()
                        : Backend::rope_attention_batch(solo, layer, q, k, v, m, q_pos, table, style, shape, out);
  }
  // q rotated in place, k and v stored as they are, then every scanned key rotated by its slot's
  // current position into scratch (cuda::rope_keys), which the attention kernel reads.
  Status pre_rope_attention(KvCache& cache, int64_t layer, Tensor& q, const Tensor& k, const Tensor& v, int64_t m,
                            const int32_t* q_pos, const int64_t* slots, const cpu::RopeTable& table,
                            cpu::RopeStyle style, const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(settle_if({&q, &k, &v, &out}));
    LITHE_TRY(rope(q, m, shape.n_heads, shape.head_dim, q_pos, table, style));
    const Rope r{&table, style, nullptr, nullptr};
    return attend(cache, layer, q, k, v, m, q_pos, slots, shape, out, Prologue::store_pre_rope, &r);
  }
  // Decode sizes: the q/k/v matvec's rope_kv epilogue rotates and stores into the cache, then
  // only the attention kernel runs (one launch fewer per layer).
  Status qkv_rope_attention(const InputNorm& norm, std::span<const Tensor* const> ws, const Tensor& x, int64_t m,
                            std::span<Tensor*> ys, KvCache& cache, int64_t layer, const int32_t* pos,
                            const int64_t* slots, const cpu::RopeTable& table, cpu::RopeStyle style,
                            const AttentionShape& shape, Tensor& out, const OutProjection& o) override {
    LITHE_TRY(check_out_projection(o));
    LITHE_TRY(settle_if(ys));
    LITHE_TRY(settle_if({&out}));
    static const bool on = env_on("LITHE_QKV_ROPE");
    const bool fuses = norm_folds(*ws[0], m, x) || (gemv_fuses(ws, m, cuda::Epilogue::rope_kv) &&
                                                    cuda::kGemvItemRows % shape.head_dim == 0);
    if (!on || ws.size() != 3 || ys.size() != 3 || m > cuda::kDecodeMaxQueries || !fuses ||
        ys[1]->dim(1) != cache.kv_dim() || cache.k(layer).device() != Device::cuda || cache.keys_pre_rope())
      return Backend::qkv_rope_attention(norm, ws, x, m, ys, cache, layer, pos, slots, table, style, shape, out, o);
    // The output projection starts on each head as its attention lands (flags instead of the
    // attention launch's end: GemvReady) where it runs as the deferred-sum GEMV right after the
    // attention at m = 1; its accumulator is sized first, so that nothing launches in between.
    // LITHE_ATTN_READY=0 (a benchmark knob) waits for the whole launch.
    static const bool ready_on = env_on("LITHE_ATTN_READY");
    const bool flag_heads = ready_on && o.w != nullptr && m == 1 && defers(*o.w, m, *o.residual);
    unsigned* ready = nullptr;
    if (flag_heads) {
      LITHE_TRY(reserve_residual(m * o.w->packed()->n_out));
      LITHE_ASSIGN(void* flags, ready_ws_.get(static_cast<size_t>(shape.n_heads) * sizeof(unsigned)));
      ready = static_cast<unsigned*>(flags);
    }
    LITHE_ASSIGN(const float* freq, rope_freqs(table));
    LITHE_ASSIGN(const void* dpos, steps_->stage(pos, static_cast<size_t>(m) * sizeof(int32_t)));
    LITHE_ASSIGN(const void* dslots, steps_->stage(slots, static_cast<size_t>(m) * sizeof(int64_t)));
    cuda::MatvecRope r;
    r.pos = static_cast<const int32_t*>(dpos);
    r.inv_freq = freq;
    r.head_dim = shape.head_dim;
    r.rot_dim = table.rot_dim;
    r.mode = style == cpu::RopeStyle::interleaved ? cuda::RopeMode::interleaved : cuda::RopeMode::half;
    r.slots = static_cast<const int64_t*>(dslots);
    r.k_cache = cache.k(layer).data();
    r.v_cache = cache.v(layer).data();
    r.kv = cache.dtype() == DType::f16 ? cuda::KvType::f16 : cuda::KvType::f32;
    r.kv_pos = layer == 0 && cache.device_positions().defined() ? cache.device_positions().data_as<int32_t>() : nullptr;
    LITHE_ASSIGN(r.pages, device_pages(cache));
    LITHE_ASSIGN(const cuda::GemvResidual res, read_residual(ws, x, m, cuda::Epilogue::rope_kv));
    LITHE_TRY(project(ws, ys, x, m, cuda::Epilogue::rope_kv, &norm, &r, &res));
    LITHE_TRY(attend(cache, layer, *ys[0], *ys[1], *ys[2], m, pos, slots, shape, out, Prologue::none, nullptr, nullptr,
                     ready));
    if (o.w == nullptr) return Status::ok();
    const cuda::GemvReady gr{ready, shape.head_dim};
    return residual_into(*o.w, out, m, *o.residual, ready != nullptr ? &gr : nullptr);
  }


  Status to_host(const Tensor& x, int64_t m, float* dst) override {
    LITHE_TRY(settle_if({&x}));
    LITHE_TRY(check_act(x, m, -1, "to_host"));
    const size_t bytes = static_cast<size_t>(m * x.dim(1)) * sizeof(float);
    LITHE_TRY(check(cudaMemcpyAsync(dst, x.data(), bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (to host)"));
    LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    steps_->synced();
    return Status::ok();
  }

  // top_k: the kernel writes values, then ids, into topk_ (and each row's best id into best_, the
  // feed of kArgmaxToken), and one copy takes them into a pinned slot whose event marks its arrival.
  Status top_k(const Tensor& logits, int64_t rows, int k, float* vals, int32_t* ids) override {
    LITHE_TRY(settle_if({&logits}));
    if (!topk_pending_.empty()) {  // unfetched results are dropped once their copies have landed
      LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
      topk_pending_.clear();
    }
    LITHE_TRY(top_k_launch(logits, rows, k));
    return fetch_top_k(vals, ids, nullptr, nullptr);
  }
  Status top_k_launch(const Tensor& logits, int64_t rows, int k) override {
    LITHE_TRY(settle_if({&logits}));
    LITHE_TRY(check_act(logits, rows, -1, "top_k logits"));
    const int64_t vocab = logits.dim(1);
    if (k <= 0) return error(StatusCode::invalid_argument, "top_k: k = {} must be positive", k);
    if (topk_pending_.size() >= kTopKInFlight)
      return error(StatusCode::internal, "top_k_launch: {} results are already waiting to be fetched",
                   topk_pending_.size());
    TopKSlot& slot = topk_slots_[topk_next_];
    const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(k);
    slot.n = n;
    LITHE_ASSIGN(void* host, slot.host.get(ids_offset(n) + n * sizeof(int32_t)));
    if (k > cuda::kTopKMax || k > vocab) {  // on the host (best_ left behind: kArgmaxToken refused)
      best_rows_ = 0;
      LITHE_TRY(Backend::top_k(logits, rows, k, static_cast<float*>(host),
                               reinterpret_cast<int32_t*>(static_cast<char*>(host) + ids_offset(n))));
    } else {
      const size_t bytes = ids_offset(n) + n * sizeof(int32_t);
      LITHE_ASSIGN(void* dev, topk_.get(bytes));
      auto* dv = static_cast<float*>(dev);
      auto* di = reinterpret_cast<int32_t*>(static_cast<char*>(dev) + ids_offset(n));
      const bool feed = rows <= kBestMax;
      LITHE_TRY(cuda::top_k(logits.data_as<float>(), rows, vocab, k, dv, di, stream_,
                            feed ? best_.data_as<int32_t>() : nullptr));
      best_rows_ = feed ? rows : 0;
      best_vocab_ = vocab;
      LITHE_TRY(check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_), "top_k copy"));
    }
    LITHE_TRY(check(cudaEventRecord(slot.done, stream_), "cudaEventRecord"));
    topk_pending_.push_back(topk_next_);
    topk_next_ = (topk_next_ + 1) % kTopKInFlight;
    return Status::ok();
  }
  Status top_k_fetch(std::vector<float>& vals, std::vector<int32_t>& ids) override {
    return fetch_top_k(nullptr, nullptr, &vals, &ids);
  }

  Status token_logprobs(const Tensor& logits, int64_t rows, const int32_t* targets, float* out) override {
    LITHE_TRY(settle_if({&logits}));
    LITHE_TRY(check_act(logits, rows, -1, "token_logprobs logits"));
    const int64_t vocab = logits.dim(1);
    for (int64_t r = 0; r < rows; ++r)
      if (targets[r] >= vocab)
        return error(StatusCode::invalid_argument, "token_logprobs: target {} of row {} is outside the vocabulary {}",
                     targets[r], r, vocab);
    const size_t n = static_cast<size_t>(rows), targets_at = ids_offset(n);
    LITHE_ASSIGN(void* dev, topk_.get(targets_at + n * sizeof(int32_t)));  // values, then targets
    void* dv = dev;
    void* dt = static_cast<char*>(dev) + targets_at;
    LITHE_TRY(check(cudaMemcpyAsync(dt, targets, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                    "token_logprobs copy"));
    LITHE_TRY(cuda::token_logprobs(logits.data_as<float>(), rows, vocab, static_cast<const int32_t*>(dt),
                                   static_cast<float*>(dv), stream_));
    LITHE_TRY(check(cudaMemcpyAsync(out, dv, n * sizeof(float), cudaMemcpyDeviceToHost, stream_),
                    "token_logprobs copy"));
    LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    steps_->synced();
    return Status::ok();
  }

  Status fill_random(Tensor& t, uint64_t seed, float center, float scale) override {
    LITHE_TRY(settle_if({&t}));
    if (t.device() != Device::cuda) return Backend::fill_random(t, seed, center, scale);
    LITHE_ASSIGN(cuda::WeightType wt, weight_type(t));
    LITHE_TRY(cuda::fill_uniform(t.data(), wt, t.numel(), seed, center, scale, stream_));
    return check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  Status begin_step(uint64_t key) override { return steps_->begin(key); }
  Status end_step(bool run) override { return steps_->end(run); }
  Status settle() override {  // the deferred residual sums into their residual (gemv_fold)
    if (pend_.acc < 0) return Status::ok();
    const Pending p = std::exchange(pend_, Pending{});
    if (steps_->replaying()) return Status::ok();
    return cuda::gemv_fold(p.y, residual_acc(p.acc), p.n, stream_);
  }

 private:
  CudaBackend() = default;

  // ys[j] (+)= x · ws[j]ᵀ for one epilogue: the matvec kernel for few rows, cuBLAS otherwise. With
  // `norm` the input is rmsnorm(x), folded into the matvec kernel (callers check norm_folds).
  // `res` (GemvResidual): for GEMV launches only (project_gq where gemv_fuses; checked here).
  Status project(std::span<const Tensor* const> ws, std::span<Tensor*> ys, const Tensor& x, int64_t m,
                 cuda::Epilogue e, const InputNorm* norm = nullptr, const cuda::MatvecRope* rope = nullptr,
                 const cuda::GemvResidual* res = nullptr, const cuda::GemvReady* ready = nullptr) {
    const int64_t n_in = ws[0]->dim(1);
    LITHE_TRY(check_act(x, m, n_in, "linear input"));
    if (norm != nullptr) {
      if (norm->weight == nullptr || norm->scratch == nullptr)
        return error(StatusCode::invalid_argument, "rmsnorm + linear: the norm needs a weight and a scratch tensor");
      const Tensor& nw = *norm->weight;
      if (nw.dtype() != DType::f32 || nw.device() != Device::cuda || !nw.is_contiguous() || nw.numel() != n_in)
        return error(StatusCode::invalid_argument, "rmsnorm + linear: expected a cuda f32 norm weight of {} values, "
                     "got {}", n_in, nw.describe());
      LITHE_TRY(check_act(*norm->scratch, m, n_in, "rmsnorm scratch"));
      if (!matvec_path(*ws[0], m) && !gemv_fuses(ws, m, e))
        return error(StatusCode::internal, "a folded rmsnorm reached the GEMM path");
    }
    if (res != nullptr && (res->add != nullptr || res->in != nullptr) &&
        !(ws[0]->dtype() == DType::gq && gemv_fuses(ws, m, e)))
      return error(StatusCode::internal, "deferred residual sums reached a projection other than the GEMV");
    if (ws[0]->dtype() == DType::gq) return project_gq(ws, ys, x, m, e, norm, rope, res, ready);
    if (ready != nullptr) return error(StatusCode::internal, "attention's ready flags reached a projection other than the GEMV");
    LITHE_ASSIGN(cuda::WeightType wt, weight_type(*ws[0]));
    for (size_t j = 0; j < ws.size(); ++j) {
      LITHE_TRY(check_weight(*ws[j], "linear weight"));
      LITHE_TRY(check_act(*ys[j], m, ws[j]->dim(0), "linear output"));
      if (ws[j]->dtype() != ws[0]->dtype() || ws[j]->dim(1) != n_in)
        return error(StatusCode::invalid_argument, "linear: fused weights {} and {} differ in dtype or width",
                     ws[0]->describe(), ws[j]->describe());
    }
    if (steps_->replaying()) return Status::ok();
    if (matvec_path(m, n_in)) {
      cuda::MatvecOut outs[3];
      for (size_t j = 0; j < ws.size(); ++j) outs[j] = {ws[j]->data(), ws[j]->dim(0), ys[j]->data_as<float>()};
      cuda::MatvecNorm mn;
      if (norm != nullptr) mn = {norm->weight->data_as<float>(), norm->eps};
      return cuda::matvec(outs, static_cast<int>(ws.size()), wt, n_in, x.data_as<float>(), m, e, stream_, mn, rope);
    }
    if (e == cuda::Epilogue::rope_kv) return error(StatusCode::internal, "rope_kv epilogue reached the GEMM path");
    if (e == cuda::Epilogue::swiglu)
      return error(StatusCode::internal, "swiglu epilogue reached the GEMM path");
    for (size_t j = 0; j < ws.size(); ++j)
      LITHE_TRY(gemm(ws[j]->data(), ws[j]->dim(0), n_in, wt, x, m, *ys[j], e == cuda::Epilogue::accumulate ? 1.0f : 0.0f));
    return Status::ok();
  }

  // project() for gq weights: one GEMV launch for all of ws where gemv_fuses (m <= 16; the
  // epilogue and a folded norm included); otherwise (store or accumulate) one matrix at a time: the
  // Marlin-class GEMM, or the GEMV kernel, or (GEMV layout, larger m) a dense f16 copy and cuBLAS.
  Status project_gq(std::span<const Tensor* const> ws, std::span<Tensor*> ys, const Tensor& x, int64_t m,
                    cuda::Epilogue e, const InputNorm* norm, const cuda::MatvecRope* rope,
                    const cuda::GemvResidual* res, const cuda::GemvReady* ready) {
    if (gemv_fuses(ws, m, e)) {
      cuda::GemvOut outs[3];
      for (size_t j = 0; j < ws.size(); ++j) {
        const PackedWeight* p = ws[j]->packed();
        LITHE_TRY(check_act(x, m, p->n_in, "linear input"));
        if (e != cuda::Epilogue::swiglu || j == 0) LITHE_TRY(check_act(*ys[j], m, p->n_out, "linear output"));
        outs[j] = {p, ws[j]->data(), ys[j]->data_as<float>()};
      }
      const int n = static_cast<int>(ws.size());
      const int64_t bytes = cuda::gemv_scratch_bytes(outs, n, e);
      LITHE_ASSIGN(void* scratch, gemv_ws_.get(static_cast<size_t>(bytes), stream_));  // counters start at zero
      if (steps_->replaying()) return Status::ok();
      cuda::MatvecNorm mn;
      if (norm != nullptr) mn = {norm->weight->data_as<float>(), norm->eps};
      return cuda::gemv(outs, n, x.data_as<float>(), m, e, scratch, bytes, stream_, mn, rope, res, ready);
    }
    if ((e != cuda::Epilogue::store && e != cuda::Epilogue::accumulate) || norm != nullptr || ready != nullptr)
      return error(StatusCode::internal, "gq weights reached a fused epilogue, norm or ready flags their kernel cannot run");
    const bool acc = e == cuda::Epilogue::accumulate;
    for (size_t j = 0; j < ws.size(); ++j) {
      const Tensor& w = *ws[j];
      const PackedWeight* p = w.packed();
      if (p == nullptr || w.device() != Device::cuda)
        return error(StatusCode::invalid_argument, "linear: expected a packed cuda gq weight, got {}", w.describe());
      LITHE_TRY(check_act(x, m, p->n_in, "linear input"));
      LITHE_TRY(check_act(*ys[j], m, p->n_out, "linear output"));
      float* y = ys[j]->data_as<float>();
      if (p->layout == cuda::kLayoutMarlin) {
        const auto bytes = cuda::marlin_scratch_bytes(*p, m);
        LITHE_ASSIGN(void* ws_mem, marlin_ws_.get(static_cast<size_t>(bytes), stream_));  // its locks start at zero
        if (steps_->replaying()) continue;
        LITHE_TRY(cuda::marlin_linear(*p, w.data(), x.data_as<float>(), m, y, acc, ws_mem, bytes, stream_));
      } else if (m <= cuda::kGemvMaxRows) {
        const cuda::GemvOut out{p, w.data(), y};
        const int64_t bytes = cuda::gemv_scratch_bytes(&out, 1, e);
        LITHE_ASSIGN(void* scratch, gemv_ws_.get(static_cast<size_t>(bytes), stream_));
        if (steps_->replaying()) continue;
        LITHE_TRY(cuda::gemv_linear(*p, w.data(), x.data_as<float>(), m, y, acc, scratch, bytes, stream_));
      } else {
        LITHE_ASSIGN(void* w16, w16_.get(static_cast<size_t>(p->n_out * p->n_in) * 2));
        if (steps_->replaying()) continue;
        LITHE_TRY(cuda::gemv_dequantize_f16(*p, w.data(), w16, stream_));
        LITHE_TRY(gemm(w16, p->n_out, p->n_in, cuda::WeightType::f16, x, m, *ys[j], acc ? 1.0f : 0.0f));
      }
    }
    return Status::ok();
  }

  // y[m, n_out] = x[m, n_in] · wᵀ + beta · y, f32 accumulation; w [n_out][n_in] of type wt.
  Status gemm(const void* w, int64_t w_rows, int64_t w_cols, cuda::WeightType wt, const Tensor& x, int64_t m, Tensor& y,
              float beta) {
    const auto n_out = static_cast<int>(w_rows), n_in = static_cast<int>(w_cols), rows = static_cast<int>(m);
    const float alpha = 1.0f;
    const void* xin = x.data();
    cudaDataType_t at = CUDA_R_32F;
    if (wt != cuda::WeightType::f32) {
      LITHE_ASSIGN(void* conv, x16_.get(static_cast<size_t>(m * n_in) * 2));
      if (wt == cuda::WeightType::f16) {
        LITHE_TRY(cuda::to_f16(x.data_as<float>(), m * n_in, conv, stream_));
        at = CUDA_R_16F;
      } else {
        LITHE_TRY(cuda::to_bf16(x.data_as<float>(), m * n_in, conv, stream_));
        at = CUDA_R_16BF;
      }
      xin = conv;
    }
    // Column-major view: yᵀ [n_out, m] = W [n_in, n_out]ᵀ · xᵀ [n_in, m].
    return check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n_out, rows, n_in, &alpha, w, at, n_in, xin,
                                   at, n_in, &beta, y.data(), CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx");
  }

  // The rope table's frequencies on the device, uploaded once per table.
  Result<const float*> rope_freqs(const cpu::RopeTable& t) {
    auto it = rope_.find(&t);
    if (it == rope_.end() || it->second.numel() != static_cast<int64_t>(t.inv_freq.size())) {
      if (steps_->capturing() || steps_->replaying())
        return error(StatusCode::internal, "rope table first seen inside a captured step");
      Tensor h;
      LITHE_ASSIGN(h, Tensor::empty(DType::f32, {static_cast<int64_t>(t.inv_freq.size())}));
      std::copy(t.inv_freq.begin(), t.inv_freq.end(), h.data_as<float>());
      LITHE_ASSIGN(Tensor d, h.to(Device::cuda));
      it = rope_.insert_or_assign(&t, std::move(d)).first;
    }
    return it->second.data_as<const float>();
  }

  // The rotary embedding rope_attention applies (in place: q and k are its tensors' data), or
  // pre_rope_attention's (table and style only).
  struct Rope {
    const cpu::RopeTable* table;
    cpu::RopeStyle style;
    float* q;
    float* k;
  };

  // The cache's slot -> row map with its block table on the device (kv_pages.h), staged at its
  // full length max_blocks() (unused entries 0) so that a captured step's pieces keep their sizes.
  Result<KvPages> device_pages(const KvCache& cache) {
    if (!cache.paged()) return KvPages{};
    pages_host_.assign(static_cast<size_t>(cache.max_blocks()), 0);
    std::copy(cache.blocks().begin(), cache.blocks().end(), pages_host_.begin());
    LITHE_ASSIGN(const void* d, steps_->stage(pages_host_.data(), pages_host_.size() * sizeof(int32_t)));
    return KvPages{static_cast<const int32_t*>(d), cache.pages().block_size};
  }

  // What attend() does before attending: store k/v rows (and, for layer 0, their positions) into
  // the cache, rotate q and k first and then store (`rot` given), nothing (already stored), or
  // store and then rotate every cached key into scratch by the cache's positions (`rot` given).
  enum class Prologue { store, rope_store, none, store_pre_rope };

  // attention() after its prologue, then the decode (m <= 8) or prefill kernel. With `batched`
  // (decode sizes), the decode kernel is not launched: its arguments go there, for one
  // attention_decode_batch over many sequences (rope_attention_batch).
  Status attend(KvCache& cache, int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, int64_t m,
                const int32_t* q_pos, const int64_t* slots, const AttentionShape& shape, Tensor& out,
                Prologue pro, const Rope* rot = nullptr, cuda::AttentionParams* batched = nullptr,
                unsigned* ready = nullptr) {
    const int64_t kv_dim = cache.kv_dim();
    LITHE_TRY(check_act(k, m, kv_dim, "attention k"));
    LITHE_TRY(check_act(v, m, kv_dim, "attention v"));
    LITHE_TRY(check_act(q, m, shape.n_heads * shape.head_dim, "attention q"));
    LITHE_TRY(check_act(out, m, shape.n_heads * shape.head_dim, "attention out"));
    if (shape.n_kv_heads * shape.head_dim != kv_dim || shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0)
      return error(StatusCode::invalid_argument, "attention: {} heads x {} and {} kv heads do not match the cache's {}",
                   shape.n_heads, shape.head_dim, shape.n_kv_heads, kv_dim);
    if (cache.k(layer).device() != Device::cuda || !cache.device_positions().defined())
      return error(StatusCode::invalid_argument, "attention: the KV cache is on {}, the backend on cuda",
                   device_name(cache.k(layer).device()));
    const float* freq = nullptr;
    if (pro == Prologue::rope_store || pro == Prologue::store_pre_rope) {
      LITHE_ASSIGN(freq, rope_freqs(*rot->table));
    }
    const int32_t n_kv = static_cast<int32_t>(cache.size());
    LITHE_ASSIGN(const void* dslots, steps_->stage(slots, static_cast<size_t>(m) * sizeof(int64_t)));
    LITHE_ASSIGN(const void* dqpos, steps_->stage(q_pos, static_cast<size_t>(m) * sizeof(int32_t)));
    LITHE_ASSIGN(const void* dnkv, steps_->stage(&n_kv, sizeof(int32_t)));
    const cuda::KvType kt = cache.dtype() == DType::f16 ? cuda::KvType::f16 : cuda::KvType::f32;
    int32_t* kv_pos = cache.device_positions().data_as<int32_t>();
    cuda::AttentionParams p;
    p.q = q.data_as<float>();
    p.q_pos = static_cast<const int32_t*>(dqpos);
    p.n_q = m;
    p.k = cache.k(layer).data();
    p.v = cache.v(layer).data();
    p.kv = kt;
    p.kv_pos = kv_pos;
    p.n_kv = static_cast<const int32_t*>(dnkv);
    p.kv_capacity = cache.capacity();
    p.kv_stride = kv_dim;
    LITHE_ASSIGN(p.pages, device_pages(cache));
    p.n_heads = shape.n_heads;
    p.n_kv_heads = shape.n_kv_heads;
    p.head_dim = shape.head_dim;
    p.scale = shape.scale;
    p.out = out.data_as<float>();
    // A flag the kernel would never set leaves o's GEMV waiting: only single-sequence decode sets them.
    if (ready != nullptr && (m != 1 || batched != nullptr || pro == Prologue::store_pre_rope))
      return error(StatusCode::internal, "attention ready flags asked for {} rows{}", m, batched ? " (batched)" : "");
    p.ready = ready;
    cuda::RopeKeysArgs rk;  // store_pre_rope: the keys attention reads, and every slot's position
    if (pro == Prologue::store_pre_rope) {
      static_assert(KvCache::kNoPosition == cuda::kNoKvPosition);
      const size_t pos_bytes = static_cast<size_t>(cache.capacity()) * sizeof(int32_t);
      LITHE_ASSIGN(const void* dall, steps_->stage(cache.positions(), pos_bytes));
      LITHE_ASSIGN(void* keys, keys_.get(static_cast<size_t>(cache.k(layer).nbytes())));
      rk.k_cache = p.k;
      rk.dst = keys;
      rk.kv = kt;
      rk.kv_pos = static_cast<const int32_t*>(dall);
      rk.n = p.n_kv;
      rk.capacity = cache.capacity();
      rk.n_kv_heads = shape.n_kv_heads;
      rk.head_dim = shape.head_dim;
      rk.inv_freq = freq;
      rk.rot_dim = rot->table->rot_dim;
      rk.mode = rot->style == cpu::RopeStyle::interleaved ? cuda::RopeMode::interleaved : cuda::RopeMode::half;
      rk.pages = p.pages;  // the rotated keys keep the cache's rows
      p.k = keys;
      p.kv_pos = rk.kv_pos;
    }
    if (batched != nullptr && (m > cuda::kDecodeMaxQueries || pro == Prologue::store_pre_rope))
      return error(StatusCode::internal, "batched decode attention of {} rows", m);
    if (batched != nullptr) *batched = p;
    size_t work_bytes = 0;
    if (m <= cuda::kDecodeMaxQueries && batched == nullptr) work_bytes = cuda::attention_decode_work_bytes(p);
    void* work = nullptr;
    if (work_bytes > 0) {  // its merge counters must start at zero (cuda_ops.h)
      LITHE_ASSIGN(work, attn_ws_.get(work_bytes, stream_));
    }
    if (steps_->replaying()) return Status::ok();
    // Positions are written with layer 0's K/V (every layer shares them).
    int32_t* pos_out = layer == 0 ? kv_pos : nullptr;
    if (pro == Prologue::rope_store) {
      cuda::RopeKvArgs r;
      r.q = rot->q;
      r.k = rot->k;
      r.v = v.data_as<float>();
      r.m = m;
      r.n_heads = shape.n_heads;
      r.n_kv_heads = shape.n_kv_heads;
      r.head_dim = shape.head_dim;
      r.pos = static_cast<const int32_t*>(dqpos);
      r.inv_freq = freq;
      r.rot_dim = rot->table->rot_dim;
      r.mode = rot->style == cpu::RopeStyle::interleaved ? cuda::RopeMode::interleaved : cuda::RopeMode::half;
      r.slots = static_cast<const int64_t*>(dslots);
      r.k_cache = cache.k(layer).data();
      r.v_cache = cache.v(layer).data();
      r.kv = kt;
      r.kv_pos = pos_out;
      r.pages = p.pages;
      LITHE_TRY(cuda::rope_kv_store(r, stream_));
    } else if (pro == Prologue::store || pro == Prologue::store_pre_rope) {
      LITHE_TRY(cuda::kv_store(k.data_as<float>(), v.data_as<float>(), m, kv_dim, static_cast<const int64_t*>(dslots),
                               static_cast<const int32_t*>(dqpos), cache.k(layer).data(), cache.v(layer).data(), kt,
                               pos_out, p.pages, stream_));
      if (pro == Prologue::store_pre_rope) LITHE_TRY(cuda::rope_keys(rk, stream_));
    }
    if (batched != nullptr) return Status::ok();
    if (m <= cuda::kDecodeMaxQueries) return cuda::attention_decode(p, work, stream_);
    return cuda::attention_prefill(p, n_kv, stream_);
  }

  // attention_decode_batch over the sequences ds (staged with the step), as many per launch as its
  // merge counters allow.
  Status attend_batch(const cuda::AttentionParams& p, const std::vector<cuda::DecodeSeq>& ds) {
    const auto n = static_cast<int64_t>(ds.size());
    const int64_t per = std::max<int64_t>(1, cuda::attention_decode_batch_max_seqs(p));
    LITHE_ASSIGN(const void* dseqs, steps_->stage(ds.data(), ds.size() * sizeof(cuda::DecodeSeq)));
    LITHE_ASSIGN(void* work, attn_ws_.get(cuda::attention_decode_batch_work_bytes(p, std::min(n, per)), stream_));
    if (steps_->replaying()) return Status::ok();
    for (int64_t i = 0; i < n; i += per)
      LITHE_TRY(cuda::attention_decode_batch(p, static_cast<const cuda::DecodeSeq*>(dseqs) + i, std::min(per, n - i),
                                             work, stream_));
    return Status::ok();
  }

  // The oldest unfetched top_k_launch into host arrays (sized by the caller) or vectors (resized).
  // Waiting for its copy is where a decode loop's host waits on the GPU.
  Status fetch_top_k(float* vals, int32_t* ids, std::vector<float>* vv, std::vector<int32_t>* vi) {
    if (topk_pending_.empty()) return error(StatusCode::internal, "top_k_fetch: no top_k_launch is waiting");
    const TopKSlot& slot = topk_slots_[topk_pending_.front()];
    topk_pending_.pop_front();
    LITHE_TRY(check(cudaEventSynchronize(slot.done), "cudaEventSynchronize (top_k)"));
    if (cudaStreamQuery(stream_) == cudaSuccess) steps_->synced();
    if (vv != nullptr) {
      vv->resize(slot.n);
      vi->resize(slot.n);
      vals = vv->data();
      ids = vi->data();
    }
    std::memcpy(vals, slot.host.p, slot.n * sizeof(float));
    std::memcpy(ids, static_cast<const char*>(slot.host.p) + ids_offset(slot.n), slot.n * sizeof(int32_t));
    return Status::ok();
  }

  // ---- deferred residual sums (cuda_gq.h: GemvResidual) -------------------------------------------
  // A decode step's o and down projections (linear_residual on GEMV weights, m <= kGemvResidualMaxRows)
  // leave their sums in a fixed-point accumulator instead of the residual y: none of their blocks
  // waits for the others. The next projection reading y under a folded norm (q/k/v, gate/up) reads
  // y + acc; the next such linear_residual folds acc into y while adding into the other accumulator.
  // pend_ says which accumulator holds sums not yet in which residual; any other op touching that
  // residual settles them first (gemv_fold), and so does settle(). LITHE_GEMV_DEFER=0 turns it off.
  struct Pending {
    int acc = -1;        // 0 or 1: the accumulator holding the sums; -1 none
    float* y = nullptr;  // the residual they belong to
    int64_t n = 0;       // its elements (m x width)
  };
  Pending pend_;
  Scratch resid_ws_;        // the two accumulators, [2][resid_cap_] int64 (zeroed when allocated)
  int64_t resid_cap_ = 0;

  int64_t* residual_acc(int k) { return static_cast<int64_t*>(resid_ws_.t.data()) + k * resid_cap_; }
  // Room for accumulators of n elements (pending sums settle first where the buffer grows).
  Status reserve_residual(int64_t n) {
    if (n <= resid_cap_) return Status::ok();
    LITHE_TRY(settle());
    const int64_t cap = (n + 1) / 2 * 2;  // each accumulator 16-byte aligned
    LITHE_TRY(resid_ws_.get(static_cast<size_t>(2 * cap) * sizeof(int64_t), stream_).status());
    resid_cap_ = cap;
    return Status::ok();
  }
  // Whether tensor t's memory meets the residual holding pending sums.
  bool touches_pending(const Tensor& t) const {
    if (pend_.acc < 0 || !t.defined()) return false;
    const auto* a = static_cast<const uint8_t*>(t.data());
    const auto* b = reinterpret_cast<const uint8_t*>(pend_.y);
    return a < b + pend_.n * 4 && b < a + t.nbytes();
  }
  // Settles the pending sums where any of these tensors meets their residual.
  Status settle_if(std::span<const Tensor* const> ts) {
    for (const Tensor* t : ts)
      if (t != nullptr && touches_pending(*t)) return settle();
    return Status::ok();
  }
  Status settle_if(std::initializer_list<const Tensor*> ts) { return settle_if(std::span(ts.begin(), ts.size())); }
  // The GemvResidual of a launch reading x under a folded norm with epilogue e: `in` where x is the
  // residual holding pending sums and ws run as one GEMV launch; otherwise they settle first.
  Result<cuda::GemvResidual> read_residual(std::span<const Tensor* const> ws, const Tensor& x, int64_t m,
                                           cuda::Epilogue e) {
    cuda::GemvResidual r;
    if (!touches_pending(x)) return r;
    if (gemv_fuses(ws, m, e) && x.data() == pend_.y && m * x.dim(1) == pend_.n) {
      r.in = residual_acc(pend_.acc);
      return r;
    }
    LITHE_TRY(settle());
    return r;
  }

  cuda::DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<StepGraph> steps_;
  Scratch blas_ws_, x16_, attn_ws_, topk_, keys_;  // topk_: top_k / token_logprobs values and ids
  Scratch ready_ws_;  // qkv_rope_attention: decode attention's per-head flags (AttentionParams::ready)
  struct TopKSlot {  // one launched top_k's results on the host
    PinnedHost host;
    cudaEvent_t done = nullptr;  // recorded after the copy into host
    size_t n = 0;                // values (and ids)
  };
  TopKSlot topk_slots_[kTopKInFlight];
  std::deque<size_t> topk_pending_;  // launched, unfetched slots, oldest first
  size_t topk_next_ = 0;
  static constexpr int64_t kBestMax = 4096;  // rows whose best id best_ keeps
  Tensor best_;                              // [kBestMax] i32: the last device top_k's best ids
  int64_t best_rows_ = 0, best_vocab_ = 0;   // rows best_ holds (0: none) and their vocabulary
  Scratch marlin_ws_, w16_;  // gq: the Marlin GEMM's f16 activations and locks; GEMV weights expanded to f16
  Scratch gemv_ws_;          // gq: the GEMV k-split's partial sums and counters (zeroed when allocated)
  std::map<const cpu::RopeTable*, Tensor> rope_;
  std::vector<int32_t> pages_host_;  // device_pages' staging copy
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend() { return CudaBackend::create(); }

}  // namespace lithe

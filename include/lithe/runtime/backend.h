// The backend seam: model code calls these ops on activation tensors that live on the backend's
// device, and never includes device headers. The CPU backend wraps kernels/cpu; the CUDA backend
// (runtime/cuda/) implements the same interface and is tested op by op against it
// (tests/cuda/test_cuda_model.cpp).
//
// Shapes: activations are f32 row-major [rows, features]; weights are [n_out, n_in] in any dtype
// the backend's linear supports (supports_weight); ids/positions are host arrays.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "lithe/core/tensor.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/group_quant.h"

namespace lithe {

class KvCache;

struct AttentionShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0;  // usually 1/sqrt(head_dim)
};

// One sequence of a batch: rows [row0, row0 + n) of the batch's activations, its cache and the
// cache slots of its new tokens (n of them).
struct BatchSeq {
  KvCache* cache = nullptr;
  int64_t row0 = 0, n = 0;
  const int64_t* slots = nullptr;
};

// An RMSNorm folded into the projections that read its output (rmsnorm_linear_many,
// rmsnorm_swiglu): their input is rmsnorm(x) = x / sqrt(mean(x²) + eps) * weight, x unchanged.
// `scratch` ([>= m, n_in] f32 on the backend) receives rmsnorm(x) where a backend materializes it
// (the default composition, large m); afterwards its contents are unspecified.
struct InputNorm {
  const Tensor* weight = nullptr;  // [n_in] f32
  float eps = 0;
  Tensor* scratch = nullptr;
};

// The output projection that follows an attention in qkv_rope_attention: residual += out · wᵀ
// (linear_residual, `scratch` as there). w null: none.
struct OutProjection {
  const Tensor* w = nullptr;
  Tensor* residual = nullptr;
  Tensor* scratch = nullptr;
};
// invalid_argument where o.w is given without its residual or scratch.
Status check_out_projection(const OutProjection& o);

// log(sum(exp(row))) of a host row of n logits: the max, plus the log of the sum of exp(x - max)
// accumulated in double. log_softmax(row)[i] = row[i] - log_sum_exp(row).
float log_sum_exp(const float* row, int64_t n);
// log_softmax(row)[target]: the reference every backend's token_logprobs matches.
inline float target_logprob(const float* row, int64_t n, int32_t target) { return row[target] - log_sum_exp(row, n); }

// A token id the embedding reads as "row i's best id in the last top_k / top_k_launch" (k = 1:
// greedy decoding's next token) where that result lies, so a decode step can be queued before the
// previous step's token reaches the host (Model::launch_top_k).
inline constexpr int32_t kArgmaxToken = -1;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;

  // Activation buffers on this backend's device.
  virtual Result<Tensor> alloc(DType dtype, const Shape& shape) = 0;
  // Weights as the backend wants them (CPU: the host view itself, no copy). Fails with a
  // message naming the dtype when the backend cannot run it.
  virtual bool supports_weight(DType dtype) const = 0;
  virtual Result<Tensor> prepare_weight(const Tensor& host_weight) = 0;
  // A prepared linear weight for a model that runs many sequences at once (the server): the
  // backend may attach a second copy in its matrix-matrix kernels' layout (Tensor::BatchLayout),
  // trading memory for not decoding blocks on every batched call. Default: w unchanged.
  virtual Result<Tensor> add_batch_layout(const Tensor& w) { return w; }
  // A group-quantized matrix (a compressed checkpoint's linear) packed once for this backend's gq
  // kernels: a gq tensor on its device that linear() and the fused ops accept. unsupported (the
  // message naming the format and shape) when no kernel here runs it; the loader then dequantizes it.
  virtual Result<Tensor> prepare_quantized(const gq::Matrix& m);

  // out[i, :] = table[ids[i], :] as f32 (table in any dequantizable dtype); ids[i] = kArgmaxToken
  // takes row i's best id of the last top_k / top_k_launch (an error when there is none).
  virtual Status embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) = 0;
  // y = x · wᵀ for x [m, n_in] -> y [m, n_out]; `m` rows of x are used (x may be larger).
  virtual Status linear(const Tensor& w, const Tensor& x, int64_t m, Tensor& y) = 0;
  virtual Status add_bias(Tensor& y, int64_t m, const Tensor& bias) = 0;
  virtual Status rmsnorm(const Tensor& x, int64_t m, const Tensor& weight, float eps, Tensor& y) = 0;
  virtual Status rope(Tensor& x, int64_t m, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                      const cpu::RopeTable& table, cpu::RopeStyle style) = 0;
  virtual Status silu_mul(Tensor& gate, const Tensor& up, int64_t m) = 0;
  virtual Status add(Tensor& y, const Tensor& x, int64_t m) = 0;
  // Writes k/v rows [m, kv_dim] of `layer` into the cache slots `slots`, then attends: q
  // [m, n_heads*head_dim] at positions q_pos over every filled slot of the cache -> out.
  virtual Status attention(KvCache& cache, int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                           int64_t m, const int32_t* q_pos, const int64_t* slots, const AttentionShape& shape,
                           Tensor& out) = 0;
  // Copies `m` rows of f32 activations to host memory.
  virtual Status to_host(const Tensor& x, int64_t m, float* dst) = 0;

  // ---- fused ops: defaults compose the primitives above; a backend overrides what it can fuse.
  // The dtype unsupported matrices are converted to at load (CPU: f32; CUDA: f16).
  virtual DType fallback_weight_dtype() const { return DType::f32; }
  // Several projections of one input (q/k/v): ys[j] = x · ws[j]ᵀ.
  virtual Status linear_many(std::span<const Tensor* const> ws, const Tensor& x, int64_t m, std::span<Tensor*> ys);
  // y += x · wᵀ (a residual connection), `scratch` at least [m, n_out] for backends that need it.
  virtual Status linear_residual(const Tensor& w, const Tensor& x, int64_t m, Tensor& y, Tensor& scratch);
  // gate = silu(x · w_gateᵀ) * (x · w_upᵀ); `up` is scratch of the same shape.
  virtual Status swiglu(const Tensor& w_gate, const Tensor& w_up, const Tensor& x, int64_t m, Tensor& gate,
                        Tensor& up);
  // linear_many / swiglu of rmsnorm(x) (InputNorm): default rmsnorm into norm.scratch, then the op.
  virtual Status rmsnorm_linear_many(const InputNorm& norm, std::span<const Tensor* const> ws, const Tensor& x,
                                     int64_t m, std::span<Tensor*> ys);
  virtual Status rmsnorm_swiglu(const InputNorm& norm, const Tensor& w_gate, const Tensor& w_up, const Tensor& x,
                                int64_t m, Tensor& gate, Tensor& up);
  // attention() of q and k after their rotary embedding: q [m, n_heads*head_dim] and k [m, kv_dim]
  // are rotated in place at positions q_pos (as rope()), then k (rotated) and v are stored and
  // attended to as attention() does. Default: rope(q), rope(k), attention(); pre_rope_attention()
  // for a cache that keeps keys before RoPE. A backend overriding this must do the same.
  virtual Status rope_attention(KvCache& cache, int64_t layer, Tensor& q, Tensor& k, const Tensor& v, int64_t m,
                                const int32_t* q_pos, const int64_t* slots, const cpu::RopeTable& table,
                                cpu::RopeStyle style, const AttentionShape& shape, Tensor& out);
  // rope_attention for a cache whose keys are kept before RoPE (KvCache::keys_pre_rope(): the sink
  // and window policies, kv_cache.h): q is rotated in place at q_pos (the rolling cache's
  // re-indexed positions of the new tokens); k, NOT rotated, and v are stored at `slots`; then
  // every scanned slot s < cache.size() has its key rotated by cache.positions()[s] (same table,
  // style and arithmetic as rope(); kNoPosition slots are masked, whatever their rotation) and
  // attention runs as attention() does. The cached keys stay un-rotated. Default: unsupported.
  virtual Status pre_rope_attention(KvCache& cache, int64_t layer, Tensor& q, const Tensor& k, const Tensor& v,
                                    int64_t m, const int32_t* q_pos, const int64_t* slots, const cpu::RopeTable& table,
                                    cpu::RopeStyle style, const AttentionShape& shape, Tensor& out);
  // rope_attention for every sequence of a batch in one call: rows of q, k, v and out [m, ...] are
  // the sequences' rows (BatchSeq), q_pos [m] their positions. Default: rope_attention per sequence.
  // A backend overriding this gives each sequence exactly what rope_attention gives it alone.
  virtual Status rope_attention_batch(std::span<const BatchSeq> seqs, int64_t layer, Tensor& q, Tensor& k,
                                      const Tensor& v, int64_t m, const int32_t* q_pos, const cpu::RopeTable& table,
                                      cpu::RopeStyle style, const AttentionShape& shape, Tensor& out);
  // The attention half of a block for one sequence, from the block input x to the attention
  // output: ys (q, k, v) = rmsnorm(x) · ws (rmsnorm_linear_many), then rope_attention() over them,
  // then (o.w given) linear_residual(o.w, out) into o.residual. A backend may fuse the rotation and
  // the cache store into the projection, and let the output projection start on each head's
  // attention output as it lands. Default: those three.
  virtual Status qkv_rope_attention(const InputNorm& norm, std::span<const Tensor* const> ws, const Tensor& x,
                                    int64_t m, std::span<Tensor*> ys, KvCache& cache, int64_t layer,
                                    const int32_t* pos, const int64_t* slots, const cpu::RopeTable& table,
                                    cpu::RopeStyle style, const AttentionShape& shape, Tensor& out,
                                    const OutProjection& o);
  // The k largest logits of each of `rows` rows with their ids (value descending, ties by smaller
  // id), into host arrays [rows][k]. Lets a device reduce the vocabulary before anything is copied.
  virtual Status top_k(const Tensor& logits, int64_t rows, int k, float* vals, int32_t* ids);
  // top_k in two halves, so that more work can be queued before its result is read: top_k_launch
  // enqueues it (rows * k values and ids kept by the backend), top_k_fetch waits for the oldest
  // launched result not yet fetched and moves it out. At most kTopKInFlight are unfetched; a
  // synchronous top_k() drops any that are. Default: top_k() at launch, its result kept until fetched.
  static constexpr size_t kTopKInFlight = 2;
  virtual Status top_k_launch(const Tensor& logits, int64_t rows, int k);
  virtual Status top_k_fetch(std::vector<float>& vals, std::vector<int32_t>& ids);
  // out[r] = log_softmax(logits row r)[targets[r]] (host arrays of `rows`; a negative target
  // gives 0): perplexity without copying whole rows off a device. The softmax sum is accumulated
  // in double, as target_logprob does.
  virtual Status token_logprobs(const Tensor& logits, int64_t rows, const int32_t* targets, float* out);
  // Fills a tensor of this backend with uniform values in center +- scale from `seed` (synthetic
  // models of real shapes, for benchmarks).
  virtual Status fill_random(Tensor& t, uint64_t seed, float center, float scale);

  // ---- step capture: the ops issued between begin_step(key) and end_step() form one step; a
  // backend may record them the first times it sees `key` and replay the recording afterwards,
  // refreshing only the host arrays (ids, positions, slots, cache lengths) the ops are given. Equal
  // keys promise the same op sequence on the same tensors. end_step(false) abandons a step whose
  // ops failed. Defaults: run ops as they come.
  virtual Status begin_step(uint64_t key) {
    (void)key;
    return Status::ok();
  }
  virtual Status end_step(bool run = true) {
    (void)run;
    return Status::ok();
  }
  // Completes what the backend deferred into tensors (the CUDA backend's residual sums, which its
  // own ops settle wherever they need them): call before reading a tensor other than through an op.
  virtual Status settle() { return Status::ok(); }

 protected:
  // Each row's best id in the last top_k (the default top_k sets them): what kArgmaxToken reads on
  // a host backend.
  std::vector<int32_t> best_ids_;
  // rope_attention_batch's sequences: each with a cache and rows inside [0, m); else an error.
  static Status check_batch(std::span<const BatchSeq> seqs, int64_t m);
  // ids[i], or best_ids_[i] for kArgmaxToken; an error naming the id when it is outside [0, vocab).
  Result<int32_t> token_id(const int32_t* ids, int64_t i, int64_t vocab) const;
  // top_k on the host (logits copied there first if need be), setting best_ids_.
  Status host_top_k(const Tensor& logits, int64_t rows, int k, float* vals, int32_t* ids);
  // The first `rows` rows of f32 logits readable on the host: in place for a host tensor (checked,
  // errors name `what`), else copied into `copy`.
  Result<const float*> host_rows(const Tensor& logits, int64_t rows, std::vector<float>& copy, const char* what);

 private:
  struct TopK {
    std::vector<float> vals;
    std::vector<int32_t> ids;
  };
  std::deque<TopK> launched_;  // the default top_k_launch's results, oldest first
};

// For backends: OK when `t` is an f32 contiguous [>= m, cols] matrix on `device` (cols < 0: any);
// otherwise invalid_argument naming `what`, the expectation and the tensor.
Status check_activation(const Tensor& t, Device device, int64_t m, int64_t cols, const char* what);

std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend on device 0; an error when built without CUDA or no device is present.
Result<std::unique_ptr<Backend>> make_cuda_backend();
// The backend for `device`: cpu always; cuda when built with CUDA and a device is present.
Result<std::unique_ptr<Backend>> make_backend(Device device);

}  // namespace lithe

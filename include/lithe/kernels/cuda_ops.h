// Launchers of the CUDA kernels the CUDA backend runs (src/kernels/cuda/*.cu). Host-only header:
// plain pointers to device memory and a stream, no CUDA headers, so backend code compiles with the
// host compiler. Every launcher checks its arguments (errors name the value), enqueues its kernels
// on `stream` without synchronising, and reports launch errors as a Status. Nothing here allocates:
// scratch memory is passed in, so a sequence of launches can be captured in a CUDA graph.
//
// Conventions
// - Activations are f32, row-major [rows][features], contiguous.
// - Weights are [n_out][n_in] row-major in f32, f16 or bf16 (WeightType).
// - Arguments that change from one decode step to the next (token ids, positions, cache slots, the
//   number of filled cache slots) are read from device memory, never passed by value, so that a
//   captured graph replays correctly after the host rewrites them.
#pragma once

#include <cstdint>

#include "lithe/core/status.h"
#include "lithe/kernels/kv_pages.h"

struct CUstream_st;

namespace lithe::cuda {

using Stream = CUstream_st*;

enum class WeightType { f32, f16, bf16 };
enum class KvType { f32, f16 };
enum class RopeMode { interleaved, half };  // as cpu::RopeStyle

// ---- elementwise (elementwise.cu) -----------------------------------------------------------------
// out[i, :] = f32(table[ids[i], :]); ids are on the device and already range-checked by the caller.
// An id < 0 reads feed[i] instead (device; kArgmaxToken: the last top_k's best ids), which the
// caller vouches for too.
Status embedding(const void* table, WeightType t, int64_t d, const int32_t* ids, int64_t n, float* out, Stream s,
                 const int32_t* feed = nullptr);
// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w  (x and y may alias).
Status rmsnorm(const float* x, const float* w, float eps, int64_t m, int64_t n, float* y, Stream s);
// x += y (n elements).
Status add(float* x, const float* y, int64_t n, Stream s);
// y[r, :] += b for r < m.
Status add_bias(float* y, const float* b, int64_t m, int64_t n, Stream s);
// gate = silu(gate) * up (n elements).
Status silu_mul(float* gate, const float* up, int64_t n, Stream s);
// In-place rotary embedding of x [m][n_heads][head_dim] at positions pos[m] (device). Pair i of
// the first rot_dim dims turns by pos * inv_freq[i] (inv_freq: rot_dim/2 device floats), angle
// computed in double as the CPU kernel does. interleaved: pairs (2i, 2i+1); half: (i, i + rot/2).
Status rope(float* x, int64_t m, int64_t n_heads, int64_t head_dim, const int32_t* pos, const float* inv_freq,
            int64_t rot_dim, RopeMode mode, Stream s);
// f32 -> f16 / bf16 (the GEMM's input), n elements.
Status to_f16(const float* x, int64_t n, void* out, Stream s);
Status to_bf16(const float* x, int64_t n, void* out, Stream s);
// Writes rows k[m][kv_dim], v[m][kv_dim] into cache slots slots[m] (device) of k_cache/v_cache
// ([rows][kv_dim] in kv; slot s at row pages.row(s), kv_pages.h, the block table on the device),
// and pos[m] into kv_pos[slots[i]] when kv_pos is not null. Every cache op below takes `pages`
// the same way; positions are indexed by slot.
Status kv_store(const float* k, const float* v, int64_t m, int64_t kv_dim, const int64_t* slots, const int32_t* pos,
                void* k_cache, void* v_cache, KvType kv, int32_t* kv_pos, KvPages pages, Stream s);

// ---- attention prologue (rope_kv.cu) --------------------------------------------------------------
// rope() of q and of k, then kv_store() of the rotated k and of v, in one launch: q [m][n_heads]
// [head_dim] and k [m][n_kv_heads][head_dim] are rotated in place at positions pos[m] (device; as
// rope(): angles in double, pairs per `mode`, dims past rot_dim untouched); rows of k (rotated) and
// v [m][n_kv_heads * head_dim] go to cache slots slots[m] (device) of k_cache / v_cache ([capacity]
// [n_kv_heads * head_dim] in kv), and pos[i] to kv_pos[slots[i]] when kv_pos is not null.
// head_dim must be even.
struct RopeKvArgs {
  float* q = nullptr;
  float* k = nullptr;
  const float* v = nullptr;
  int64_t m = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const int32_t* pos = nullptr;
  const float* inv_freq = nullptr;  // rot_dim / 2 device floats
  int64_t rot_dim = 0;
  RopeMode mode = RopeMode::half;
  const int64_t* slots = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  KvType kv = KvType::f16;
  int32_t* kv_pos = nullptr;
  KvPages pages;
};
Status rope_kv_store(const RopeKvArgs& a, Stream s);
// Keys of a cache that keeps them before RoPE (the StreamingLLM rolling cache), rotated for one
// attention call: dst[j] = k_cache[j] rotated at position kv_pos[j] (device; angles, pairs and
// arithmetic as rope()) for slots j < *n (device, <= capacity); a slot whose position is
// kNoKvPosition (holds no token, masked by attention) is copied unrotated. dst and k_cache:
// [rows][n_kv_heads * head_dim] in kv, slot j at row pages.row(j) of both.
inline constexpr int32_t kNoKvPosition = 0x7fffffff;  // KvCache::kNoPosition
struct RopeKeysArgs {
  const void* k_cache = nullptr;
  void* dst = nullptr;
  KvType kv = KvType::f16;
  const int32_t* kv_pos = nullptr;
  const int32_t* n = nullptr;
  int64_t capacity = 0, n_kv_heads = 0, head_dim = 0;
  const float* inv_freq = nullptr;  // rot_dim / 2 device floats
  int64_t rot_dim = 0;
  RopeMode mode = RopeMode::half;
  KvPages pages;
};
Status rope_keys(const RopeKeysArgs& a, Stream s);

// ---- matrix-vector products for decode (matvec.cu) ------------------------------------------------
// Up to 3 weight matrices sharing one input x [m][n_in], m <= kMatvecMaxRows, computed in one
// launch: y_j[r, :] = x[r, :] · W_jᵀ. Epilogue:
//   store:      y_j = result
//   accumulate: y_j += result            (residual connections fused into the product)
//   swiglu:     exactly 2 matrices (gate, up) of equal n_out; y_0 = silu(gate) * up, y_1 unused.
//   rope_kv:    exactly 3 matrices (q, k, v; k and v of equal n_out) and `rope`: what store followed
//               by rope_kv_store() gives, in one launch - y_0 = q and y_1 = k rotated at positions
//               rope.pos (bit-identical to rope()), y_2 = v, and rows of k (rotated) and v written
//               to cache slots rope.slots (pos to rope.kv_pos[slot] when kv_pos is not null).
// n_in must be a multiple of 8 (16-byte rows of f16); weights 16-byte aligned.
// With `norm` (w not null) the product's input is rmsnorm(x) (as rmsnorm() above, x unchanged):
// the kernel computes each x row's 1/rms itself and scales x by norm.w as it reads it.
inline constexpr int kMatvecMaxRows = 8;
enum class Epilogue { store, accumulate, swiglu, rope_kv };
// The rope_kv epilogue's rotary embedding and cache (fields as in RopeKvArgs; head_dim even and
// dividing n_out of q and of k; kv_dim = k's n_out).
struct MatvecRope {
  const int32_t* pos = nullptr;     // [m] device
  const float* inv_freq = nullptr;  // rot_dim / 2 device floats
  int64_t head_dim = 0, rot_dim = 0;
  RopeMode mode = RopeMode::half;
  const int64_t* slots = nullptr;  // [m] device
  void* k_cache = nullptr;         // [rows][kv_dim] in kv
  void* v_cache = nullptr;
  KvType kv = KvType::f16;
  int32_t* kv_pos = nullptr;
  KvPages pages;
};
struct MatvecOut {
  const void* w = nullptr;
  int64_t n_out = 0;
  float* y = nullptr;
};
struct MatvecNorm {
  const float* w = nullptr;  // [n_in] f32 device, 16-byte aligned; null: no norm
  float eps = 0;
};
Status matvec(const MatvecOut* outs, int n_outs, WeightType t, int64_t n_in, const float* x, int64_t m,
              Epilogue e, Stream s, const MatvecNorm& norm = {}, const MatvecRope* rope = nullptr);

// ---- attention (attention_prefill.cu, attention_decode.cu) ----------------------------------------
// One sequence's causal attention with grouped KV heads (semantics of cpu::attention):
// q [n_q][n_heads][head_dim] f32 at positions q_pos[n_q] (device); cache k/v [capacity][kv_stride]
// in kv type, slot j holding position kv_pos[j] (device); the first *n_kv (device) slots are
// filled. Query t attends to slots with kv_pos <= q_pos[t]; one that sees none gets zeros.
// out [n_q][n_heads][head_dim] f32. head_dim in {64, 128}; n_heads a multiple of n_kv_heads.
struct AttentionParams {
  const float* q = nullptr;
  const int32_t* q_pos = nullptr;
  int64_t n_q = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  KvType kv = KvType::f16;
  const int32_t* kv_pos = nullptr;
  const int32_t* n_kv = nullptr;  // device scalar
  int64_t kv_capacity = 0;        // bounds *n_kv; sizes the decode grid; unpaged: rows [0, capacity) readable
  int64_t kv_stride = 0;          // elements between rows (>= n_kv_heads * head_dim)
  KvPages pages;                  // slot -> row of k / v
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0;
  float* out = nullptr;
  // attention_decode with n_q = 1 only (else null): one flag per head, which the launch sets to 0
  // before its successor may start (PDL) and to 1 (a gpu-scope release) once that head's row of out
  // is written, so that a successor can wait for the heads it reads instead of for the whole launch
  // (GemvReady). Set after the launch has waited for its predecessor: a flag at 1 also says that
  // every earlier kernel has completed.
  unsigned* ready = nullptr;
};
// Tiled flash attention on tensor cores (f16 MMA, f32 softmax and accumulation); for n_q > 8.
// n_kv_host: the host's value of *n_kv (sizes the loop bounds; prefill is never graph-captured).
Status attention_prefill(const AttentionParams& p, int64_t n_kv_host, Stream s);
// Split-K flash decoding for n_q <= kDecodeMaxQueries, one launch: the filled slots are cut into
// chunks processed by separate blocks; the last block of each (kv head, row group) to finish
// (counted in `work`) merges the partials (max, sum, acc) and writes out. A context that one chunk
// holds (*n_kv <= one tile: 64 slots of f16 at head_dim 128) is written out by its one block with
// the bits that merge would give (no partials, no counting).
// `work` is scratch of attention_decode_work_bytes(p) bytes whose first kDecodeCounterBytes must
// be zero before its first use (cudaMemset once after allocating); every call leaves them zero
// again, so graph replays and later calls of any shape on the same scratch need no reset. The
// rest of `work` needs no initialization. Safe to graph-capture (reads *n_kv).
inline constexpr int64_t kDecodeMaxQueries = 8;
inline constexpr size_t kDecodeCounterBytes = 16384;  // n_kv_heads * row groups <= 4096 counters
size_t attention_decode_work_bytes(const AttentionParams& p);
Status attention_decode(const AttentionParams& p, void* work, Stream s);
// One sequence of attention_decode_batch: its fields of AttentionParams (device pointers).
struct DecodeSeq {
  const float* q = nullptr;
  const int32_t* q_pos = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* kv_pos = nullptr;
  const int32_t* n_kv = nullptr;
  KvPages pages;
  float* out = nullptr;
};
// attention_decode of n_seqs sequences in one launch (a batch of decode steps, each over its own
// cache): p holds what they share (n_q, heads, head_dim, scale, kv type, kv_stride; kv_capacity
// the largest of theirs) and is checked as attention_decode checks it, seqs (device, n_seqs) what
// each one has. Each sequence's output equals attention_decode's for it alone when the split
// count is the same (the plan spreads ~2 blocks per SM over all of them, so it is smaller).
// work: attention_decode_batch_work_bytes(p, n_seqs), counters zeroed as attention_decode's. At
// most attention_decode_batch_max_seqs(p) sequences per launch (the merge counters).
size_t attention_decode_batch_work_bytes(const AttentionParams& p, int64_t n_seqs);
int64_t attention_decode_batch_max_seqs(const AttentionParams& p);
Status attention_decode_batch(const AttentionParams& p, const DecodeSeq* seqs, int64_t n_seqs, void* work, Stream s);

// ---- synthetic weights (random_fill.cu) -----------------------------------------------------------
// dst[i] = center + scale * u_i, u_i uniform in [-1, 1) from a counter-based hash of (seed, i).
Status fill_uniform(void* dst, WeightType t, int64_t n, uint64_t seed, float center, float scale, Stream s);

// ---- sampling (topk.cu) ---------------------------------------------------------------------------
// For each of `rows` rows of logits [rows][vocab] (device): the k largest values and their ids,
// sorted by value descending (ties: smaller id first), written to vals/ids [rows][k] (device).
// k <= kTopKMax. k = 1 is argmax. best (optional, device [rows]): each row's first id again.
inline constexpr int kTopKMax = 256;
Status top_k(const float* logits, int64_t rows, int64_t vocab, int k, float* vals, int32_t* ids, Stream s,
             int32_t* best = nullptr);

// ---- scoring (logprob.cu) -------------------------------------------------------------------------
// out[r] = log_softmax(logits[r])[targets[r]] for rows of logits [rows][vocab] (device; targets and
// out device too); a negative target gives 0. The softmax sum is accumulated in double.
Status token_logprobs(const float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float* out,
                      Stream s);

}  // namespace lithe::cuda

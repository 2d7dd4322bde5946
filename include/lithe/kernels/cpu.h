// CPU kernels: every op the Llama-family forward pass needs, with a scalar reference
// (kernels/ref, the oracle and the fallback) and SIMD versions (AVX2/FMA/F16C, AVX-512 F/BW/VL/DQ
// with VNNI) chosen once at run time. Multithreaded through lithe::global_pool().
//
// Layouts: row-major, outermost first. Weights are [n_out, n_in] (one row per output feature,
// GGUF/HF order) in any dtype that linear_supports(); activations are f32.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <span>
#include <vector>

#include "lithe/core/tensor.h"
#include "lithe/kernels/kv_pages.h"

namespace lithe::gq {
struct Matrix;
}

namespace lithe::cpu {

// scalar: plain C++ (the reference kernels, threaded); avx2: AVX2 + FMA + F16C;
// avx512: AVX-512 F/BW/VL/DQ + VNNI (OS support of the ZMM state checked through xgetbv).
enum class Isa { scalar, avx2, avx512 };
std::string_view isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);  // "scalar" | "avx2" | "avx512"
Isa detected_isa();           // best the CPU supports (cpuid)
Isa active_isa();             // what the kernels use: detected, or LITHE_ISA=scalar|avx2|avx512, or force_isa
void force_isa(Isa isa);      // tests and benchmarks (clamped to detected_isa())

// Work splitting over global_pool(): an op is split over the pool's threads when its estimated
// serial time exceeds a few pool round trips (measured once per pool: a wake-up costs ~1 us with
// spinning workers, tens of us with sleeping ones). force_split(true / false) splits always /
// never (tests, benchmarks); force_split(std::nullopt) restores the default.
void force_split(std::optional<bool> always);

// ---- linear -------------------------------------------------------------------------------------
// Y[m, n_out] = X[m, n_in] · W[n_out, n_in]^T. W: f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q6_k
// (host, contiguous, 2-D; n_in a multiple of the block size). For block dtypes the activations are
// quantized to 8 bits on the fly (as llama.cpp does) and dot products run in integers:
//   q4_0, q4_1, q8_0: one f32 scale per 32 activations (symmetric, d = absmax / 127);
//   q4_k, q6_k:       one f32 scale per 256 activations (q8_K-like);
// quants are round-to-nearest-even of x / d clamped to [-127, 127]. f32/f16/bf16 weights use f32
// math on the exactly converted weights. m <= 4 runs matrix-vector kernels, larger m register-tiled
// ones; both sum each output in the same order, so row i of y is bit-identical whatever m is, whatever
// the other rows of x hold and however the rows are split over threads (batch invariance: the
// server's batching does not change a sequence's logits). x and y must not overlap.
//
// gq (DType::gq, a tensor from pack_gq below): y = x · Wᵀ with W as gq::dequantize() defines it.
// The activations are gathered by the act-order permutation (if any) once per call, then
// quantized to 16 or 8 bits per 32 values (integer dot products, the zero points folded in
// through the activation block sums) or kept in f32; see gq_acts().
bool linear_supports(DType w);
Status linear(const Tensor& w, const float* x, int64_t m, float* y);
// w with a BatchLayout attached: its block rows decoded once, now, into the records the active
// ISA's matrix-matrix kernels read (m > 4), which otherwise decode them into scratch on every call.
// The records are larger than the blocks (q4_1 on AVX-512: 1.25 bytes a weight, 2x the blocks, and
// a row's partial last superchunk is a whole record; q8_0: 1.5 bytes, 1.4x). Results are bit-identical with and without. w itself is returned when
// the active ISA keeps no such layout for its dtype (float weights, the scalar kernels).
Result<Tensor> with_batch_layout(const Tensor& w);

// ---- group-quantized (gq) weights ----------------------------------------------------------------
// pack_gq lays a canonical gq::Matrix out once, at load, as a host tensor of DType::gq whose
// PackedWeight has layout kLayoutCpuGq (geometry: src/kernels/cpu/gq_layout.h). Sections
// (PackedWeight::section, 64-byte aligned):
//   [0] rows   [n_out] packed rows, each one sequential stream (decode streams the matrix once):
//                scales  f16 [ent_stride]  one per "entry", zero-padded to a multiple of 4
//                zeros   u8  [ent_stride]  asym only (sym: section [1])
//                codes   the row's kernel columns in units of 128 (4 blocks of 32)
//              An entry is a group when group % 128 == 0 or group == n_in (a unit never straddles
//              two groups: one broadcast scale per unit), otherwise a block of 32 (the group's
//              scale repeated per block: 4 per unit, one lane permute). Scales stay f16 (converted
//              in registers) and scale * zero is not stored: bytes are decode time. The kernels
//              fold the zero points in per row as -sum_e s_e * z_e * X_e, X_e the entry's
//              activation sum, computed once per call.
//   [1] zeros  sym only: one shared row (2^(bits-1) repeated), read with row stride 0.
//   [2] perm   i32 [n_in] (has_perm only): kernel column k multiplies x[perm[k]].
// Codes of a unit: A[i] / B[i] (i < 64) are values i % 16 / 16 + i % 16 of block i / 16 (the
// order the SIMD dot products take: a 32-bit lane sums values of one block):
//   int8: A[0..63] then B[0..63] (128 bytes)     int4: byte i = A[i] | B[i] << 4 (64 bytes)
//   int2: byte b < 32 = A[b] | A[32+b] << 2 | B[b] << 4 | B[32+b] << 6 (32 bytes)
//   int3: the int2 bytes of the low 2 bits, then bit 2 as two bit planes: u64 little-endian,
//         bit i = bit 2 of A[i], then the same for B (48 bytes)
// A last partial unit (n_in % 128 != 0: nb = 1..3 blocks) holds, for int8, A[0..16nb) then
// B[0..16nb); for int4 bytes [0, 16nb); int2 / int3 units are kept whole (absent codes 0).
// Shapes: n_in a multiple of 32, group a multiple of 32 or == n_in (per channel); the last group
// may be short. 2:4 sparse matrices run as dense ones (their pruned codes equal the zero point).
// gq_supports: OK, or unsupported naming the format, the shape and what is required.
inline constexpr int kLayoutCpuGq = 0x43505547;  // "CPUG"
Status gq_supports(const QuantFormat& f, int64_t n_out, int64_t n_in);
Result<Tensor> pack_gq(const gq::Matrix& m);

// Activation mode of gq linears, one for the whole process (every call reads gq_acts()):
//   int16 (default): 16-bit activations per 32 values (d = absmax / 32767), integer dot products
//          (AVX-512 VNNI vpdpwssd, AVX2 pmaddwd): ~1e-5 relative error per output, the same
//          perplexity as f32; decode stays memory-bound.
//   int8:  8-bit activations per 32 values as the GGUF kinds (dpbusd / maddubs): fastest, but
//          ~0.5-1% error per output (SmolLM2-135M int4 g128: +0.19% perplexity).
//   f32:   exact f32 math up to summation order (codes converted to f32 in registers).
// LITHE_GQ_ACTS=int16|int8|f32 (read once) or force_gq_acts() (tests, benchmarks; nullopt
// restores the environment's choice).
enum class GqActs { int8, int16, f32 };
GqActs gq_acts();
void force_gq_acts(std::optional<GqActs> mode);

// ---- element-wise and row ops (all in f32) ---------------------------------------------------
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for m rows of n. y may alias x.
void rmsnorm(const float* x, const float* weight, float eps, int64_t m, int64_t n, float* y);
// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// Tempered softmax weights of one logits row, for sampling (on the calling thread: sequences are
// sampled in parallel): returns m = max(x) and overwrites x[i] with exp((x[i] - m) * scale), 0 where
// (x[i] - m) * scale <= -87 or is NaN; sums[b] = the sum of x over block b, elements
// [b * kSoftmaxBlock, (b + 1) * kSoftmaxBlock), for ceil(n / kSoftmaxBlock) blocks. Weights within
// ~2 ulp of exp (the kernels' polynomial); the same bits on every call for a given ISA.
inline constexpr int64_t kSoftmaxBlock = 256;
float softmax_weights(float* x, int64_t n, float scale, float* sums);

// Rotary position embedding on x[n_tokens][n_heads][head_dim], token t at position pos[t].
// interleaved: pairs (2i, 2i+1) (GGUF "llama" weights); half: pairs (i, i + rot_dim/2) (HF layout,
// qwen2). Pair i turns by the angle pos * inv_freq[i], computed in double so that long positions
// stay accurate. inv_freq[i] = 1 / theta^(2i/rot_dim) after scaling; rot_dim <= head_dim, even;
// dimensions from rot_dim on are left as they are.
enum class RopeStyle { interleaved, half };
struct RopeTable {
  int64_t rot_dim = 0;
  std::vector<float> inv_freq;  // rot_dim / 2 entries
};
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeTable& table,
          RopeStyle style);
// cos and sin of every pair's angle at positions [0, n_pos), as rope() computes them:
// [n_pos][rot_dim / 2][cos, sin].
std::vector<float> rope_angles(const RopeTable& table, int64_t n_pos);
// rope() with the angles looked up in a rope_angles() table (every pos[t] below its n_pos): the
// same floats as rope(), without a cos / sin per token (for rotating many cached keys per step).
void rope_lookup(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                 const RopeTable& table, const float* angles, RopeStyle style);

// ---- attention ----------------------------------------------------------------------------------
// Causal multi-head attention with grouped KV heads for one sequence.
// q:   [n_q][n_heads][head_dim] f32; query t sits at position q_pos[t] and attends to cache slots
//      whose position is <= q_pos[t] (slot s holds position kv_pos[s]; positions need not be sorted).
// k,v: [rows][n_kv_heads][head_dim] in kv_dtype (f32 or f16), rows `kv_row_stride` elements apart;
//      slot s is row pages.row(s) (kv_pages.h: s itself unless the cache is paged).
// out: [n_q][n_heads][head_dim] f32.  scale usually 1/sqrt(head_dim).
// Query head h reads KV head h / (n_heads / n_kv_heads). A query that sees no slot gets zeros.
// Limits: head_dim <= 512; n_heads a multiple of n_kv_heads. Softmax is computed online (one pass
// over the slots, running max and sum), threaded over heads and blocks of queries.
struct AttentionArgs {
  const float* q;
  int64_t n_q;
  const int32_t* q_pos;
  const void* k;
  const void* v;
  DType kv_dtype;
  int64_t n_kv;
  const int32_t* kv_pos;
  int64_t kv_row_stride;  // elements between consecutive rows (>= n_kv_heads * head_dim)
  int64_t n_heads, n_kv_heads, head_dim;
  float scale;
  float* out;
  KvPages pages = {};  // host block table of a paged cache
};
Status attention(const AttentionArgs& a);
// attention() of several sequences (each its own AttentionArgs) in one parallel loop over all
// their work items: a batch of decode steps, each too small to split over threads alone. Each
// sequence's result equals attention() of it alone.
Status attention_many(std::span<const AttentionArgs> as);

// ---- reference (scalar, single thread) ---------------------------------------------------------
// The same math as above with the same 8-bit activation quantization, in plain loops: the oracle
// the SIMD kernels are tested against (integer sums are exact; only f32 summation order differs).
namespace ref {
Status linear(const Tensor& w, const float* x, int64_t m, float* y);
Status attention(const AttentionArgs& a);
}  // namespace ref

}  // namespace lithe::cpu

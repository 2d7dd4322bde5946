// Matrix-vector products for decode (cuda_ops.h: matvec): y_j[r, :] = x[r, :] · W_jᵀ for up to 3
// weight matrices sharing x [m][n_in] (m <= 8), with store / accumulate / swiglu epilogues. The
// kernel is bound by reading the weights once from HBM; everything else is arranged around that.
//
// Work split
// - A "chunk" is 16 bytes of a weight row: 8 f16/bf16 or 4 f32 values. Lane l of a warp reads
//   chunks l, l+32, l+64, ... of a row, so each warp-wide load covers 512 contiguous bytes.
// - The rows of all matrices form one flat index space (matrix 0's rows, then 1's, then 2's),
//   cut into groups of R consecutive rows ("slots"; swiglu: R/2 gate rows and the R/2 up rows with
//   the same indices). A group is streamed by S warps (S = 1 for m <= 2), each taking every S-th
//   batch; a batch is U chunks of each of the R rows, R*U = 8 independent 16-byte loads per lane
//   (4 KiB per warp) issued before any arithmetic.
// - Weights are loaded with ld.global.nc.L1::no_allocate (streamed, not kept in L1), so x, read
//   as float4 through L1 by every warp, stays cached. Each weight chunk is converted to f32 once
//   and applied to all m rows of x: weights are read exactly once whatever m is.
// - The R*M per-lane partial sums are combined by a butterfly reduce-scatter (about R*M shuffles
//   rather than 5 per sum), which leaves each (slot, x-row) total in its own lanes; with S > 1 the
//   group's warps add their totals through shared memory. One lane per total applies the epilogue.
// - Ready for programmatic dependent launch (sm_90): x and y are touched only after
//   griddepcontrol.wait (detail::pdl_wait, common.cuh). For M <= 2 (S = 1) each warp's first
//   batch of weights is loaded before that wait, so it is in flight while the previous kernel
//   finishes.
// - rope_kv epilogue: slots pair the two rows one rotary pair turns (slot s and s + R/2, as gate
//   and up under swiglu), so after the reduction one lane holds both sums, rotates them (angle in
//   double, as rope_kv_kernel) and writes q, or k and v to their outputs and the cache slots.
// - Folded RMSNorm (NORM): the loop multiplies by the norm weight g elementwise (x chunks when
//   M < R, weight chunks otherwise: fewer products); the 1/rms factor of x row i, a per-row
//   scalar, is applied to the finished sums. Its sum of squares: with S = 1 every warp reads
//   whole x rows, so each lane adds the squares of the x values it loads and a warp sum finishes
//   it; with S > 1 (warps see parts of the rows) the block computes it first, after the wait,
//   into shared memory (the rows then sit in L1 for the loop).
// Instantiations: weight type (3) x M in {1, 2, 4, 8} x NORM (m rounded up to M; rows >= m are
// skipped by warp-uniform branches and never stored). Blocks of 4 warps; grid = ceil(groups*S/4).
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"

namespace lithe::cuda {
namespace {

using detail::aligned;
using detail::inv_rms_of;
using detail::ld_stream;
using detail::overlap;
using detail::ptr_str;

constexpr int kWarps = 4;  // warps per block: small blocks spread evenly over the SMs
constexpr int kThreads = kWarps * 32;

// Per-M tuning: R rows per group, U chunks per row in flight, S warps per group (each takes every
// S-th batch of the rows; more warps in flight where the per-lane work is large), and the
// occupancy asked of ptxas (min blocks of 128 threads per SM: 5 -> <= 102 registers, 4 -> <= 128,
// 3 -> <= 168; tighter caps make ptxas split the batch's loads around the arithmetic or spill).
// M = 1 asks for 5: the plain kernel needs ~86 registers anyway, the NORM one would take ~120
// (4 blocks per SM) instead of 96 (ptxas -v, sm_90a); both still issue a batch's 8 loads first.
template <int M>
struct Cfg;
template <>
struct Cfg<1> { static constexpr int R = 2, U = 4, S = 1, min_blocks = 5; };
template <>
struct Cfg<2> { static constexpr int R = 2, U = 4, S = 1, min_blocks = 4; };
template <>
struct Cfg<4> { static constexpr int R = 4, U = 2, S = 2, min_blocks = 4; };
template <>
struct Cfg<8> { static constexpr int R = 4, U = 2, S = 4, min_blocks = 3; };

// Kernel arguments (by value, in the constant bank). Matrix j's flat rows are [start_j, start_j+n_j).
struct Args {
  const void* w0;
  const void* w1;
  const void* w2;
  float* y0;
  float* y1;
  float* y2;
  int64_t n0, n1, n2;      // n_out per matrix
  int64_t start1, start2;  // first flat row of matrices 1 and 2 (INT64_MAX when absent)
  int64_t rows;            // flat rows in all (swiglu: the common n_out)
  int64_t groups;          // warps with work
  const float* x;
  const float* norm;  // NORM kernels: the norm weight [n_in]
  float eps;
  int n_in;
  int m;
  Epilogue epi;
  MatvecRope rope;  // rope_kv only
};

// f32 values of one 16-byte weight chunk.
template <typename T>
struct Chunk;
template <>
struct Chunk<float> {
  static constexpr int E = 4;
  static __device__ __forceinline__ void unpack(const uint4& v, float (&f)[E]) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
};
template <>
struct Chunk<__half> {
  static constexpr int E = 8;
  static __device__ __forceinline__ void pair(unsigned u, float& lo, float& hi) {
    const float2 p = __half22float2(__halves2half2(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)),
                                                   __ushort_as_half(static_cast<unsigned short>(u >> 16))));
    lo = p.x;  // element 2k is the low half of word k
    hi = p.y;
  }
  static __device__ __forceinline__ void unpack(const uint4& v, float (&f)[E]) {
    pair(v.x, f[0], f[1]);
    pair(v.y, f[2], f[3]);
    pair(v.z, f[4], f[5]);
    pair(v.w, f[6], f[7]);
  }
};
template <>
struct Chunk<__nv_bfloat16> {
  static constexpr int E = 8;
  static __device__ __forceinline__ void pair(unsigned u, float& lo, float& hi) {
    lo = __uint_as_float(u << 16);  // bf16 is the top half of an f32
    hi = __uint_as_float(u & 0xffff0000u);
  }
  static __device__ __forceinline__ void unpack(const uint4& v, float (&f)[E]) {
    pair(v.x, f[0], f[1]);
    pair(v.y, f[2], f[3]);
    pair(v.z, f[4], f[5]);
    pair(v.w, f[6], f[7]);
  }
};

// Programmatic dependent launch (common.cuh): x and y come from the previous kernel, so they are
// read only after detail::pdl_wait(); the weights, which no kernel writes, may be loaded before.

// Where slot s of warp-group g lives: matrix j, local row, and whether it is a real row (slots
// past the end are clamped onto the last row, computed and never stored).
struct Slot {
  int j;
  int64_t row;
  bool valid;
};
// rope_kv: flat pair p (rows 2p, 2p + 1 of the flat index space) -> matrix j and the two rows of
// it the pair covers (detail::rope_rows). Pairs past the end are clamped onto the last one (valid =
// false).
struct RopePair {
  int j;
  detail::RopeRows rows;
  bool valid;
};
__device__ __forceinline__ RopePair rope_pair_of(const Args& a, int64_t p) {
  RopePair r;
  const int64_t pairs = a.rows / 2;
  r.valid = p < pairs;
  const int64_t f = 2 * (r.valid ? p : pairs - 1);
  r.j = (f >= a.start1) + (f >= a.start2);
  const int64_t local = f - (r.j == 0 ? 0 : r.j == 1 ? a.start1 : a.start2);
  r.rows = detail::rope_rows(a.rope, r.j, local);
  return r;
}

template <int R>
__device__ __forceinline__ Slot slot_of(const Args& a, int64_t g, int s) {
  Slot sl;
  if (a.epi == Epilogue::rope_kv) {
    constexpr int H = R / 2;
    const RopePair p = rope_pair_of(a, g * H + s % H);
    sl.valid = p.valid;
    sl.j = p.j;
    sl.row = s < H ? p.rows.ra : p.rows.rb;
  } else if (a.epi == Epilogue::swiglu) {
    constexpr int H = R / 2;
    const int64_t f = g * H + s % H;
    sl.valid = f < a.rows;
    sl.row = sl.valid ? f : a.rows - 1;
    sl.j = s / H;  // 0: gate, 1: up
  } else {
    const int64_t f0 = g * R + s;
    sl.valid = f0 < a.rows;
    const int64_t f = sl.valid ? f0 : a.rows - 1;
    sl.j = (f >= a.start1) + (f >= a.start2);
    sl.row = f - (sl.j == 0 ? 0 : sl.j == 1 ? a.start1 : a.start2);
  }
  return sl;
}

// E consecutive floats from float4 data.
template <int E>
__device__ __forceinline__ void load_floats(const float4* p, float (&f)[E]) {
#pragma unroll
  for (int q = 0; q < E / 4; ++q) {
    const float4 t = p[q];
    f[4 * q] = t.x;
    f[4 * q + 1] = t.y;
    f[4 * q + 2] = t.z;
    f[4 * q + 3] = t.w;
  }
}

// acc[r][i] += W[slot r] chunk c · x[i] chunk c for the first m (> M/2) rows of x. NORM: times
// the norm weight's chunk c (g4: the norm weight as float4), on whichever side has fewer values.
// SS: ss[i] += the squares of x[i] chunk c.
template <typename T, int M, int R, bool NORM, bool SS>
__device__ __forceinline__ void fma_chunk(const uint4 (&v)[R], const float4* x4, const float4* g4, int x_stride,
                                          int c, int m, float (&acc)[R][M], float (&ss)[M]) {
  constexpr int E = Chunk<T>::E;
  constexpr bool kScaleW = NORM && M >= R;  // (equal counts: scaling w frees g before the row loop)
  float wf[R][E], g[E];
  if constexpr (NORM) load_floats<E>(g4 + c * (E / 4), g);  // read-only (weights), L1-cached
#pragma unroll
  for (int r = 0; r < R; ++r) {
    Chunk<T>::unpack(v[r], wf[r]);
    if constexpr (kScaleW)
#pragma unroll
      for (int k = 0; k < E; ++k) wf[r][k] *= g[k];
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i > M / 2 && i >= m) break;  // warp-uniform; the launcher picks M with m > M/2
    float xv[E];
    load_floats<E>(x4 + i * x_stride + c * (E / 4), xv);  // not ld.global.nc: see detail::pdl_wait
    if constexpr (SS)
#pragma unroll
      for (int k = 0; k < E; ++k) ss[i] = fmaf(xv[k], xv[k], ss[i]);
    if constexpr (NORM && !kScaleW)
#pragma unroll
      for (int k = 0; k < E; ++k) xv[k] *= g[k];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int k = 0; k < E; ++k) acc[r][i] = fmaf(wf[r][k], xv[k], acc[r][i]);
  }
}

// One batch: U chunks (b + 32u + lane) of each of the R rows. A partial last batch loads zeros
// past the row's end (never used: see fma_batch).
template <int U, int R>
__device__ __forceinline__ void load_batch(uint4 (&v)[U][R], const uint4* const (&w)[R], int b, int chunks,
                                           int lane) {
  if (b + 32 * U <= chunks) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) v[u][r] = ld_stream(w[r] + b + 32 * u);
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        v[u][r] = b + 32 * u + lane < chunks ? ld_stream(w[r] + b + 32 * u) : make_uint4(0, 0, 0, 0);
  }
}

template <typename T, int M, int U, int R, bool NORM, bool SS>
__device__ __forceinline__ void fma_batch(const uint4 (&v)[U][R], const float4* x4, const float4* g4, int x_stride,
                                          int b, int chunks, int lane, int m, float (&acc)[R][M], float (&ss)[M]) {
  if (b + 32 * U <= chunks) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      fma_chunk<T, M, R, NORM, SS>(v[u], x4, g4, x_stride, b + 32 * u + lane, m, acc, ss);
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (b + 32 * u + lane < chunks)
        fma_chunk<T, M, R, NORM, SS>(v[u], x4, g4, x_stride, b + 32 * u + lane, m, acc, ss);
  }
}

// 1/rms of each of the first m x rows into inv[M], computed by the whole block (as rmsnorm_kernel:
// 1 / sqrt(sum(x^2) / n + eps)). Every thread of the block must call it; ends with a barrier.
template <int M>
__device__ __forceinline__ void block_inv_rms(const Args& a, float* inv) {
  __shared__ float part[kWarps][M];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const float4* x4 = reinterpret_cast<const float4*>(a.x);
  const int n4 = a.n_in / 4;
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i >= a.m) break;  // block-uniform
    float ss = 0.f;
    for (int k = static_cast<int>(threadIdx.x); k < n4; k += kThreads) {
      const float4 t = x4[i * n4 + k];
      ss = fmaf(t.x, t.x, ss);
      ss = fmaf(t.y, t.y, ss);
      ss = fmaf(t.z, t.z, ss);
      ss = fmaf(t.w, t.w, ss);
    }
    ss = detail::warp_sum(ss);
    if (lane == 0) part[warp][i] = ss;
  }
  __syncthreads();
  if (threadIdx.x < M && static_cast<int>(threadIdx.x) < a.m) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += part[w][threadIdx.x];
    inv[threadIdx.x] = inv_rms_of(t, a.n_in, a.eps);
  }
  __syncthreads();
}

// One butterfly step per level, unrolled at compile time: H sums stay, O is the partner offset.
template <int H, int O, int N>
__device__ __forceinline__ void reduce_scatter(float (&s)[N], int lane) {
  if constexpr (H >= 1) {
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int k = 0; k < H; ++k) {
      const float send = upper ? s[k] : s[k + H];
      const float keep = upper ? s[k + H] : s[k];
      s[k] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    reduce_scatter<H / 2, O / 2>(s, lane);
  }
}

// The rope_kv epilogue of pair p for x row i: va, vb are rows p.rows.ra, p.rows.rb of the product.
__device__ __forceinline__ void rope_kv_out(const Args& a, const RopePair& p, int i, float va, float vb) {
  float* y = p.j == 0 ? a.y0 : p.j == 1 ? a.y1 : a.y2;
  const int64_t n = p.j == 0 ? a.n0 : p.j == 1 ? a.n1 : a.n2;
  detail::rope_kv_pair_out(a.rope, p.j, p.rows, i, y, n, va, vb);
}

template <typename T, int M, bool NORM>
__global__ void __launch_bounds__(kThreads, Cfg<M>::min_blocks) matvec_kernel(const Args a) {
  constexpr int R = Cfg<M>::R, U = Cfg<M>::U, S = Cfg<M>::S, E = Chunk<T>::E;
  constexpr int V = R * M;  // partial sums per lane
  constexpr int L = V == 2 ? 1 : V == 4 ? 2 : V == 8 ? 3 : V == 16 ? 4 : 5;
  constexpr int kBatch = 32 * U;  // chunks of a row per batch
  static_assert((1 << L) == V && V <= 32, "R*M must be a power of two <= 32");
  static_assert(R % 2 == 0, "swiglu pairs gate and up rows within a warp");
  static_assert(kWarps % S == 0, "a block holds whole groups");
  constexpr bool kWarpSS = NORM && S == 1;  // sums of squares in the loop (warps read whole rows)
  constexpr bool kBlockSS = NORM && S > 1;  // ... or in a block pass first

  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (kWarps / S) + warp / S;  // row group
  const int part = warp % S;  // which of the group's S warps: batches part, part + S, ...
  detail::pdl_release();
  const bool active = g < a.groups;
  if constexpr (S == 1)
    if (!active) return;  // the whole warp leaves together

  // Row pointers (slots of inactive warps are clamped onto the last row: valid addresses).
  const int chunks = a.n_in / E;  // per row
  const uint4* w[R];
#pragma unroll
  for (int s = 0; s < R; ++s) {
    const Slot sl = slot_of<R>(a, g, s);
    const void* base = sl.j == 0 ? a.w0 : sl.j == 1 ? a.w1 : a.w2;
    w[s] = static_cast<const uint4*>(base) + sl.row * chunks + lane;
  }
  // Batches: U chunks of each of the R rows, all loads issued before the arithmetic. With S = 1
  // the first batch is issued before waiting on the previous kernel (weights are never written by
  // kernels); with S > 1 that costs registers (ptxas spills), so those wait first.
  int b = part * kBatch;
  uint4 v[U][R];
  constexpr bool kEarly = S == 1;
  if (kEarly && active && b < chunks) load_batch<U, R>(v, w, b, chunks, lane);
  detail::pdl_wait();  // x (and y) come from the previous kernel

  __shared__ float block_inv[M];
  if constexpr (kBlockSS) block_inv_rms<M>(a, block_inv);

  float val = 0.f;     // this lane's total after the reductions (see below)
  float warp_inv[M];   // kWarpSS: 1/rms of each x row
  if (active) {
    const float4* x4 = reinterpret_cast<const float4*>(a.x);
    const float4* g4 = reinterpret_cast<const float4*>(a.norm);
    const int x_stride = a.n_in / 4;  // float4 per row of x
    const int m = a.m;

    float acc[R][M], ss[M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
      ss[i] = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][i] = 0.f;
    }

    const int b0 = b;
#pragma unroll 1
    for (; b < chunks; b += S * kBatch) {
      if (!kEarly || b != b0) load_batch<U, R>(v, w, b, chunks, lane);
      fma_batch<T, M, U, R, NORM, kWarpSS>(v, x4, g4, x_stride, b, chunks, lane, m, acc, ss);
    }

    // Butterfly reduce-scatter: at each level the lanes with bit O set keep the upper half of
    // their sums plus the partner's upper half, the others the lower halves (O = 16, 8, ...).
    // After L levels a lane holds sum number lane >> (5 - L) over 2^L lanes; xor-shuffles over
    // the low lane bits finish it, so every lane of a 2^(5-L) group holds that total.
    float sums[V];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < M; ++i) sums[r * M + i] = acc[r][i];
    reduce_scatter<V / 2, 16>(sums, lane);
    val = sums[0];
#pragma unroll
    for (int o = 16 >> L; o >= 1; o >>= 1) val += __shfl_xor_sync(0xffffffffu, val, o);
    if constexpr (kWarpSS)
#pragma unroll
      for (int i = 0; i < M; ++i) warp_inv[i] = inv_rms_of(detail::warp_sum(ss[i]), a.n_in, a.eps);
  }

  // Split over S warps: the group's first warp adds the others' totals (same lane, same sum).
  if constexpr (S > 1) {
    __shared__ float part_sums[kWarps][32];
    part_sums[warp][lane] = val;
    __syncthreads();
    if (part != 0 || !active) return;
#pragma unroll
    for (int k = 1; k < S; ++k) val += part_sums[warp + k][lane];
  }

  // Sum idx's top bit (slot r + R/2 vs r, i.e. up vs gate under swiglu) is lane bit 4.
  float partner = __shfl_xor_sync(0xffffffffu, val, 16);
  if ((lane & ((1 << (5 - L)) - 1)) != 0) return;  // one writer per sum
  const int idx = lane >> (5 - L);
  const int r = idx / M, i = idx % M;
  if (i >= a.m) return;
  const Slot sl = slot_of<R>(a, g, r);
  if (!sl.valid) return;
  if constexpr (NORM) {  // the partner sum has the same x row i
    float inv = 0.f;
    if constexpr (kWarpSS) {
#pragma unroll
      for (int k = 0; k < M; ++k)  // (a register array: no dynamic index)
        if (k == i) inv = warp_inv[k];
    } else {
      inv = block_inv[i];
    }
    val *= inv;
    partner *= inv;
  }
  if (a.epi == Epilogue::rope_kv) {
    if (r >= R / 2) return;  // the pair's second row: its value went to this lane's partner
    rope_kv_out(a, rope_pair_of(a, g * (R / 2) + r), i, val, partner);
    return;
  }
  if (a.epi == Epilogue::swiglu) {
    if (r >= R / 2) return;  // the up half: its value went to the gate lane
    a.y0[i * a.n0 + sl.row] = val / (1.f + expf(-val)) * partner;
    return;
  }
  float* y = sl.j == 0 ? a.y0 : sl.j == 1 ? a.y1 : a.y2;
  const int64_t n = sl.j == 0 ? a.n0 : sl.j == 1 ? a.n1 : a.n2;
  float* out = y + i * n + sl.row;
  if (a.epi == Epilogue::accumulate)
    *out += val;
  else
    *out = val;
}

template <typename T, int M, bool NORM>
Status launch(Args a, Stream s) {
  constexpr int R = Cfg<M>::R, S = Cfg<M>::S;
  const int per_group = a.epi == Epilogue::swiglu ? R / 2 : R;  // rope_kv: R/2 pairs = R rows
  a.groups = detail::ceil_div(a.rows, per_group);
  const int64_t blocks = detail::ceil_div(a.groups, kWarps / S);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = detail::pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, matvec_kernel<T, M, NORM>, a);  // its error is also the last error
  return detail::launched("matvec_kernel");
}

template <typename T, bool NORM>
Status launch_m(const Args& a, Stream s) {
  if (a.m == 1) return launch<T, 1, NORM>(a, s);
  if (a.m == 2) return launch<T, 2, NORM>(a, s);
  if (a.m <= 4) return launch<T, 4, NORM>(a, s);
  return launch<T, 8, NORM>(a, s);
}

template <typename T>
Status launch_t(const Args& a, Stream s) {
  return a.norm != nullptr ? launch_m<T, true>(a, s) : launch_m<T, false>(a, s);
}

}  // namespace

Status matvec(const MatvecOut* outs, int n_outs, WeightType t, int64_t n_in, const float* x, int64_t m, Epilogue e,
              Stream s, const MatvecNorm& norm, const MatvecRope* rope) {
  using detail::bad_arg;
  const std::string f = "matvec: ";
  if (outs == nullptr) return bad_arg(f + "outs is null");
  if (n_outs < 1 || n_outs > 3) return bad_arg(f + "n_outs = " + std::to_string(n_outs) + " is not in 1..3");
  if (m < 1 || m > kMatvecMaxRows)
    return bad_arg(f + "m = " + std::to_string(m) + " is not in 1.." + std::to_string(kMatvecMaxRows));
  if (n_in < 8 || n_in % 8 != 0 || n_in > (int64_t{1} << 28))
    return bad_arg(f + "n_in = " + std::to_string(n_in) + " must be a positive multiple of 8 (at most 2^28)");
  if (t != WeightType::f32 && t != WeightType::f16 && t != WeightType::bf16)
    return bad_arg(f + "unknown weight type " + std::to_string(static_cast<int>(t)));
  if (e != Epilogue::store && e != Epilogue::accumulate && e != Epilogue::swiglu && e != Epilogue::rope_kv)
    return bad_arg(f + "unknown epilogue " + std::to_string(static_cast<int>(e)));
  if (e == Epilogue::rope_kv) {
    if (n_outs != 3)
      return detail::bad_arg("matvec rope_kv: needs exactly 3 matrices (q, k, v), got n_outs = " +
                             std::to_string(n_outs));
    LITHE_TRY(detail::check_rope("matvec rope_kv: ", outs[0].n_out, outs[1].n_out, outs[2].n_out, rope));
  }
  if (e == Epilogue::swiglu) {
    if (n_outs != 2)
      return bad_arg(f + "swiglu needs exactly 2 matrices (gate, up), got n_outs = " + std::to_string(n_outs));
    if (outs[0].n_out != outs[1].n_out)
      return bad_arg(f + "swiglu needs gate and up of equal n_out, got " + std::to_string(outs[0].n_out) + " and " +
                     std::to_string(outs[1].n_out));
  }
  if (x == nullptr || !aligned(x, 16)) return bad_arg(f + "x = " + ptr_str(x) + " is null or not 16-byte aligned");
  if (norm.w != nullptr && !aligned(norm.w, 16))
    return bad_arg(f + "norm.w = " + ptr_str(norm.w) + " is not 16-byte aligned");
  if (norm.w != nullptr && !(norm.eps >= 0.0f))
    return bad_arg(f + "norm.eps = " + std::to_string(norm.eps) + " must be >= 0");
  int64_t rows = 0;
  for (int j = 0; j < n_outs; ++j) {
    const MatvecOut& o = outs[j];
    const std::string name = "outs[" + std::to_string(j) + "]";
    if (o.n_out < 1) return bad_arg(f + name + ".n_out = " + std::to_string(o.n_out) + " must be positive");
    if (o.w == nullptr || !aligned(o.w, 16))
      return bad_arg(f + name + ".w = " + ptr_str(o.w) + " is null or not 16-byte aligned");
    if (e == Epilogue::swiglu && j == 1) break;  // y_1 unused
    if (o.y == nullptr || !aligned(o.y, alignof(float)))
      return bad_arg(f + name + ".y = " + ptr_str(o.y) + " is null or not 4-byte aligned");
    if (overlap(o.y, m * o.n_out * 4, x, m * n_in * 4)) return bad_arg(f + name + ".y overlaps x");
    for (int k = 0; k < j; ++k)
      if (overlap(o.y, m * o.n_out * 4, outs[k].y, m * outs[k].n_out * 4))
        return bad_arg(f + name + ".y overlaps outs[" + std::to_string(k) + "].y");
    rows += o.n_out;
  }
  if (rows > (int64_t{1} << 31))
    return bad_arg(f + std::to_string(rows) + " output rows in all is more than 2^31");

  constexpr int64_t none = std::numeric_limits<int64_t>::max();
  Args a{};
  a.w0 = outs[0].w;
  a.y0 = outs[0].y;
  a.n0 = outs[0].n_out;
  a.w1 = n_outs > 1 ? outs[1].w : nullptr;
  a.y1 = n_outs > 1 ? outs[1].y : nullptr;
  a.n1 = n_outs > 1 ? outs[1].n_out : 0;
  a.w2 = n_outs > 2 ? outs[2].w : nullptr;
  a.y2 = n_outs > 2 ? outs[2].y : nullptr;
  a.n2 = n_outs > 2 ? outs[2].n_out : 0;
  a.start1 = n_outs > 1 && e != Epilogue::swiglu ? a.n0 : none;
  a.start2 = n_outs > 2 ? a.n0 + a.n1 : none;
  a.rows = e == Epilogue::swiglu ? a.n0 : rows;
  a.x = x;
  a.norm = norm.w;
  a.eps = norm.eps;
  a.n_in = static_cast<int>(n_in);
  a.m = static_cast<int>(m);
  a.epi = e;
  if (rope != nullptr) a.rope = *rope;
  switch (t) {
    case WeightType::f32: return launch_t<float>(a, s);
    case WeightType::f16: return launch_t<__half>(a, s);
    case WeightType::bf16: return launch_t<__nv_bfloat16>(a, s);
  }
  return bad_arg(f + "unknown weight type");
}

}  // namespace lithe::cuda

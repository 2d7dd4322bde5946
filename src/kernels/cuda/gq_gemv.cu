// Group-quantized matrix-vector products for decode (cuda_gq.h: gemv, gemv_linear), batch m <= 8
// on CUDA cores, and the expansion of the same packed matrix to dense f16 (gemv_dequantize_f16).
// The layout is described in gq_gemv_layout.h; the kernel streams it once from HBM.
//
// Work split (a decode matrix of 4096 rows is only 128 tiles: the k dimension is split too, so
// that every SM has some 16-24 warps with loads in flight)
// - An "item" is one 32-row tile (swiglu: tile t of gate and tile t of up, R = 2), lane l on row l
//   of it. The items of up to 3 matrices form one flat index space (matrix 0's tiles, then 1's...).
// - Each item is cut along k into KS blocks of 4 warps; warp w of block ks streams the chunks
//   [(4 ks + w) cpw, (4 ks + w + 1) cpw) of its tile(s), so every warp load is 512 contiguous bytes
//   (chunk c of the 32 rows) and all lanes need the same x values. KS depends only on the shape and
//   the SM count (pick_split), never on m: row i of y is the same bits whatever m is.
// - A batch is U chunks of each of the R tiles: their loads (ld.global.nc.L1::no_allocate; int3
//   also its 8-byte hi chunks) and scale records are issued before any arithmetic. The first batch
//   is issued before griddepcontrol.wait (PDL): weights are never written by kernels.
// - After the wait the block stages its k-range of x into shared memory: gathered by perm
//   (act-order), multiplied by the norm weight (folded RMSNorm), zero past n_in; the stage also
//   sums x^2 over the range (RMSNorm's sum of squares: the KS ranges of an item cover the row once).
// - The 4 warps' sums meet in shared memory (fixed order). With KS = 1 the block applies the
//   epilogue; otherwise it writes its partial sums to scratch and the last block of the item to
//   arrive (a counter, reset by that block) adds the KS partials in ks order (deterministic), zeroes
//   them (one scratch serves launches of every shape: it must be all zero between launches) and
//   applies the epilogue: store / accumulate / swiglu, times 1/rms under a folded norm.
//
// Arithmetic per unit (32 columns, int8: 16; one scale record):
// - (word & mask) | 0x64006400 (one LOP3; int8: one PRMT) makes an f16 pair 1024 + c * 2^(b*j);
//   one HFMA2 with (2^-(b*j), -(1024 * 2^-(b*j) + zero)) gives the exact integers c - zero, which
//   are converted to f32 and multiplied into t[i] += (c - zero) * x[i] (f32 FMAs, exact products).
// - At the end of the unit acc[i] += scale * t[i]: W = scale * (c - zero) exactly as the reference
//   has it; only the order of the f32 sums differs.
// - With m >= 4 the kernel is bound by those f32 FMAs (one per weight and x row), not by HBM.
// Instantiations: bits {2, 3, 4, 8} x M {1, 2, 4, 8} (m rounded up; x rows >= m are skipped by
// uniform predicates, never stored) x {one tile, act-order, two tiles (swiglu)}, and one
// dequantize kernel per bits.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gq_gemv_layout.h"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda {
namespace {

namespace L = gemv_layout;
using detail::aligned;
using detail::inv_rms_of;
using detail::ld_stream;
using detail::overlap;
using detail::ptr_str;

constexpr int kWarps = 4;  // warps of a block, each on its own k-range of the block's item
constexpr int kThreads = 32 * kWarps;
// Chunks per lane per batch (U = loads / R of each tile): 4, 2 KiB per warp. (8 with fewer blocks
// measured slower on an H200: 98 vs 83 us per Llama-2-7B layer; bench/DEVICE_RUNS.md.)
constexpr int loads_of(int) { return 4; }
constexpr int kMaxM = 8;
static_assert(L::kTileRows == 32, "one row per lane");
static_assert(kMaxM == kGemvMaxRows, "scratch is laid out for kGemvMaxRows rows of x");

// Occupancy asked of ptxas, in blocks of 128 threads per SM (6: <= 80 registers, 4: <= 128,
// 3: <= 168), the tightest that does not spill (ptxas -v, sm_90a).
template <int M, int R>
struct Cfg {
  static constexpr int min_blocks = M == 1 || (M == 2 && R == 1) ? 6 : M == 8 ? 3 : 4;
};
constexpr int kBlocksPerSm = 6;  // blocks per SM the k-split aims at

// One matrix: its sections on the device and its output.
struct Mat {
  const uint4* codes = nullptr;
  const uint2* hi = nullptr;  // int3 only
  const uint32_t* recs = nullptr;
  const int32_t* perm = nullptr;  // act-order only
  float* y = nullptr;
  int64_t n_out = 0;
  int64_t item0 = 0;  // its first flat item
};

// The shape shared by the matrices of a launch.
struct Geo {
  int n_in, chunks, groups, units;
  uint32_t gmagic;  // group of 32-column block b: umulhi(b, gmagic), or b when 0 (group 32)
};

struct Args {
  Mat mat[3];
  int n_mats;
  Geo g;
  int64_t items;
  int ks, cpw;  // blocks per item (k-split), chunks per warp
  const float* x;
  const float* norm;  // folded RMSNorm weight [n_in], or null
  float eps;
  int m;
  Epilogue epi;
  float* partial;      // ks > 1: [items][ks][R][kMaxM][32] partial sums, then [items][ks][kMaxM] x^2 sums
  unsigned* counters;  // ks > 1: [items] blocks arrived
};

template <int BITS>
struct Codec {
  static constexpr int kCols = L::chunk_cols(BITS);      // per chunk
  static constexpr int kUnitCols = L::unit_cols(BITS);  // per scale record
  static constexpr int kUnits = kCols / kUnitCols;      // per chunk
  static constexpr int kClasses = L::classes(BITS);
  static constexpr bool kHi = BITS == 3;
};

struct Chunk {
  uint4 lo;
  uint2 hi;
};

// f16 bits of an exact dyadic value (compile time).
constexpr uint32_t f16_bits(double v) {
  if (v == 0) return 0;
  int e = 0;
  while (v >= 2) v /= 2, ++e;
  while (v < 1) v *= 2, --e;
  return static_cast<uint32_t>((e + 15) << 10) | static_cast<uint32_t>((v - 1) * 1024);
}
constexpr uint32_t pair_bits(double v) { return f16_bits(v) | f16_bits(v) << 16; }
// Class j: codes sit at bit b*j, so the pair is 1024 + c * 2^(b*j).
template <int BITS>
constexpr double class_mult(int j) { return static_cast<double>(1 << (BITS == 8 ? 0 : L::class_bits(BITS) * j)); }

// f16x2 arithmetic on 32-bit registers (no repacking of halves).
template <uint32_t MASK>
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b) {  // (a & MASK) | b
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "n"(MASK), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ float2 h2_to_f2(uint32_t h) {
  float2 f;
  asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n cvt.f32.f16 %1, hi; }"
      : "=f"(f.x), "=f"(f.y)
      : "r"(h));
  return f;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// The f16 pair (1024 + c0 * 2^(b*j), 1024 + c1 * 2^(b*j)) of pair q of a chunk (q a compile-time
// constant after unrolling: every mask, shift and rotation folds). magic: 0x64006400 in a register
// (so that the mask and the magic make one LOP3).
template <int BITS>
__device__ __forceinline__ uint32_t raw_pair(const Chunk& ch, int q, uint32_t magic) {
  const uint32_t v = word_of(ch.lo, L::lo_word(BITS, q));
  const int p = q % L::pairs_per_word(BITS);
  if constexpr (BITS == 8) {
    return __byte_perm(v, magic, p ? 0x5351 : 0x5250);  // bytes p, p + 2 beside magic's 0x64 (byte 5)
  } else {
    constexpr int J = L::classes(BITS), B = L::class_bits(BITS);
    const int s = p / J, j = p % J;
    const uint32_t base = s ? v >> 8 : v;
    constexpr uint32_t m = ((1u << B) - 1) * 0x00010001u;
    uint32_t r;
    if (j == 0) r = lop3_and_or<m>(base, magic);
    else if (j == 1) r = lop3_and_or<(m << B)>(base, magic);
    else if (j == 2) r = lop3_and_or<(m << 2 * B)>(base, magic);
    else r = lop3_and_or<(m << 3 * B)>(base, magic);
    if constexpr (BITS == 3) {  // the third bit, just above the two low ones
      const uint32_t h = L::hi_word(q) ? ch.hi.y : ch.hi.x;
      const uint32_t hr = __funnelshift_r(h, h, L::hi_rot(q));
      if (j == 0) r = lop3_and_or<0x00040004u>(hr, r);
      else if (j == 1) r = lop3_and_or<0x00100010u>(hr, r);
      else if (j == 2) r = lop3_and_or<0x00400040u>(hr, r);
      else r = lop3_and_or<0x01000100u>(hr, r);
    }
    return r;
  }
}

// The per-class constants of a unit from its record: HFMA2 addends -(1024 / mult_j + zero).
template <int BITS>
__device__ __forceinline__ void class_addends(uint32_t rec, uint32_t (&zc)[Codec<BITS>::kClasses]) {
  const uint32_t z0 = __byte_perm(rec, 0, 0x3232);  // -(1024 + zero) in both halves
#pragma unroll
  for (int j = 0; j < Codec<BITS>::kClasses; ++j)
    zc[j] = j == 0 ? z0 : hadd2(z0, pair_bits(1024.0 - 1024.0 / class_mult<BITS>(j)));
}

// c - zero (exact, f32) of the 4 columns of quad e of unit k of a chunk.
template <int BITS>
__device__ __forceinline__ void quad_values(const Chunk& ch, int k, int e, const uint32_t (&zc)[Codec<BITS>::kClasses],
                                            uint32_t magic, float (&w)[4]) {
  constexpr int kPairs = Codec<BITS>::kUnitCols / 2;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int q = k * kPairs + 2 * e + h;
    const int j = BITS == 8 ? 0 : (q % L::pairs_per_word(BITS)) % L::classes(BITS);
    const float2 f = h2_to_f2(hfma2(raw_pair<BITS>(ch, q, magic), pair_bits(1.0 / class_mult<BITS>(j)), zc[j]));
    w[2 * h] = f.x;
    w[2 * h + 1] = f.y;
  }
}

__device__ __forceinline__ float scale_of(uint32_t rec) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(rec & 0xffffu)));
}

template <int BITS>
__device__ __forceinline__ int group_of(const Geo& g, int unit) {
  const uint32_t b = static_cast<uint32_t>(BITS == 8 ? unit >> 1 : unit);  // 32-column block
  return static_cast<int>(g.gmagic ? __umulhi(b, g.gmagic) : b);
}

// acc[i] += scale * sum over unit k of chunk ch of (c - zero) * x[i] (x: the unit's first column
// of x row 0 in the staged copy, rows `stride` floats apart).
template <int BITS, int M>
__device__ __forceinline__ void unit_fma(const float* x, int stride, int m, const Chunk& ch, int k, uint32_t rec,
                                         float (&acc)[M]) {
  constexpr uint32_t magic = 0x64006400u;  // f16 1024 in both halves
  uint32_t zc[Codec<BITS>::kClasses];
  class_addends<BITS>(rec, zc);
  float t[M];
#pragma unroll
  for (int i = 0; i < M; ++i) t[i] = 0.f;
#pragma unroll
  for (int e = 0; e < Codec<BITS>::kUnitCols / 4; ++e) {
    float w[4];
    quad_values<BITS>(ch, k, e, zc, magic, w);
#pragma unroll
    for (int i = 0; i < M; ++i)
      if (M <= 2 || i < M / 2 || i < m) {
        const float4 xv = *reinterpret_cast<const float4*>(x + i * stride + 4 * e);
        t[i] = fmaf(w[0], xv.x, t[i]);
        t[i] = fmaf(w[1], xv.y, t[i]);
        t[i] = fmaf(w[2], xv.z, t[i]);
        t[i] = fmaf(w[3], xv.w, t[i]);
      }
  }
  const float s = scale_of(rec);
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = fmaf(s, t[i], acc[i]);
}

// The tiles of one item: R lane pointers into codes / hi / recs, the output of each.
template <int R>
struct Tiles {
  const uint4* cp[R];
  const uint2* hp[R];
  const uint32_t* rp[R];
  const int32_t* perm;
  float* y[R];
  int64_t n_out[R];
  int64_t tile[R];
};

__device__ __forceinline__ Mat mat_of(const Args& a, int j) { return j == 0 ? a.mat[0] : j == 1 ? a.mat[1] : a.mat[2]; }

template <int BITS, int R>
__device__ __forceinline__ Tiles<R> tiles_of(const Args& a, int64_t item, int lane) {
  Tiles<R> t;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // R = 2 (swiglu): gate and up, tile `item` of each; R = 1: the matrix holding flat item `item`.
    const int j = R == 2 ? r : (a.n_mats > 1 && item >= a.mat[1].item0) + (a.n_mats > 2 && item >= a.mat[2].item0);
    const Mat mt = mat_of(a, j);
    t.tile[r] = item - mt.item0;
    const int64_t slot0 = t.tile[r] * a.g.chunks * L::kTileRows + lane;
    t.cp[r] = mt.codes + slot0;
    t.hp[r] = Codec<BITS>::kHi ? mt.hi + slot0 : nullptr;
    t.rp[r] = mt.recs + t.tile[r] * a.g.groups * L::kTileRows + lane;
    t.y[r] = mt.y;
    t.n_out[r] = mt.n_out;
    if (r == 0) t.perm = mt.perm;
  }
  return t;
}

// Issues the batch at chunk b of this warp's range [.., end): chunks b .. b + U - 1 of each tile,
// and their scale records.
template <int BITS, int R, int U>
__device__ __forceinline__ void load_batch(const Geo& g, const Tiles<R>& t, int b, int end, Chunk (&v)[R][U],
                                           uint32_t (&rec)[R][U][Codec<BITS>::kUnits]) {
  using C = Codec<BITS>;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = b + u;
    if (c < end)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        v[r][u].lo = ld_stream(t.cp[r] + c * L::kTileRows);
        if constexpr (C::kHi) v[r][u].hi = ld_stream(t.hp[r] + c * L::kTileRows);
#pragma unroll
        for (int k = 0; k < C::kUnits; ++k) {
          const int unit = min(c * C::kUnits + k, g.units - 1);  // a padding unit: any record
          rec[r][u][k] = __ldg(t.rp[r] + static_cast<uint32_t>(group_of<BITS>(g, unit)) * L::kTileRows);
        }
      }
  }
}

// The epilogue of x row i for this lane's row of the item's tiles: v[r] the finished sums of tile r.
template <int R>
__device__ __forceinline__ void finish(const Args& a, const Tiles<R>& t, int lane, int i, float (&v)[R], float ss) {
  if (a.norm != nullptr) {
    const float inv = inv_rms_of(ss, a.g.n_in, a.eps);
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] *= inv;
  }
  const int64_t row = t.tile[0] * L::kTileRows + lane;
  if (row >= t.n_out[0]) return;
  float* p = t.y[0] + i * t.n_out[0] + row;
  if constexpr (R == 2) {  // swiglu: gate, up
    *p = v[0] / (1.f + expf(-v[0])) * v[1];
  } else {
    *p = a.epi == Epilogue::accumulate ? *p + v[0] : v[0];
  }
}

// Dynamic shared memory: the block's k-range of x, [m][span] floats (span = 4 cpw chunk columns).
// PERM: act-order (x gathered by the matrix's perm). R = 2: swiglu over two tiles.
template <int BITS, int M, int R, bool PERM>
__global__ void __launch_bounds__(kThreads, Cfg<M, R>::min_blocks) gemv_kernel(const Args a) {
  using C = Codec<BITS>;
  constexpr int U = loads_of(BITS) / R;
  extern __shared__ float4 xs4[];
  __shared__ float part[kWarps][R][M][32];
  __shared__ float ss_part[kWarps][M];
  __shared__ bool last;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t item = blockIdx.x / a.ks;
  const int ks = static_cast<int>(blockIdx.x % a.ks);
  detail::pdl_release();
  const Tiles<R> t = tiles_of<BITS, R>(a, item, lane);
  const int span = kWarps * a.cpw * C::kCols;     // staged columns
  const int col0 = ks * kWarps * a.cpw * C::kCols;  // first one
  const int begin = (ks * kWarps + warp) * a.cpw, end = min(begin + a.cpw, a.g.chunks);

  Chunk v[R][U];
  uint32_t rec[R][U][C::kUnits];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      v[r][u] = Chunk{};
#pragma unroll
      for (int k = 0; k < C::kUnits; ++k) rec[r][u][k] = 0;
    }
  if (begin < end) load_batch<BITS, R, U>(a.g, t, begin, end, v, rec);
  detail::pdl_wait();  // x, y and the scratch belong to the previous kernel until here

  // Stage x[i][col0 .. col0 + span) (gathered, times the norm weight; zero past n_in) and sum its
  // squares.
  float* xs = reinterpret_cast<float*>(xs4);
  const int n_in = a.g.n_in;
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i >= a.m) break;  // block-uniform
    float ss = 0.f;
    for (int k = static_cast<int>(threadIdx.x); k < span; k += kThreads) {
      const int col = col0 + k;
      float val = 0.f;
      if (col < n_in) {
        const int src = PERM ? __ldg(t.perm + col) : col;
        val = a.x[static_cast<int64_t>(i) * n_in + src];
        ss = fmaf(val, val, ss);
        if (a.norm != nullptr) val *= __ldg(a.norm + src);
      }
      xs[i * span + k] = val;
    }
    ss = detail::warp_sum(ss);
    if (lane == 0) ss_part[warp][i] = ss;
  }
  __syncthreads();

  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;
#pragma unroll 1
  for (int b = begin; b < end; b += U) {
    if (b != begin) load_batch<BITS, R, U>(a.g, t, b, end, v, rec);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = b + u;
      if (c >= end) break;  // warp-uniform
#pragma unroll
      for (int k = 0; k < C::kUnits; ++k) {
        const int unit = c * C::kUnits + k;
        if (C::kUnits == 1 || unit < a.g.units)
#pragma unroll
          for (int r = 0; r < R; ++r)
            unit_fma<BITS, M>(xs + unit * C::kUnitCols - col0, span, a.m, v[r][u], k, rec[r][u][k], acc[r]);
      }
    }
  }

  // The block's sums: warp w finishes x rows w, w + 4, ... (the 4 warps' parts in order).
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) part[warp][r][i][lane] = acc[r][i];
  __syncthreads();
  // ks > 1: this item's partial sums [ks][R][kMaxM][32] and x^2 sums [ks][kMaxM] in scratch.
  const int64_t sums = a.items * a.ks * (R * kMaxM * 32);
  float* const partial = a.ks == 1 ? nullptr : a.partial + item * a.ks * (R * kMaxM * 32);
  float* const ss_out = a.ks == 1 ? nullptr : a.partial + sums + item * a.ks * kMaxM;
  for (int i = warp; i < a.m; i += kWarps) {
    float val[R], ss = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      val[r] = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) val[r] += part[w][r][i][lane];
    }
#pragma unroll
    for (int w = 0; w < kWarps; ++w) ss += ss_part[w][i];
    if (a.ks == 1) {
      finish<R>(a, t, lane, i, val, ss);
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) __stcg(partial + (ks * R + r) * (kMaxM * 32) + i * 32 + lane, val[r]);
      if (lane == 0) __stcg(ss_out + ks * kMaxM + i, ss);
    }
  }
  if (a.ks == 1) return;

  // The last block of the item to arrive adds the KS partial sums in ks order.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned before = atomicAdd(a.counters + item, 1u);
    last = before == static_cast<unsigned>(a.ks - 1);
    if (last) a.counters[item] = 0;  // every block of the item has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Every slot read is zeroed again: the whole scratch is back at zero for the next launch, whatever
  // its shape (another launch's counters may lie where these partial sums were).
  for (int i = warp; i < a.m; i += kWarps) {
    float val[R], ss = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) val[r] = 0.f;
    for (int k = 0; k < a.ks; ++k) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float* p = partial + (k * R + r) * (kMaxM * 32) + i * 32 + lane;
        val[r] += __ldcg(p);
        __stcg(p, 0.f);
      }
      ss += __ldcg(ss_out + k * kMaxM + i);
    }
    __syncwarp();
    if (lane == 0)
      for (int k = 0; k < a.ks; ++k) __stcg(ss_out + k * kMaxM + i, 0.f);
    finish<R>(a, t, lane, i, val, ss);
  }
}

// Dense f16 [n_out][n_in] (original column order): one thread per stored chunk.
template <int BITS>
__global__ void __launch_bounds__(256) dequant_kernel(const Mat mt, const Geo g, int64_t slots, __half* out) {
  using C = Codec<BITS>;
  constexpr uint32_t magic = 0x64006400u;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < slots;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tc = idx / L::kTileRows, tile = tc / g.chunks;
    const int c = static_cast<int>(tc % g.chunks), lane = static_cast<int>(idx % L::kTileRows);
    const int64_t row = tile * L::kTileRows + lane;
    if (row >= mt.n_out) continue;
    Chunk ch;
    ch.lo = mt.codes[idx];
    if constexpr (C::kHi) ch.hi = mt.hi[idx];
    __half* orow = out + row * g.n_in;
#pragma unroll
    for (int k = 0; k < C::kUnits; ++k) {
      const int unit = c * C::kUnits + k;
      if (unit >= g.units) continue;
      const uint32_t rec = mt.recs[(tile * g.groups + group_of<BITS>(g, unit)) * L::kTileRows + lane];
      uint32_t zc[C::kClasses];
      class_addends<BITS>(rec, zc);
      const float s = scale_of(rec);
#pragma unroll
      for (int e = 0; e < C::kUnitCols / 8; ++e) {  // 8 columns: two quads
        uint32_t hw[4];
#pragma unroll
        for (int d = 0; d < 2; ++d) {
          float w[4];
          quad_values<BITS>(ch, k, 2 * e + d, zc, magic, w);
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // s * (c - zero) is exact in f32: one rounding to f16
            const __half2 p = __floats2half2_rn(s * w[2 * h], s * w[2 * h + 1]);
            hw[2 * d + h] = *reinterpret_cast<const uint32_t*>(&p);
          }
        }
        const int col = unit * C::kUnitCols + 8 * e;
        if (mt.perm == nullptr) {
          *reinterpret_cast<uint4*>(orow + col) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j)
            orow[mt.perm[col + j]] = __ushort_as_half(static_cast<unsigned short>(hw[j / 2] >> (16 * (j % 2))));
        }
      }
    }
  }
}

// Checks a packed weight against the layout it claims; fills its Mat (not y, item0) and the shape.
Status make_mat(const PackedWeight& w, const void* w_dev, const std::string& f, Mat& mt, Geo& geo) {
  using detail::bad_arg;
  if (w.layout != kLayoutGemv)
    return bad_arg(f + "layout " + std::to_string(w.layout) + " is not the GEMV layout (pack_gemv)");
  const Status sup = gemv_supports(w.fmt, w.n_out, w.n_in);
  if (!sup.is_ok()) return sup;
  const L::Geometry g = L::geometry(w.fmt, w.n_out, w.n_in, w.has_perm);
  if (w.section[0] != g.codes || w.section[1] != g.hi || w.section[2] != g.recs || w.section[3] != g.perm ||
      w.bytes != g.bytes)
    return bad_arg(f + "the descriptor's sections / size (" + std::to_string(w.bytes) +
                   " bytes) do not match the GEMV layout of its shape (" + std::to_string(g.bytes) + " bytes)");
  if (w_dev == nullptr || !aligned(w_dev, 16))
    return bad_arg(f + "w_dev = " + ptr_str(w_dev) + " is null or not 16-byte aligned");
  const auto* base = static_cast<const uint8_t*>(w_dev);
  mt.codes = reinterpret_cast<const uint4*>(base + g.codes);
  mt.hi = reinterpret_cast<const uint2*>(base + g.hi);
  mt.recs = reinterpret_cast<const uint32_t*>(base + g.recs);
  mt.perm = w.has_perm ? reinterpret_cast<const int32_t*>(base + g.perm) : nullptr;
  mt.n_out = w.n_out;
  geo.n_in = static_cast<int>(w.n_in);
  geo.chunks = static_cast<int>(g.chunks);
  geo.groups = static_cast<int>(g.groups);
  geo.units = static_cast<int>(g.units);
  const uint64_t bpg = static_cast<uint64_t>(w.fmt.group / 32);
  geo.gmagic = bpg == 1 ? 0u : static_cast<uint32_t>(((uint64_t{1} << 32) + bpg - 1) / bpg);
  return Status::ok();
}

// The k-split of `items` items of `chunks` chunks of `cols` columns: about kBlocksPerSm blocks per
// SM and staged ranges of about 1024 columns, while every warp keeps at least one full batch
// (`loads` chunks). Depends on the shape and the device only. (Capping the blocks at one wave
// measured slower.)
struct Split {
  int ks, cpw;
};
Split pick_split(int64_t items, int chunks, int cols, int loads, int sms) {
  const int64_t max_ks = std::max<int64_t>(1, chunks / (kWarps * loads));
  static const int per_sm = [] {  // LITHE_GEMV_BLOCKS_PER_SM: a tuning knob for benchmarks
    const char* e = std::getenv("LITHE_GEMV_BLOCKS_PER_SM");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v > 0 ? v : kBlocksPerSm;
  }();
  const int64_t want = std::max<int64_t>(detail::ceil_div(int64_t{per_sm} * sms, items),
                                         detail::ceil_div(int64_t{chunks} * cols, 1024));
  Split sp;
  sp.ks = static_cast<int>(std::clamp<int64_t>(want, 1, max_ks));
  sp.cpw = static_cast<int>(detail::ceil_div(chunks, int64_t{kWarps} * sp.ks));
  sp.ks = static_cast<int>(detail::ceil_div(chunks, int64_t{kWarps} * sp.cpw));  // no empty blocks
  return sp;
}

template <int BITS, int M, int R, bool PERM>
Status launch(const Args& a, Stream s) {
  static std::atomic<uint64_t> opted{0};
  auto* kernel = gemv_kernel<BITS, M, R, PERM>;
  const size_t smem = static_cast<size_t>(a.m) * kWarps * a.cpw * Codec<BITS>::kCols * sizeof(float);
  LITHE_TRY(detail::allow_smem(kernel, opted, smem, "gq gemv_kernel"));
  detail::launch_pdl(kernel, dim3(static_cast<unsigned>(a.items * a.ks)), dim3(kThreads), smem, s, a);
  return detail::launched("gq gemv_kernel");
}

template <int BITS, int R, bool PERM>
Status launch_m(const Args& a, Stream s) {
  if (a.m == 1) return launch<BITS, 1, R, PERM>(a, s);
  if (a.m == 2) return launch<BITS, 2, R, PERM>(a, s);
  if (a.m <= 4) return launch<BITS, 4, R, PERM>(a, s);
  return launch<BITS, 8, R, PERM>(a, s);
}

template <int BITS>
Status launch_kind(const Args& a, Stream s) {
  if (a.epi == Epilogue::swiglu) return launch_m<BITS, 2, false>(a, s);
  if (a.mat[0].perm != nullptr) return launch_m<BITS, 1, true>(a, s);
  return launch_m<BITS, 1, false>(a, s);
}

// Items of a launch (swiglu: the gate's tiles), its split and its scratch: [items] u32 counters
// (padded to 256 bytes), then the partial sums (Args::partial); none when ks == 1.
struct Plan {
  int64_t items = 0;
  Split split{1, 1};
  int64_t counter_bytes = 0, scratch_bytes = 0;
};
Plan plan_of(const GemvOut* outs, int n_outs, Epilogue e, int sms) {
  Plan p;
  const int R = e == Epilogue::swiglu ? 2 : 1;
  for (int j = 0; j < (R == 2 ? 1 : n_outs); ++j) p.items += detail::ceil_div(outs[j].w->n_out, L::kTileRows);
  const PackedWeight& w = *outs[0].w;
  const L::Geometry g = L::geometry(w.fmt, w.n_out, w.n_in, w.has_perm);
  p.split = pick_split(p.items, static_cast<int>(g.chunks), L::chunk_cols(w.fmt.bits), loads_of(w.fmt.bits), sms);
  if (p.split.ks > 1) {
    p.counter_bytes = (p.items * 4 + 255) / 256 * 256;
    p.scratch_bytes = p.counter_bytes + p.items * p.split.ks * (R * kMaxM * 32 + kMaxM) * 4;
  }
  return p;
}

}  // namespace

int64_t gemv_scratch_bytes(const GemvOut* outs, int n_outs, Epilogue e) {
  if (outs == nullptr || n_outs < 1 || n_outs > 3) return 0;
  for (int j = 0; j < n_outs; ++j)
    if (outs[j].w == nullptr) return 0;
  detail::DeviceFacts d;
  // The scratch grows with the split, which grows with the SM count: an unreadable device gets the
  // bound of a large one.
  if (!detail::device_facts(d).is_ok()) d.sms = 1024;
  return plan_of(outs, n_outs, e, d.sms).scratch_bytes;
}

Status gemv(const GemvOut* outs, int n_outs, const float* x, int64_t m, Epilogue e, void* scratch,
            int64_t scratch_bytes, Stream s, const MatvecNorm& norm) {
  using detail::bad_arg;
  std::string f = "gemv: ";
  if (outs == nullptr || n_outs < 1 || n_outs > 3)
    return bad_arg(f + "n_outs = " + std::to_string(n_outs) + " is not in 1..3 (or outs is null)");
  if (e != Epilogue::store && e != Epilogue::accumulate && e != Epilogue::swiglu)
    return bad_arg(f + "epilogue " + std::to_string(static_cast<int>(e)) + " is not store, accumulate or swiglu");
  if (e == Epilogue::swiglu && n_outs != 2)
    return bad_arg(f + "swiglu needs exactly 2 matrices (gate, up), got n_outs = " + std::to_string(n_outs));
  Args a{};
  for (int j = 0; j < n_outs; ++j) {
    if (outs[j].w == nullptr) return bad_arg(f + "outs[" + std::to_string(j) + "].w is null");
    const PackedWeight& w = *outs[j].w;
    const std::string fj = "gemv [" + std::to_string(w.n_out) + " x " + std::to_string(w.n_in) + "]: ";
    Geo geo{};
    LITHE_TRY(make_mat(w, outs[j].w_dev, fj, a.mat[j], geo));
    if (j == 0) {
      a.g = geo;
      f = fj;
    } else if (w.fmt.bits != outs[0].w->fmt.bits || w.fmt.group != outs[0].w->fmt.group || w.n_in != outs[0].w->n_in ||
               w.has_perm != outs[0].w->has_perm) {
      return bad_arg(fj + "fused matrices differ in format, n_in or act-order from outs[0] (" +
                     format_name(outs[0].w->fmt, outs[0].w->n_in) + ", n_in " + std::to_string(outs[0].w->n_in) + ")");
    }
  }
  const int64_t n_in = outs[0].w->n_in;
  if (e == Epilogue::swiglu && (outs[0].w->n_out != outs[1].w->n_out || outs[0].w->has_perm))
    return bad_arg(f + "swiglu needs gate and up of equal n_out without act-order, got " +
                   std::to_string(outs[0].w->n_out) + " and " + std::to_string(outs[1].w->n_out) +
                   (outs[0].w->has_perm ? " (act-order)" : ""));
  if (m < 1 || m > kGemvMaxRows)
    return bad_arg(f + "m = " + std::to_string(m) + " is not in 1.." + std::to_string(kGemvMaxRows));
  if (x == nullptr || !aligned(x, 4)) return bad_arg(f + "x = " + ptr_str(x) + " is null or not 4-byte aligned");
  if (norm.w != nullptr && !(norm.eps >= 0.0f))
    return bad_arg(f + "norm.eps = " + std::to_string(norm.eps) + " must be >= 0");
  const int n_y = e == Epilogue::swiglu ? 1 : n_outs;
  for (int j = 0; j < n_y; ++j) {
    float* y = outs[j].y;
    const int64_t n_out = outs[j].w->n_out;
    const std::string name = "outs[" + std::to_string(j) + "].y";
    if (y == nullptr || !aligned(y, alignof(float))) return bad_arg(f + name + " = " + ptr_str(y) + " is null or not 4-byte aligned");
    if (overlap(y, m * n_out * 4, x, m * n_in * 4)) return bad_arg(f + name + " overlaps x");
    for (int k = 0; k < j; ++k)
      if (overlap(y, m * n_out * 4, outs[k].y, m * outs[k].w->n_out * 4))
        return bad_arg(f + name + " overlaps outs[" + std::to_string(k) + "].y");
    a.mat[j].y = y;
  }
  detail::DeviceFacts d;
  LITHE_TRY(detail::device_facts(d));
  const Plan p = plan_of(outs, n_outs, e, d.sms);
  int64_t item0 = 0;
  for (int j = 0; j < n_outs; ++j) {
    a.mat[j].item0 = e == Epilogue::swiglu ? 0 : item0;
    item0 += detail::ceil_div(outs[j].w->n_out, L::kTileRows);
  }
  const int64_t need = p.scratch_bytes;
  if (need > 0 && (scratch == nullptr || scratch_bytes < need || !aligned(scratch, 256)))
    return bad_arg(f + "scratch " + ptr_str(scratch) + " of " + std::to_string(scratch_bytes) + " bytes: needs " +
                   std::to_string(need) + " bytes, 256-byte aligned and zeroed (gemv_scratch_bytes)");
  a.n_mats = n_outs;
  a.items = p.items;
  a.ks = p.split.ks;
  a.cpw = p.split.cpw;
  a.x = x;
  a.norm = norm.w;
  a.eps = norm.eps;
  a.m = static_cast<int>(m);
  a.epi = e;
  if (need > 0) {
    a.counters = static_cast<unsigned*>(scratch);
    a.partial = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + p.counter_bytes);
  }
  switch (outs[0].w->fmt.bits) {
    case 2: return launch_kind<2>(a, s);
    case 3: return launch_kind<3>(a, s);
    case 4: return launch_kind<4>(a, s);
    default: return launch_kind<8>(a, s);
  }
}

Status gemv_linear(const PackedWeight& w, const void* w_dev, const float* x, int64_t m, float* y, bool accumulate,
                   void* scratch, int64_t scratch_bytes, Stream s) {
  const GemvOut out{&w, w_dev, y};
  return gemv(&out, 1, x, m, accumulate ? Epilogue::accumulate : Epilogue::store, scratch, scratch_bytes, s);
}

Status gemv_dequantize_f16(const PackedWeight& w, const void* w_dev, void* out, Stream s) {
  using detail::bad_arg;
  const std::string f = "gemv_dequantize_f16 [" + std::to_string(w.n_out) + " x " + std::to_string(w.n_in) + "]: ";
  Mat mt;
  Geo g{};
  LITHE_TRY(make_mat(w, w_dev, f, mt, g));
  if (out == nullptr || !aligned(out, 16))
    return bad_arg(f + "out = " + ptr_str(out) + " is null or not 16-byte aligned");
  const int64_t slots = detail::ceil_div(w.n_out, L::kTileRows) * g.chunks * L::kTileRows;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(slots, 256), 8192))), block(256);
  auto* o = static_cast<__half*>(out);
  switch (w.fmt.bits) {
    case 2: dequant_kernel<2><<<grid, block, 0, s>>>(mt, g, slots, o); break;
    case 3: dequant_kernel<3><<<grid, block, 0, s>>>(mt, g, slots, o); break;
    case 4: dequant_kernel<4><<<grid, block, 0, s>>>(mt, g, slots, o); break;
    default: dequant_kernel<8><<<grid, block, 0, s>>>(mt, g, slots, o); break;
  }
  return detail::launched("gq dequant_kernel");
}

}  // namespace lithe::cuda

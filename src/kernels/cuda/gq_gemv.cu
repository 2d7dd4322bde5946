// Group-quantized matrix-vector products for decode (cuda_gq.h: gemv, gemv_linear), batch
// m <= kGemvMaxRows on integer tensor cores, and the expansion of the same packed matrix to dense
// f16 (gemv_dequantize_f16). The layout is described in gq_gemv_layout.h; the kernel streams it once
// from HBM.
//
// Work split (a decode matrix of 4096 rows is only 256 tiles: the k dimension is split too)
// - A tile is 16 rows, one warp's (swiglu: tile t of gate and tile t of up, R = 2). An "item" is
//   kWarps = 8 consecutive tiles (128 rows) of one matrix, one block's; the items of up to 3 matrices
//   form one index space (matrix 0's, then 1's...), so a block stages x with one matrix's perm.
// - Each item is cut along k into KS blocks: block ks covers chunks [ks cpb, (ks + 1) cpb), and each
//   of its warps streams those chunks of its own tile(s) (every warp load: 512 contiguous bytes).
//   KS depends only on the shape and the SM count (pick_split), never on m.
// - A batch is U chunks of each of the R tiles with their scale records. The first batch is issued
//   before griddepcontrol.wait (PDL: weights are never written by kernels), and each later batch
//   is issued before the previous one is multiplied.
//
// x in three signed bytes. After the wait the block stages its k-range of x once for its 8 tiles:
// each value gathered by perm (act-order), times the norm weight (folded RMSNorm), zero past n_in.
// Per "segment" (useg units of 32 columns, <= 128 columns, never across a group) and x row, with
// s = max |x| / 127: x = s q0 + (s / 254) q1 + (s / 254^2) q2 + e, q_p integers in [-127, 127] and
// |e| <= s / 254^2 / 2, ~23 bits of the segment's largest value. Piece p of x row i is B column
// n = p M + i (SR = 3M columns; M = 1, 2 fit one n8 block, whose columns >= SR only feed outputs
// never read), stored in shared memory as MMA B fragments, with the segment's (s_p, sum of q_p).
// The block also sums x^2 over its range, in a loop over columns that is the same for every m.
//
// Arithmetic (per k32 block and tile, per lane: 16 codes, one or two 32-bit words)
// - One or two bit operations per register give the codes as u8 (gq_gemv_layout.h); one
//   m16n8k32 u8 x s8 MMA per n8 block sums codes times q exactly in s32 over a segment ("run").
// - When the segment changes (and at the end), per row and column:
//   acc += (scale * s_p) * (run - zero * sum q_p), all exact but the two f32 roundings: W = scale *
//   (c - zero) as the reference has it. y of x row i = its three pieces' acc, added in order.
// - Every output element is a function of its own x row only (an MMA column does not see the
//   others), so row i of y is the same bits whatever m is.
// - Each warp's sums go through shared memory to one thread per (x row, item row). With KS = 1 that
//   thread applies the epilogue; otherwise the block writes its partial sums to scratch and the
//   last block of the item to arrive (a counter, reset by that block) adds the KS partials in ks
//   order (deterministic), zeroes them (one scratch serves launches of every shape: it must be all
//   zero between launches) and applies the epilogue: store / accumulate / swiglu, times 1/rms
//   under a folded norm.
// Instantiations: bits {2, 3, 4, 8} x M {1, 2, 4, 8, 16} (m rounded up; x rows >= m are zero,
// never stored) x {one tile, act-order, two tiles (swiglu)}, and one dequantize kernel per bits.
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

constexpr int kWarps = 8;  // warps of a block: one tile each, all on the block's k-range
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxM = 16;
constexpr int kRows = L::kTileRows;
constexpr int kItemRows = kWarps * kRows;  // rows of an item (a block's tiles)
static_assert(kRows == 16, "one MMA's rows per tile");
static_assert(kMaxM == kGemvMaxRows, "scratch is laid out for kGemvMaxRows rows of x");
// Chunk loads per lane per batch (U = loads / R chunks of each tile): 2 KiB per warp (int2/int3:
// 1 KiB, the same 256 columns; their 4 records per chunk would spill), twice that in flight while a
// batch is multiplied and the next one loads.
constexpr int loads_of(int bits) { return bits == 2 || bits == 3 ? 2 : 4; }

// Occupancy asked of ptxas, in blocks of 256 threads per SM (2: <= 128 registers, 1: <= 255). The
// kernels need 89-128 registers, M = 16 up to 207 (ptxas -v, sm_90a, 2026-11-22; <4, 8, 2> spills 24 bytes).
constexpr int min_blocks_of(int m) { return m == 16 ? 1 : 2; }
constexpr int kBlocksPerSm = 2;  // resident blocks per SM: the k-split fills one wave of them
// Columns a block stages at most (bounds the staged x: M = 16 takes 2 KiB per 32 columns).
constexpr int kMaxStagedCols = 2048;

// One matrix: its sections on the device and its output.
struct Mat {
  const uint4* codes = nullptr;
  const uint2* hi = nullptr;  // int3 only
  const uint2* recs = nullptr;  // [tiles][groups][8] pairs (row g, row g + 8)
  const int32_t* perm = nullptr;  // act-order only
  float* y = nullptr;
  int64_t n_out = 0;
  int64_t item0 = 0;  // its first item (an item never spans two matrices: one perm per block)
};

// The shape shared by the matrices of a launch.
struct Geo {
  int n_in, chunks, groups, units;
  int useg;         // units per segment of x statistics (<= 4, divides the group's units)
  uint32_t gmagic;  // group of unit u: div_magic(u, gmagic)
  uint32_t smagic;  // segment of unit u: div_magic(u, smagic)
};

struct Args {
  Mat mat[3];
  int n_mats;
  Geo g;
  int64_t items;  // kWarps tiles each, matrix by matrix (swiglu: the gate's tiles)
  int ks, cpb;           // blocks per item (k-split), chunks per block
  const float* x;
  const float* norm;  // folded RMSNorm weight [n_in], or null
  float eps;
  int m;
  Epilogue epi;
  float* partial;      // ks > 1: [items][ks][R][kMaxM][kItemRows] partial sums, then [items][ks][kMaxM] x^2 sums
  unsigned* counters;  // ks > 1: [items] blocks arrived
};

template <int BITS>
struct Codec {
  static constexpr int kUnits = L::kblocks(BITS);     // k32 blocks (units) per chunk
  static constexpr int kSpan = L::chunk_span(BITS);   // columns per chunk
  static constexpr bool kHi = BITS == 3;
};

struct Chunk {
  uint4 lo;
  uint2 hi;
};

__device__ __forceinline__ uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// The four u8 A registers of k32 block kb of a chunk (kb a compile-time constant after unrolling:
// every shift and mask folds).
template <int BITS>
__device__ __forceinline__ void regs_of(const Chunk& ch, int kb, uint32_t (&a)[4]) {
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const uint32_t w = word_of(ch.lo, L::lo_word(BITS, kb, reg));
    if constexpr (BITS == 8) {
      a[reg] = w;
    } else if constexpr (BITS == 4) {
      a[reg] = (reg % 2 ? w >> 4 : w) & 0x0f0f0f0fu;
    } else {
      a[reg] = (w >> 2 * reg) & 0x03030303u;
      if constexpr (BITS == 3) {
        const uint32_t h = L::hi_word(kb) ? ch.hi.y : ch.hi.x;
        a[reg] |= __funnelshift_r(h, h, L::hi_rot(kb, reg)) & 0x04040404u;
      }
    }
  }
}

// d += A (16 x 32, u8, row-major fragment) * B (32 x 8, s8, column fragment), s32 (exact).
__device__ __forceinline__ void mma(int (&d)[4], const uint32_t (&a)[4], uint2 b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

__device__ __forceinline__ float scale_of(uint32_t rec) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(rec & 0xffffu)));
}
__device__ __forceinline__ float zero_of(uint32_t rec) { return static_cast<float>(rec >> 16); }

// u / d by a multiplier (magic = ceil(2^32 / d), or 0 for d = 1): exact for u < 2^21 (kMaxNIn).
__device__ __forceinline__ int div_magic(int u, uint32_t magic) {
  return magic ? static_cast<int>(__umulhi(static_cast<uint32_t>(u), magic)) : u;
}

// One warp's tile (swiglu: gate's and up's): R lane pointers into codes / hi / recs, the output of each.
template <int R>
struct Tiles {
  const uint4* cp[R];
  const uint2* hp[R];
  const uint2* rp[R];
  const int32_t* perm;
  float* y[R];
  int64_t n_out[R];
  int64_t tile[R];
};

// p itself, but the compiler no longer sees it as base + offsets: without this it re-associates
// every record address into (offset + group) * 8 + base, two 64-bit adds per load instead of one
// wide multiply-add.
template <typename T>
__device__ __forceinline__ const T* opaque(const T* p) {
  asm("" : "+l"(p));
  return p;
}

__device__ __forceinline__ Mat mat_of(const Args& a, int j) { return j == 0 ? a.mat[0] : j == 1 ? a.mat[1] : a.mat[2]; }

// The matrix of item `item` (R = 2: gate and up, both from matrix 0's item numbering).
__device__ __forceinline__ int mat_index(const Args& a, int64_t item) {
  return (a.n_mats > 1 && item >= a.mat[1].item0) + (a.n_mats > 2 && item >= a.mat[2].item0);
}

// Tile w of item `item` (lane pointers for `lane`); `valid` is false past the matrix's last tile.
template <int BITS, int R>
__device__ __forceinline__ Tiles<R> tiles_of(const Args& a, int64_t item, int w, int lane, bool& valid) {
  Tiles<R> t;
  const int j0 = R == 2 ? 0 : mat_index(a, item);
  const int64_t tile = (item - mat_of(a, j0).item0) * kWarps + w;
  const int64_t tiles = (mat_of(a, j0).n_out + kRows - 1) / kRows;
  valid = tile < tiles;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const Mat mt = mat_of(a, R == 2 ? r : j0);
    t.tile[r] = valid ? tile : tiles - 1;
    const int64_t slot0 = t.tile[r] * a.g.chunks * 32 + lane;
    t.cp[r] = mt.codes + slot0;
    t.hp[r] = Codec<BITS>::kHi ? mt.hi + slot0 : nullptr;
    t.rp[r] = opaque(mt.recs + t.tile[r] * a.g.groups * 8 + lane / 4);
    t.y[r] = mt.y;
    t.n_out[r] = mt.n_out;
    if (r == 0) t.perm = mt.perm;
  }
  return t;
}

// One batch of a warp: U chunks of each of the R tiles and the records (rows g, g + 8) of their units.
template <int BITS, int R, int U>
struct Batch {
  Chunk v[R][U];
  uint2 rec[R][U][Codec<BITS>::kUnits];
};

// Issues the batch at chunk b of this warp's range [.., end).
template <int BITS, int R, int U>
__device__ __forceinline__ void load_batch(const Geo& g, const Tiles<R>& t, int b, int end, Batch<BITS, R, U>& bt) {
  using C = Codec<BITS>;
  // The batch's lane pointers once (one wide multiply-add each); chunk u is then an immediate offset.
  const uint4* cb[R];
  const uint2* hb[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    cb[r] = t.cp[r] + static_cast<uint32_t>(b) * 32u;
    hb[r] = C::kHi ? t.hp[r] + static_cast<uint32_t>(b) * 32u : nullptr;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = b + u;
    if (c < end)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        bt.v[r][u].lo = ld_stream(cb[r] + u * 32);
        if constexpr (C::kHi) bt.v[r][u].hi = ld_stream(hb[r] + u * 32);
#pragma unroll
        for (int k = 0; k < C::kUnits; ++k) {
          const int unit = min(c * C::kUnits + k, g.units - 1);  // a padding unit: any record
          bt.rec[r][u][k] = __ldg(t.rp[r] + static_cast<uint32_t>(div_magic(unit, g.gmagic)) * 8u);
        }
      }
  }
}

// Per lane and tile: the f32 sums of the finished runs (acc) and the exact s32 sums of the current
// run (run), as MMA C fragments per n8 block: e = 0, 1 row g, columns 2t, 2t + 1; e = 2, 3 row g + 8.
template <int NB>
struct Sums {
  float acc[NB][4];
  int run[NB][4];
  float scale[2], zero[2];  // the run's group records of rows g, g + 8
};

// acc += (scale * s_p) * (run - zero * sum q_p), run = 0. st[nb]: the run's segment statistics of
// columns 2t, 2t + 1 of n8 block nb: (s_p, sum q_p) of each.
template <int NB>
__device__ __forceinline__ void fold(Sums<NB>& s, const float4 (&st)[NB]) {
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float sx = e % 2 ? st[nb].z : st[nb].x, qs = e % 2 ? st[nb].w : st[nb].y;
      const float d = fmaf(-s.zero[e / 2], qs, static_cast<float>(s.run[nb][e]));
      s.acc[nb][e] = fmaf(s.scale[e / 2] * sx, d, s.acc[nb][e]);
      s.run[nb][e] = 0;
    }
}

__device__ __forceinline__ void start_run(float (&scale)[2], float (&zero)[2], uint2 rec) {
  scale[0] = scale_of(rec.x);
  scale[1] = scale_of(rec.y);
  zero[0] = zero_of(rec.x);
  zero[1] = zero_of(rec.y);
}

// The epilogue of x row i for row `row` of tile t: v[r] the finished sums of tile r.
template <int R>
__device__ __forceinline__ void finish(const Args& a, const Tiles<R>& t, int row, int i, float (&v)[R], float ss) {
  if (a.norm != nullptr) {
    const float inv = inv_rms_of(ss, a.g.n_in, a.eps);
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] *= inv;
  }
  const int64_t orow = t.tile[0] * kRows + row;
  if (orow >= t.n_out[0]) return;
  float* p = t.y[0] + i * t.n_out[0] + orow;
  if constexpr (R == 2) {  // swiglu: gate, up
    *p = v[0] / (1.f + expf(-v[0])) * v[1];
  } else {
    *p = a.epi == Epilogue::accumulate ? *p + v[0] : v[0];
  }
}

// Four s32 in [-127, 127] as s8 bytes 0..3 of a word.
__device__ __forceinline__ uint32_t pack_s8(const int (&q)[4]) {
  const uint32_t lo = __byte_perm(static_cast<uint32_t>(q[0]), static_cast<uint32_t>(q[1]), 0x0040);
  const uint32_t hi = __byte_perm(static_cast<uint32_t>(q[2]), static_cast<uint32_t>(q[3]), 0x0040);
  return __byte_perm(lo, hi, 0x5410);
}

// Shared memory of a block (dynamic): the segment statistics, the staged x, then the x^2 sums.
//   st  float2 [segments][SC]: (s_p, sum of q_p) of B column n (SC = 8 NB; columns >= SR zero)
//   xs  uint2 [units][SR][4]: k32 block (unit) u of the range, B column n, quad t: (b0, b1)
//   ss  float [segments][M]: the sum of x^2 of each x row over the segment's columns of the range
// A range of n units touches at most n segments: every array is sized by the units.
template <int M>
struct Smem {
  static constexpr int SR = 3 * M;
  static constexpr int NB = (SR + 7) / 8;
  static constexpr int SC = 8 * NB;
  static size_t bytes(int units) { return static_cast<size_t>(units) * (SC * 8 + M * 4 + SR * 4 * 8); }
};

// Stages x[0..m)[col0 .. col0 + cols) (see the file comment): warp w takes (segment, x row) items
// w, w + kWarps, ...; lane l the segment's columns 4l .. 4l + 3 (one B register of each piece).
// The loads of kStage items are issued before any of them is quantized (each needs a warp-wide max).
template <int M, bool PERM>
__device__ __forceinline__ void stage_x(const Args& a, const int32_t* perm, int col0, int cols, int seg0,
                                        int nseg, float2* st, float* ss, uint32_t* xs) {
  using S = Smem<M>;
  constexpr int kStage = M == 16 ? 8 : 4;  // M = 16 has 255 registers (min_blocks_of)
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int n_in = a.g.n_in, F = a.g.useg * L::kUnitCols, items = nseg * M;
  for (int it0 = warp; it0 < items; it0 += kWarps * kStage) {
    float v[kStage][4], sq[kStage];  // x times the norm weight; x^2 summed
#pragma unroll
    for (int k = 0; k < kStage; ++k) {
      const int it = it0 + k * kWarps, i = it % M, col = (seg0 + it / M) * F + 4 * lane;
      sq[k] = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) v[k][e] = 0.f;
      // n_in is a multiple of 32: all four columns or none
      if (it < items && 4 * lane < F && col >= col0 && col < col0 + cols && i < a.m && col < n_in) {
        const float* xr = a.x + static_cast<int64_t>(i) * n_in;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int src = PERM ? __ldg(perm + col + e) : col + e;
          v[k][e] = xr[src];
          sq[k] = fmaf(v[k][e], v[k][e], sq[k]);
          if (a.norm != nullptr) v[k][e] *= __ldg(a.norm + src);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kStage; ++k) {
      const int it = it0 + k * kWarps;
      if (it >= items) break;  // warp-uniform
      const int sr = it / M, i = it % M, col = (seg0 + sr) * F + 4 * lane;
      const bool mine = 4 * lane < F && col >= col0 && col < col0 + cols;
      float amax = fmaxf(fmaxf(fabsf(v[k][0]), fabsf(v[k][1])), fmaxf(fabsf(v[k][2]), fabsf(v[k][3])));
      // max of non-negative floats = max of their bits: one warp-wide integer reduction
      amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));
      const float sqs = detail::warp_sum(sq[k]);
      if (lane == 0) ss[sr * M + i] = sqs;
      float s = amax * (1.f / 127.f), inv = amax > 0.f ? 127.f / amax : 0.f;
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        // |v * inv| <= 127 (1 + 2^-20) (|v| <= max, then |residual| <= s / 2 up to rounding), so the
        // nearest integer is within [-127, 127]
        int q[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          q[e] = __float2int_rn(v[k][e] * inv);
          v[k][e] = fmaf(-static_cast<float>(q[e]), s, v[k][e]);  // what the next piece carries
        }
        const uint32_t word = pack_s8(q);
        const int n = p * M + i;
        if (mine) {
          const int u = (col - col0) / L::kUnitCols, cc = col % L::kUnitCols;
          xs[((u * S::SR + n) * 4 + cc % 16 / 4) * 2 + cc / 16] = word;
        }
        const int sum = __reduce_add_sync(0xffffffffu, __dp4a(static_cast<int>(word), 0x01010101, 0));
        if (lane == 0) st[sr * S::SC + n] = make_float2(s, static_cast<float>(sum));
        s *= 1.f / 254.f;
        inv *= 254.f;
      }
    }
  }
  if constexpr (S::SC > S::SR) {  // the padding columns' statistics: zero
    constexpr int P = S::SC - S::SR;
    for (int k = static_cast<int>(threadIdx.x); k < nseg * P; k += kThreads)
      st[k / P * S::SC + S::SR + k % P] = make_float2(0.f, 0.f);
  }
}

// PERM: act-order (x gathered by the matrix's perm). R = 2: swiglu over two tiles per warp.
template <int BITS, int M, int R, bool PERM>
__global__ void __launch_bounds__(kThreads, min_blocks_of(M)) gemv_kernel(const Args a) {
  using C = Codec<BITS>;
  using S = Smem<M>;
  constexpr int U = loads_of(BITS) / R;
  constexpr int SR = S::SR, NB = S::NB, SC = S::SC;
  extern __shared__ float4 smem[];
  __shared__ float part[kWarps][R][M][kRows];
  __shared__ float ss_blk[M];  // the block's x^2 sum of each x row (folded norm)
  __shared__ bool last;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, tq = lane & 3;
  const int64_t item = blockIdx.x / a.ks;
  const int ks = static_cast<int>(blockIdx.x % a.ks);
  detail::pdl_release();
  bool has_tile;  // warp-uniform
  const Tiles<R> t = tiles_of<BITS, R>(a, item, warp, lane, has_tile);
  const int begin = ks * a.cpb, end = min(begin + a.cpb, a.g.chunks);  // the block's chunks
  const int span = a.cpb * C::kSpan, col0 = begin * C::kSpan;           // its staged columns
  const int unit0 = begin * C::kUnits;
  const int seg0 = div_magic(unit0, a.g.smagic);
  const int nseg = div_magic(unit0 + a.cpb * C::kUnits - 1, a.g.smagic) - seg0 + 1;
  float2* const st = reinterpret_cast<float2*>(smem);
  uint32_t* const xs = reinterpret_cast<uint32_t*>(smem) + a.cpb * C::kUnits * SC * 2;
  float* const ss_seg = reinterpret_cast<float*>(xs + a.cpb * C::kUnits * SR * 4 * 2);

  // The first two batches are issued before x is staged; then, while one batch is multiplied, the
  // next one loads into the buffer the other one is not using (nothing is copied between them).
  Batch<BITS, R, U> cur, nxt;
  if (has_tile) load_batch<BITS, R, U>(a.g, t, begin, end, cur);
  if (has_tile && begin + U < end) load_batch<BITS, R, U>(a.g, t, begin + U, end, nxt);
  detail::pdl_wait();  // x, y and the scratch belong to the previous kernel until here

  stage_x<M, PERM>(a, t.perm, col0, span, seg0, nseg, st, ss_seg, xs);
  __syncthreads();
  // The block's x^2 sum of each row: its segments' sums in order (the same whatever m).
  if (a.norm != nullptr && threadIdx.x < M) {
    float ss = 0.f;
    for (int sr = 0; sr < nseg; ++sr) ss += ss_seg[sr * M + threadIdx.x];
    ss_blk[threadIdx.x] = ss;
  }

  Sums<NB> sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[r].acc[nb][e] = 0.f, sum[r].run[nb][e] = 0;
  int run_seg = -1;
  // This lane's B-fragment rows n = 8 nb + g of the staged x: columns n >= SR read column n % SR
  // instead (they only feed output columns never read), so the loads need no lane-dependent branch.
  const uint2* xs_lane[NB];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int n = 8 * nb + g;
    xs_lane[nb] = reinterpret_cast<const uint2*>(xs) + (n < SR ? n : n % SR) * 4 + tq;
  }
  // Folds every tile's run with the statistics of segment run_seg.
  auto fold_all = [&]() {
    float4 stv[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
      stv[nb] = *reinterpret_cast<const float4*>(st + (run_seg - seg0) * SC + 8 * nb + 2 * tq);
#pragma unroll
    for (int r = 0; r < R; ++r) fold(sum[r], stv);
  };
  // Multiplies batch bt, which holds chunks [b, b + U) of the range.
  auto multiply = [&](const Batch<BITS, R, U>& bt, int b) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = b + u;
      if (c >= end) break;  // warp-uniform
#pragma unroll
      for (int k = 0; k < C::kUnits; ++k) {
        // A padding unit past n_in (the last chunk's second half) runs like any other: its codes
        // and its staged x are zero and its record is a real one (load_batch), so it adds zeros.
        const int unit = c * C::kUnits + k;
        const int seg = div_magic(unit, a.g.smagic);
        if (seg != run_seg) {  // warp-uniform
          if (run_seg >= 0) fold_all();
#pragma unroll
          for (int r = 0; r < R; ++r) start_run(sum[r].scale, sum[r].zero, bt.rec[r][u][k]);
          run_seg = seg;
        }
        uint2 bf[NB];
        const int off = (unit - unit0) * SR * 4;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) bf[nb] = xs_lane[nb][off];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t av[4];
          regs_of<BITS>(bt.v[r][u], k, av);
#pragma unroll
          for (int nb = 0; nb < NB; ++nb) mma(sum[r].run[nb], av, bf[nb]);
        }
      }
    }
  };
#pragma unroll 1
  for (int b = begin; has_tile && b < end; b += 2 * U) {
    multiply(cur, b);
    if (b + 2 * U < end) load_batch<BITS, R, U>(a.g, t, b + 2 * U, end, cur);
    if (b + U >= end) break;
    multiply(nxt, b + U);
    if (b + 3 * U < end) load_batch<BITS, R, U>(a.g, t, b + 3 * U, end, nxt);
  }
  if (run_seg >= 0) fold_all();

  // Lane (g, t) holds columns n = 8 nb + 2t + {0, 1} of rows g, g + 8. y of x row i is the sum of
  // columns i, M + i, 2M + i (pieces 0, 1, 2), added in that order: one pass per piece.
#pragma unroll
  for (int p = 0; p < 3; ++p) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = 8 * nb + 2 * tq + e % 2;
          if (n / M == p && n < SR) {
            float& dst = part[warp][r][n % M][g + 8 * (e / 2)];
            dst = p == 0 ? sum[r].acc[nb][e] : dst + sum[r].acc[nb][e];
          }
        }
    __syncwarp();
  }
  __syncthreads();
  // One thread per (x row i, row of the item): o = i * kItemRows + warp * 16 + row. The block's x^2
  // sum of row i: its warps' parts in order.
  // ks > 1: this item's partial sums [ks][R][kMaxM][kItemRows] and x^2 sums [ks][kMaxM] in scratch.
  const int64_t sums = a.items * a.ks * (R * kMaxM * kItemRows);
  float* const partial = a.ks == 1 ? nullptr : a.partial + item * a.ks * (R * kMaxM * kItemRows);
  float* const ss_out = a.ks == 1 ? nullptr : a.partial + sums + item * a.ks * kMaxM;
  const bool has_norm = a.norm != nullptr;
  auto block_ss = [&](int i) { return has_norm ? ss_blk[i] : 0.f; };
  for (int o = static_cast<int>(threadIdx.x); o < a.m * kItemRows; o += kThreads) {
    const int i = o / kItemRows, w = o % kItemRows / kRows, row = o % kRows;
    float val[R];
#pragma unroll
    for (int r = 0; r < R; ++r) val[r] = part[w][r][i][row];
    if (a.ks == 1) {
      bool valid;
      const Tiles<R> tw = tiles_of<BITS, R>(a, item, w, 0, valid);
      if (valid) finish<R>(a, tw, row, i, val, block_ss(i));
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) __stcg(partial + (ks * R + r) * (kMaxM * kItemRows) + o, val[r]);
      if (o % kItemRows == 0) __stcg(ss_out + ks * kMaxM + i, block_ss(i));
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
  constexpr int kBurst = 8;  // partial sums loaded at once (independent L2 reads), then added in order
  for (int o = static_cast<int>(threadIdx.x); o < a.m * kItemRows; o += kThreads) {
    const int i = o / kItemRows, w = o % kItemRows / kRows, row = o % kRows;
    float val[R], ss = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) val[r] = 0.f;
    for (int k0 = 0; k0 < a.ks; k0 += kBurst) {
      float pv[kBurst][R], sv[kBurst];
#pragma unroll
      for (int d = 0; d < kBurst; ++d) {
        const int k = k0 + d < a.ks ? k0 + d : a.ks - 1;
#pragma unroll
        for (int r = 0; r < R; ++r) pv[d][r] = __ldcg(partial + (k * R + r) * (kMaxM * kItemRows) + o);
        sv[d] = has_norm ? __ldcg(ss_out + k * kMaxM + i) : 0.f;
      }
#pragma unroll
      for (int d = 0; d < kBurst; ++d)
        if (k0 + d < a.ks) {
#pragma unroll
          for (int r = 0; r < R; ++r) val[r] += pv[d][r];
          ss += sv[d];
        }
    }
    for (int k = 0; k < a.ks; ++k)
#pragma unroll
      for (int r = 0; r < R; ++r) __stcg(partial + (k * R + r) * (kMaxM * kItemRows) + o, 0.f);
    bool valid;
    const Tiles<R> tw = tiles_of<BITS, R>(a, item, w, 0, valid);
    if (valid) finish<R>(a, tw, row, i, val, ss);
  }
  __syncthreads();  // every thread has read the x^2 sums before they are zeroed
  for (int o = static_cast<int>(threadIdx.x); o < a.ks * a.m; o += kThreads)
    __stcg(ss_out + (o / a.m) * kMaxM + o % a.m, 0.f);
}

// Dense f16 [n_out][n_in] (original column order): one thread per stored chunk (16 rows' lane l).
template <int BITS>
__global__ void __launch_bounds__(256) dequant_kernel(const Mat mt, const Geo g, int64_t slots, __half* out) {
  using C = Codec<BITS>;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < slots;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tc = idx / 32, tile = tc / g.chunks;
    const int c = static_cast<int>(tc % g.chunks), lane = static_cast<int>(idx % 32);
    Chunk ch;
    ch.lo = mt.codes[idx];
    if constexpr (C::kHi) ch.hi = mt.hi[idx];
#pragma unroll
    for (int kb = 0; kb < C::kUnits; ++kb) {
      const int unit = c * C::kUnits + kb;
      if (unit >= g.units) continue;
      const uint2 rec = mt.recs[(tile * g.groups + div_magic(unit, g.gmagic)) * 8 + lane / 4];
      uint32_t av[4];
      regs_of<BITS>(ch, kb, av);
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const int64_t row = tile * kRows + L::row_of(lane, reg);
        if (row >= mt.n_out) continue;
        const uint32_t rr = reg % 2 ? rec.y : rec.x;
        const float s = scale_of(rr), z = zero_of(rr);
        __half* orow = out + row * g.n_in;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = unit * L::kUnitCols + L::col_of(lane, reg, i);
          // s * (c - zero) is exact in f32: one rounding to f16.
          const __half w = __float2half_rn(s * (static_cast<float>((av[reg] >> 8 * i) & 0xffu) - z));
          orow[mt.perm == nullptr ? col : mt.perm[col]] = w;
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
  mt.recs = reinterpret_cast<const uint2*>(base + g.recs);
  mt.perm = w.has_perm ? reinterpret_cast<const int32_t*>(base + g.perm) : nullptr;
  mt.n_out = w.n_out;
  geo.n_in = static_cast<int>(w.n_in);
  geo.chunks = static_cast<int>(g.chunks);
  geo.groups = static_cast<int>(g.groups);
  geo.units = static_cast<int>(g.units);
  auto magic = [](uint64_t d) { return d == 1 ? 0u : static_cast<uint32_t>(((uint64_t{1} << 32) + d - 1) / d); };
  const int upg = w.fmt.group / L::kUnitCols;  // units per group
  geo.useg = 4;  // the largest divisor of upg up to 4 units (128 columns)
  while (upg % geo.useg != 0) --geo.useg;
  geo.gmagic = magic(static_cast<uint64_t>(upg));
  geo.smagic = magic(static_cast<uint64_t>(geo.useg));
  return Status::ok();
}

// The k-split of `items` items over `chunks` chunks of `cols` columns: as many k-slices per item as
// fill one wave of resident blocks (kBlocksPerSm per SM: a second, partial wave runs at a fraction
// of the bandwidth; on an H100 one wave made a Llama-2-7B int4 decode 17% faster than ~1.3 waves),
// at least enough that a block stages <= kMaxStagedCols columns, while every warp keeps at least
// one full batch (`loads` chunks). Depends on the shape and the device only, never on m.
struct Split {
  int ks, cpb;
};
Split pick_split(int64_t items, int chunks, int cols, int loads, int sms) {
  const int64_t max_ks = std::max(1, chunks / loads);
  static const int per_sm = [] {  // LITHE_GEMV_BLOCKS_PER_SM: a tuning knob for benchmarks
    const char* e = std::getenv("LITHE_GEMV_BLOCKS_PER_SM");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v > 0 ? v : kBlocksPerSm;
  }();
  const int64_t want = std::max<int64_t>(int64_t{per_sm} * sms / items,
                                         detail::ceil_div(int64_t{chunks} * cols, kMaxStagedCols));
  Split sp;
  sp.ks = static_cast<int>(std::clamp<int64_t>(want, 1, max_ks));
  sp.cpb = static_cast<int>(detail::ceil_div(chunks, sp.ks));
  sp.ks = static_cast<int>(detail::ceil_div(chunks, sp.cpb));  // no empty blocks
  return sp;
}

template <int BITS, int M, int R, bool PERM>
Status launch(const Args& a, Stream s) {
  static std::atomic<uint64_t> opted{0};
  auto* kernel = gemv_kernel<BITS, M, R, PERM>;
  const size_t smem = Smem<M>::bytes(a.cpb * Codec<BITS>::kUnits);
  LITHE_TRY(detail::allow_smem(kernel, opted, smem, "gq gemv_kernel"));
  detail::launch_with_pdl(detail::pdl_enabled(true), kernel, dim3(static_cast<unsigned>(a.items * a.ks)),
                          dim3(kThreads), smem, s, a);
  return detail::launched("gq gemv_kernel");
}

template <int BITS, int R, bool PERM>
Status launch_m(const Args& a, Stream s) {
  if (a.m == 1) return launch<BITS, 1, R, PERM>(a, s);
  if (a.m == 2) return launch<BITS, 2, R, PERM>(a, s);
  if (a.m <= 4) return launch<BITS, 4, R, PERM>(a, s);
  if (a.m <= 8) return launch<BITS, 8, R, PERM>(a, s);
  return launch<BITS, 16, R, PERM>(a, s);
}

template <int BITS>
Status launch_kind(const Args& a, Stream s) {
  if (a.epi == Epilogue::swiglu) return launch_m<BITS, 2, false>(a, s);
  if (a.mat[0].perm != nullptr) return launch_m<BITS, 1, true>(a, s);
  return launch_m<BITS, 1, false>(a, s);
}

// Tiles and items of a launch (swiglu: the gate's tiles), its split and its scratch: [items] u32
// counters (padded to 256 bytes), then the partial sums (Args::partial); none when ks == 1.
struct Plan {
  int64_t items = 0;
  Split split{1, 1};
  int64_t counter_bytes = 0, scratch_bytes = 0;
};
Plan plan_of(const GemvOut* outs, int n_outs, Epilogue e, int sms) {
  Plan p;
  const int R = e == Epilogue::swiglu ? 2 : 1;
  for (int j = 0; j < (R == 2 ? 1 : n_outs); ++j)
    p.items += detail::ceil_div(detail::ceil_div(outs[j].w->n_out, L::kTileRows), kWarps);
  const PackedWeight& w = *outs[0].w;
  const L::Geometry g = L::geometry(w.fmt, w.n_out, w.n_in, w.has_perm);
  p.split = pick_split(p.items, static_cast<int>(g.chunks), L::chunk_span(w.fmt.bits), loads_of(w.fmt.bits), sms);
  if (p.split.ks > 1) {
    p.counter_bytes = (p.items * 4 + 255) / 256 * 256;
    p.scratch_bytes = p.counter_bytes + p.items * p.split.ks * (R * kMaxM * kItemRows + kMaxM) * 4;
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
  // x and the norm weight are read as column pairs (float2; n_in is even).
  if (x == nullptr || !aligned(x, 8)) return bad_arg(f + "x = " + ptr_str(x) + " is null or not 8-byte aligned");
  if (norm.w != nullptr && !(norm.eps >= 0.0f))
    return bad_arg(f + "norm.eps = " + std::to_string(norm.eps) + " must be >= 0");
  if (norm.w != nullptr && !aligned(norm.w, 8))
    return bad_arg(f + "norm.w = " + ptr_str(norm.w) + " is not 8-byte aligned");
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
    item0 += detail::ceil_div(detail::ceil_div(outs[j].w->n_out, L::kTileRows), kWarps);
  }
  const int64_t need = p.scratch_bytes;
  if (need > 0 && (scratch == nullptr || scratch_bytes < need || !aligned(scratch, 256)))
    return bad_arg(f + "scratch " + ptr_str(scratch) + " of " + std::to_string(scratch_bytes) + " bytes: needs " +
                   std::to_string(need) + " bytes, 256-byte aligned and zeroed (gemv_scratch_bytes)");
  a.n_mats = n_outs;
  a.items = p.items;
  a.ks = p.split.ks;
  a.cpb = p.split.cpb;
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
  const int64_t slots = detail::ceil_div(w.n_out, L::kTileRows) * g.chunks * 32;
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

// Group-quantized matrix-vector products for decode (cuda_gq.h: gemv, gemv_linear), batch
// m <= kGemvMaxRows on tensor cores, and the expansion of the same packed matrix to dense f16
// (gemv_dequantize_f16). The layout is described in gq_gemv_layout.h; the kernel streams it once
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
// - After the wait the block stages its k-range of x once for its 8 tiles, into shared memory as MMA
//   B fragments: each value gathered by perm (act-order), times the norm weight (folded RMSNorm),
//   zero past n_in, and split into f16 hi = f16(x) and lo = f16(x - hi), so hi + lo carries ~22
//   bits of x. (Staging per 16-row tile instead cost more instructions than the weights: ncu, H100.)
//   The block also sums x^2 over its range, in a loop over columns that is the same for every m.
// - Fragment rows n of B: n < M is hi of x row n, M <= n < 2M lo of x row n - M (x rows >= m are
//   zero). M <= 4: one n8 block (an M = 1 MMA wastes 6 of its 8 columns, which costs nothing here:
//   the tensor cores are idle otherwise); M = 8, 16: 2M / 8 blocks.
// - Each warp's sums go through shared memory to one thread per (x row, item row). With KS = 1 that
//   thread applies the epilogue; otherwise the block writes its partial sums to scratch and the
//   last block of the item to arrive (a counter, reset by that block) adds the KS partials in ks
//   order (deterministic), zeroes them (one scratch serves launches of every shape: it must be all
//   zero between launches) and applies the epilogue: store / accumulate / swiglu, times 1/rms
//   under a folded norm. rope_kv (q, k, v): the item's finished rows go to shared memory first, then
//   pair by pair through the rotation into y and the KV cache (rope.cuh, as the matvec kernel).
//
// Arithmetic (per k16 block and tile, per lane: 8 codes, one 32-bit word for int4)
// - (word & mask) | 0x64006400 (one LOP3; int8: one PRMT) makes an f16 pair 1024 + c * 2^(b*j);
//   one HFMA2 with (2^-(b*j), -(1024 * 2^-(b*j) + zero)) gives the exact integers c - zero in the
//   A register the MMA reads: about 9 instructions for 8 int4 weights, then one MMA per n8 block.
// - The MMA sums (c - zero) * x exactly-rounded into f32 per group run; when the group changes (and
//   at the end) acc += scale * run, per row: W = scale * (c - zero) as the reference has it, x to
//   ~22 bits, only the order of the f32 sums differs.
// - Every output element is a function of its own x row only (an MMA column does not see the
//   others; hi and lo are accumulated apart and added last), so row i of y is the same bits
//   whatever m is.
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
#include "kernels/cuda/rope.cuh"
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
static_assert(kItemRows == kGemvItemRows, "cuda_gq.h names the item's rows");
static_assert(kRows == 16, "one MMA's rows per tile");
static_assert(kMaxM == kGemvMaxRows, "scratch is laid out for kGemvMaxRows rows of x");
// Chunk loads per lane per batch (U = loads / R chunks of each tile): 2 KiB per warp (int2/int3:
// 1 KiB, the same 256 columns; their 4 records per chunk would spill), twice that in flight while a
// batch is multiplied and the next one loads.
constexpr int loads_of(int bits) { return bits == 2 || bits == 3 ? 2 : 4; }

// Occupancy asked of ptxas, in blocks of 256 threads per SM (2: <= 128 registers, 1: <= 255). The
// kernels need 89-128 registers; M = 16 fits 128 with a 24-28 byte spill (ptxas -v, sm_90a,
// 2026-11-22), except swiglu (R = 2), which would spill 200-500 bytes and takes up to 207.
constexpr int min_blocks_of(int m, int r) { return m == 16 && r == 2 ? 1 : 2; }
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
  uint32_t gmagic;  // group of unit u: umulhi(u, gmagic), or u when 0 (group 32)
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
  MatvecRope rope;     // rope_kv only
  float* partial;      // ks > 1: [items][ks][R][kMaxM][kItemRows] partial sums, then [items][ks][kMaxM] x^2 sums
  unsigned* counters;  // ks > 1: [items] blocks arrived
};

template <int BITS>
struct Codec {
  static constexpr int kBlocks = L::kblocks(BITS);       // k16 blocks per chunk
  static constexpr int kSpan = L::chunk_span(BITS);      // columns per chunk
  static constexpr int kUnits = kSpan / L::kUnitCols;    // scale records per chunk and row
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
// d += A (16 x 16, f16, row-major fragment) * B (16 x 8, f16, column fragment), f32.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// The HFMA2 addend of class j from a record: -(1024 / mult_j + zero) in both halves.
template <int BITS>
__device__ __forceinline__ uint32_t class_addend(uint32_t rec, int j) {
  const uint32_t z0 = __byte_perm(rec, 0, 0x3232);  // -(1024 + zero) in both halves
  return j == 0 ? z0 : hadd2(z0, pair_bits(1024.0 - 1024.0 / class_mult<BITS>(j)));
}

// The exact integers c - zero of pair q (an A register), given the addend of its class.
template <int BITS>
__device__ __forceinline__ uint32_t pair_values(const Chunk& ch, int q, uint32_t addend) {
  constexpr uint32_t magic = 0x64006400u;  // f16 1024 in both halves
  const int j = L::class_of_reg(BITS, q % 4);
  return hfma2(raw_pair<BITS>(ch, q, magic), pair_bits(1.0 / class_mult<BITS>(j)), addend);
}

__device__ __forceinline__ float scale_of(uint32_t rec) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(rec & 0xffffu)));
}

__device__ __forceinline__ int group_of(const Geo& g, int unit) {
  const uint32_t u = static_cast<uint32_t>(unit);
  return static_cast<int>(g.gmagic ? __umulhi(u, g.gmagic) : u);
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
          bt.rec[r][u][k] = __ldg(t.rp[r] + static_cast<uint32_t>(group_of(g, unit)) * 8u);
        }
      }
  }
}

// Per lane and tile: the f32 sums of the finished group runs (acc) and of the current run (run),
// as MMA C fragments per n8 block: c0, c1 row g, columns 2t, 2t + 1; c2, c3 row g + 8.
template <int NB>
struct Sums {
  float acc[NB][4];
  float run[NB][4];
  uint32_t add[4];  // HFMA2 addends of A registers 0..3 (row g / g + 8, class) for the run's group
  float scale[2];   // the run's scales of rows g, g + 8
};

template <int NB>
__device__ __forceinline__ void fold(Sums<NB>& s) {  // acc += scale * run, run = 0
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s.acc[nb][e] = fmaf(s.scale[e / 2], s.run[nb][e], s.acc[nb][e]);
      s.run[nb][e] = 0.f;
    }
}

template <int BITS, int NB>
__device__ __forceinline__ void start_run(Sums<NB>& s, uint2 rec) {
#pragma unroll
  for (int reg = 0; reg < 4; ++reg)
    s.add[reg] = class_addend<BITS>(reg & 1 ? rec.y : rec.x, L::class_of_reg(BITS, reg));
  s.scale[0] = scale_of(rec.x);
  s.scale[1] = scale_of(rec.y);
}

// The epilogue of x row i for row `row` of tile t: v[r] the finished sums of tile r.
// v times 1/rms of x row i (x^2 sum ss) under a folded norm.
template <int R>
__device__ __forceinline__ void apply_norm(const Args& a, float (&v)[R], float ss) {
  if (a.norm != nullptr) {
    const float inv = inv_rms_of(ss, a.g.n_in, a.eps);
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] *= inv;
  }
}

template <int R>
__device__ __forceinline__ void finish(const Args& a, const Tiles<R>& t, int row, int i, float (&v)[R], float ss) {
  apply_norm<R>(a, v, ss);
  const int64_t orow = t.tile[0] * kRows + row;
  if (orow >= t.n_out[0]) return;
  float* p = t.y[0] + i * t.n_out[0] + orow;
  if constexpr (R == 2) {  // swiglu: gate, up
    *p = v[0] / (1.f + expf(-v[0])) * v[1];
  } else {
    *p = a.epi == Epilogue::accumulate ? *p + v[0] : v[0];
  }
}

// V consecutive floats of the k-split's scratch (16-byte aligned when V = 4), read past L1 / zeroed.
template <int V>
__device__ __forceinline__ void ldcg_vec(const float* p, float (&out)[V]) {
  if constexpr (V == 4) {
    const float4 t = __ldcg(reinterpret_cast<const float4*>(p));
    out[0] = t.x, out[1] = t.y, out[2] = t.z, out[3] = t.w;
  } else {
    out[0] = __ldcg(p);
  }
}
template <int V>
__device__ __forceinline__ void stcg_zero_vec(float* p) {
  if constexpr (V == 4)
    __stcg(reinterpret_cast<float4*>(p), make_float4(0.f, 0.f, 0.f, 0.f));
  else
    __stcg(p, 0.f);
}

// rope_kv (R = 1): the item's finished rows fin[w][0][i][row] (row w * 16 + row of the item) for x
// rows i < m, rotated and stored pair by pair (detail::rope_rows: a head's pairs stay inside the
// item, head_dim dividing kItemRows).
template <int M>
__device__ __forceinline__ void rope_kv_item(const Args& a, int64_t item, const float (&fin)[kWarps][1][M][kRows]) {
  const int j = mat_index(a, item);
  const Mat mt = mat_of(a, j);
  const int64_t base = (item - mt.item0) * kItemRows;
  for (int o = static_cast<int>(threadIdx.x); o < a.m * (kItemRows / 2); o += kThreads) {
    const int i = o / (kItemRows / 2), f = 2 * (o % (kItemRows / 2));
    if (base + f >= mt.n_out) continue;
    const detail::RopeRows p = detail::rope_rows(a.rope, j, base + f);
    const int ra = static_cast<int>(p.ra - base), rb = static_cast<int>(p.rb - base);
    detail::rope_kv_pair_out(a.rope, j, p, i, mt.y, mt.n_out, fin[ra / kRows][0][i][ra % kRows],
                             fin[rb / kRows][0][i][rb % kRows]);
  }
}

// Stages x[0..m)[col0 .. col0 + span) as B fragments into xs (see gemv_kernel): thread s of the
// loop takes k16 blocks 2p, 2p + 1, x row i, quad t, loads its 8 values once (gathered by perm,
// times the norm weight; zero past n_in) and writes them as hi to fragment row i and as lo to
// fragment row M + i. Rows i in [m, M) get zeros.
template <int M, bool PERM>
__device__ __forceinline__ void stage_x(const Args& a, const int32_t* perm, int col0, int span, uint4* xs) {
  const int n_in = a.g.n_in;
  const int slots = span / 32 * M * 4;
  for (int s = static_cast<int>(threadIdx.x); s < slots; s += kThreads) {
    const int t = s & 3, i = (s >> 2) % M, p = (s >> 2) / M;
    uint32_t hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
    if (i < a.m) {
      const float* xr = a.x + static_cast<int64_t>(i) * n_in;
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // block 2p + e / 2, register e % 2 (columns + 8): 2 columns
        const int col = col0 + (2 * p + e / 2) * 16 + 2 * t + 8 * (e % 2);
        float v[2] = {0.f, 0.f};
        if (col < n_in) {  // n_in is even: both columns or neither
          if (PERM) {
            const int2 src = *reinterpret_cast<const int2*>(perm + col);
            v[0] = xr[src.x];
            v[1] = xr[src.y];
            if (a.norm != nullptr) v[0] *= __ldg(a.norm + src.x), v[1] *= __ldg(a.norm + src.y);
          } else {
            const float2 x2 = *reinterpret_cast<const float2*>(xr + col);
            v[0] = x2.x;
            v[1] = x2.y;
            if (a.norm != nullptr) {
              const float2 g2 = __ldg(reinterpret_cast<const float2*>(a.norm + col));
              v[0] *= g2.x;
              v[1] *= g2.y;
            }
          }
        }
        const __half2 h = __floats2half2_rn(v[0], v[1]);
        const float2 hf = __half22float2(h);
        const __half2 l = __floats2half2_rn(v[0] - hf.x, v[1] - hf.y);
        hi[e] = *reinterpret_cast<const uint32_t*>(&h);
        lo[e] = *reinterpret_cast<const uint32_t*>(&l);
      }
    }
    xs[(p * 2 * M + i) * 4 + t] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    xs[(p * 2 * M + M + i) * 4 + t] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}

// Dynamic shared memory: the block's k-range of x as B fragments, uint4 [span / 32][2M][4]: for
// k16 blocks 2p and 2p + 1, fragment row n (n < M: hi of x row n, else lo of x row n - M), quad t:
// (b0b1, b2b3) of block 2p, then of block 2p + 1.
// PERM: act-order (x gathered by the matrix's perm). R = 2: swiglu over two tiles per warp.
template <int BITS, int M, int R, bool PERM>
__global__ void __launch_bounds__(kThreads, min_blocks_of(M, R)) gemv_kernel(const Args a) {
  using C = Codec<BITS>;
  constexpr int U = loads_of(BITS) / R;
  constexpr int SR = 2 * M;                 // B rows: hi of x rows 0..M-1, then lo
  constexpr int NB = SR <= 8 ? 1 : SR / 8;  // n8 blocks
  extern __shared__ uint4 xs[];
  __shared__ float part[kWarps][R][M][kRows];
  __shared__ float ss_part[kWarps][M];
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

  Batch<BITS, R, U> cur;
  if (has_tile) load_batch<BITS, R, U>(a.g, t, begin, end, cur);
  detail::pdl_wait();  // x, y and the scratch belong to the previous kernel until here

  stage_x<M, PERM>(a, t.perm, col0, span, xs);
  // The sums of squares of x over the range: the same loop whatever m (1/rms independent of m).
  if (a.norm != nullptr) {
    const int hi_col = min(col0 + span, a.g.n_in);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= a.m) break;  // block-uniform
      float ss = 0.f;
      for (int col = col0 + static_cast<int>(threadIdx.x); col < hi_col; col += kThreads) {
        const float val = a.x[static_cast<int64_t>(i) * a.g.n_in + (PERM ? __ldg(t.perm + col) : col)];
        ss = fmaf(val, val, ss);
      }
      ss = detail::warp_sum(ss);
      if (lane == 0) ss_part[warp][i] = ss;
    }
  }
  __syncthreads();

  Sums<NB> sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[r].acc[nb][e] = sum[r].run[nb][e] = 0.f;
    sum[r].scale[0] = sum[r].scale[1] = 0.f;
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) sum[r].add[reg] = 0;
  }
  int run_group = -1;
  // This lane's B-fragment row (n = 8 nb + g) of the staged x. With SR < 8 (M <= 2) the rows n >= SR
  // of the n8 block read row n % SR instead of zeros: they only feed output columns n, never read,
  // and the load needs no lane-dependent branch.
  const uint4* const xs_lane = xs + (SR < 8 ? g % SR : g) * 4 + tq;
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
        const int grp = group_of(a.g, unit);
        if (grp != run_group) {  // warp-uniform
#pragma unroll
          for (int r = 0; r < R; ++r) {
            fold(sum[r]);
            start_run<BITS>(sum[r], bt.rec[r][u][k]);
          }
          run_group = grp;
        }
        // B fragments of the unit's two k16 blocks: one uint4 per n8 block.
        uint4 bf[NB];
        const uint4* xp = xs_lane + ((c - begin) * (C::kBlocks / 2) + k) * SR * 4;
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) bf[nb] = xp[nb * 8 * 4];
#pragma unroll
        for (int kb2 = 0; kb2 < 2; ++kb2) {
          const int kb = 2 * k + kb2;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            uint32_t av[4];
#pragma unroll
            for (int reg = 0; reg < 4; ++reg) av[reg] = pair_values<BITS>(bt.v[r][u], 4 * kb + reg, sum[r].add[reg]);
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
              mma(sum[r].run[nb], av, kb2 ? bf[nb].z : bf[nb].x, kb2 ? bf[nb].w : bf[nb].y);
          }
        }
      }
    }
  };
  // Two batches per iteration, each loaded into the buffer the other one is not using: the batch
  // in flight never has to be copied from one set of registers to the other.
  Batch<BITS, R, U> nxt;
#pragma unroll 1
  for (int b = begin; has_tile && b < end; b += 2 * U) {
    if (b + U < end) load_batch<BITS, R, U>(a.g, t, b + U, end, nxt);
    multiply(cur, b);
    if (b + U >= end) break;
    if (b + 2 * U < end) load_batch<BITS, R, U>(a.g, t, b + 2 * U, end, cur);
    multiply(nxt, b + U);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) fold(sum[r]);

  // Lane (g, t) holds columns n = 8 nb + 2t + {0, 1} of rows g, g + 8: y of x row i = column i (hi)
  // + column i + M (lo). M <= 4: the lo columns sit in lane t ^ (M / 2) (M = 1: in the same lane).
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2);
      if constexpr (NB == 1) {
        if constexpr (M == 1) {
          if (tq == 0 && e % 2 == 0) part[warp][r][0][row] = sum[r].acc[0][e] + sum[r].acc[0][e + 1];
        } else {
          const float lo = __shfl_xor_sync(0xffffffffu, sum[r].acc[0][e], M / 2);
          const int i = 2 * tq + e % 2;
          if (i < M) part[warp][r][i][row] = sum[r].acc[0][e] + lo;
        }
      } else {
#pragma unroll
        for (int nb = 0; nb < NB / 2; ++nb)
          part[warp][r][nb * 8 + 2 * tq + e % 2][row] = sum[r].acc[nb][e] + sum[r].acc[nb + NB / 2][e];
      }
    }
  }
  __syncthreads();
  // One thread per (x row i, row of the item): o = i * kItemRows + warp * 16 + row. The block's x^2
  // sum of row i: its warps' parts in order.
  // ks > 1: this item's partial sums [ks][R][kMaxM][kItemRows] and x^2 sums [ks][kMaxM] in scratch.
  const int64_t sums = a.items * a.ks * (R * kMaxM * kItemRows);
  float* const partial = a.ks == 1 ? nullptr : a.partial + item * a.ks * (R * kMaxM * kItemRows);
  float* const ss_out = a.ks == 1 ? nullptr : a.partial + sums + item * a.ks * kMaxM;
  const bool has_norm = a.norm != nullptr;
  auto block_ss = [&](int i) {
    float ss = 0.f;
    if (has_norm)
#pragma unroll
      for (int w = 0; w < kWarps; ++w) ss += ss_part[w][i];
    return ss;
  };
  // rope_kv: finished row `row` of tile w for x row i goes to part, where rope_kv_item pairs it up.
  auto stash = [&](int w, int i, int row, float (&v)[R], float ss) {
    apply_norm<R>(a, v, ss);
    part[w][0][i][row] = v[0];
  };
  for (int o = static_cast<int>(threadIdx.x); o < a.m * kItemRows; o += kThreads) {
    const int i = o / kItemRows, w = o % kItemRows / kRows, row = o % kRows;
    float val[R];
#pragma unroll
    for (int r = 0; r < R; ++r) val[r] = part[w][r][i][row];
    if (a.ks == 1 && R == 1 && a.epi == Epilogue::rope_kv) {
      stash(w, i, row, val, block_ss(i));
    } else if (a.ks == 1) {
      bool valid;
      const Tiles<R> tw = tiles_of<BITS, R>(a, item, w, 0, valid);
      if (valid) finish<R>(a, tw, row, i, val, block_ss(i));
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) __stcg(partial + (ks * R + r) * (kMaxM * kItemRows) + o, val[r]);
      if (o % kItemRows == 0) __stcg(ss_out + ks * kMaxM + i, block_ss(i));
    }
  }
  if (a.ks == 1) {
    if constexpr (R == 1)
      if (a.epi == Epilogue::rope_kv) {
        __syncthreads();
        rope_kv_item<M>(a, item, part);
      }
    return;
  }

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
  // A thread takes V consecutive outputs o (one x row i) per step: at M >= 8 four, as float4s of
  // every partial sum (M = 16: two steps instead of eight dependent ones); below, one (the epilogue's
  // read-modify-write of each output stays spread over the threads).
  constexpr int V = M >= 8 ? 4 : 1;
  static_assert(kRows % V == 0, "a step's outputs share one tile");
  constexpr int kBurst = 8;  // partial sums loaded at once (independent L2 reads), then added in order
  for (int ov = V * static_cast<int>(threadIdx.x); ov < a.m * kItemRows; ov += V * kThreads) {
    const int i = ov / kItemRows;
    float val[V][R], ss = 0.f;  // output ov + e, tile r
#pragma unroll
    for (int e = 0; e < V; ++e)
#pragma unroll
      for (int r = 0; r < R; ++r) val[e][r] = 0.f;
    auto at = [&](int k, int r) { return partial + (k * R + r) * (kMaxM * kItemRows) + ov; };
    for (int k0 = 0; k0 < a.ks; k0 += kBurst) {
      float pv[kBurst][R][V], sv[kBurst];
#pragma unroll
      for (int d = 0; d < kBurst; ++d) {
        const int k = k0 + d < a.ks ? k0 + d : a.ks - 1;
#pragma unroll
        for (int r = 0; r < R; ++r) ldcg_vec<V>(at(k, r), pv[d][r]);
        sv[d] = has_norm ? __ldcg(ss_out + k * kMaxM + i) : 0.f;
      }
#pragma unroll
      for (int d = 0; d < kBurst; ++d)
        if (k0 + d < a.ks) {
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < V; ++e) val[e][r] += pv[d][r][e];
          ss += sv[d];
        }
    }
    for (int k = 0; k < a.ks; ++k)
#pragma unroll
      for (int r = 0; r < R; ++r) stcg_zero_vec<V>(at(k, r));
    // The V outputs are rows row0.. of one tile w (V divides kRows).
    const int w = ov % kItemRows / kRows, row0 = ov % kRows;
    if (R == 1 && a.epi == Epilogue::rope_kv) {  // (part is free: read above)
#pragma unroll
      for (int e = 0; e < V; ++e) stash(w, i, row0 + e, val[e], ss);
      continue;
    }
    bool valid;
    const Tiles<R> tw = tiles_of<BITS, R>(a, item, w, 0, valid);
    if (valid)
#pragma unroll
      for (int e = 0; e < V; ++e) finish<R>(a, tw, row0 + e, i, val[e], ss);
  }
  __syncthreads();  // every thread has read the x^2 sums before they are zeroed
  if constexpr (R == 1)
    if (a.epi == Epilogue::rope_kv) rope_kv_item<M>(a, item, part);
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
    for (int k = 0; k < C::kUnits; ++k) {
      const int unit = c * C::kUnits + k;
      if (unit >= g.units) continue;
      const uint2 rec = mt.recs[(tile * g.groups + group_of(g, unit)) * 8 + lane / 4];
#pragma unroll
      for (int q = 8 * k; q < 8 * k + 8; ++q) {  // the unit's two k16 blocks
        const int reg = q % 4;
        const uint32_t rr = reg & 1 ? rec.y : rec.x;
        const float s = scale_of(rr);
        const float2 w = h2_to_f2(pair_values<BITS>(ch, q, class_addend<BITS>(rr, L::class_of_reg(BITS, reg))));
        const int64_t row = tile * kRows + L::row_of(lane, q);
        if (row >= mt.n_out) continue;
        const int col = c * C::kSpan + L::col_of(lane, q, 0);
        // s * (c - zero) is exact in f32: one rounding to f16.
        const __half lo = __float2half_rn(s * w.x), hi = __float2half_rn(s * w.y);
        __half* orow = out + row * g.n_in;
        if (mt.perm == nullptr) {
          *reinterpret_cast<__half2*>(orow + col) = __halves2half2(lo, hi);
        } else {
          orow[mt.perm[col]] = lo;
          orow[mt.perm[col + 1]] = hi;
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
  const uint64_t bpg = static_cast<uint64_t>(w.fmt.group / 32);
  geo.gmagic = bpg == 1 ? 0u : static_cast<uint32_t>(((uint64_t{1} << 32) + bpg - 1) / bpg);
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
  // B fragments: span / 32 k16-block pairs x 2M rows x 4 quads x 16 bytes.
  const size_t smem = static_cast<size_t>(a.cpb) * Codec<BITS>::kSpan / 32 * (2 * M) * 4 * 16;
  LITHE_TRY(detail::allow_smem(kernel, opted, smem, "gq gemv_kernel"));
  // PDL by default (pdl_enabled): the first batch of weights loads while the previous kernel ends.
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
            int64_t scratch_bytes, Stream s, const MatvecNorm& norm, const MatvecRope* rope) {
  using detail::bad_arg;
  std::string f = "gemv: ";
  if (outs == nullptr || n_outs < 1 || n_outs > 3)
    return bad_arg(f + "n_outs = " + std::to_string(n_outs) + " is not in 1..3 (or outs is null)");
  if (e != Epilogue::store && e != Epilogue::accumulate && e != Epilogue::swiglu && e != Epilogue::rope_kv)
    return bad_arg(f + "epilogue " + std::to_string(static_cast<int>(e)) +
                   " is not store, accumulate, swiglu or rope_kv");
  if (e == Epilogue::rope_kv && n_outs != 3)
    return bad_arg(f + "rope_kv needs exactly 3 matrices (q, k, v), got n_outs = " + std::to_string(n_outs));
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
  if (e == Epilogue::rope_kv) {
    LITHE_TRY(detail::check_rope(f + "rope_kv: ", outs[0].w->n_out, outs[1].w->n_out, outs[2].w->n_out, rope));
    if (kItemRows % rope->head_dim != 0)
      return bad_arg(f + "rope_kv: head_dim " + std::to_string(rope->head_dim) + " does not divide the " +
                     std::to_string(kItemRows) + " rows of a GEMV item");
    a.rope = *rope;
  }
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

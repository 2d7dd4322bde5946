// Device code shared by the GEMV kernels (gq_gemv_grid.cuh, gq_gemv_dequant.cuh):
// the codes' turn into exact f16 integers, the MMA, the per-lane sums and their epilogues. The
// arithmetic is described at the top of gq_gemv_grid.cuh.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gq_gemv_args.h"
#include "kernels/cuda/rope.cuh"

namespace lithe::cuda::gemv_impl {

using detail::aligned;
using detail::hadd2;
using detail::hfma2;
using detail::inv_rms_of;
using detail::lop3_and_or;
using detail::ld_stream;

// SP: 2:4 sparse (gq_gemv_layout.h): the chunk's columns are code columns, each 2 of x.
template <int BITS, bool SP = false>
struct Codec {
  static constexpr int kBlocks = L::kblocks(BITS);       // k16 blocks (of code columns) per chunk
  static constexpr int kSpan = L::chunk_span(BITS);      // code columns per chunk
  static constexpr int kUnits = kSpan / L::kUnitCols;    // scale records per chunk and row
  static constexpr bool kHi = BITS == 3;
  static constexpr bool kMeta = SP;                      // Chunk::hi holds the meta words
  static constexpr int kXs = L::x_per_code(SP);          // columns of x per code column
  static constexpr int kXSpan = L::x_span(BITS, SP);     // columns of x per chunk
  static_assert(!SP || BITS == 4, "2:4 sparse runs int4 (L::runs_sparse)");
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

// f16x2 arithmetic on 32-bit registers (hfma2, hadd2, lop3_and_or: common.cuh).
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

// d += A (16 x 32, f16, 2:4 sparse: its 16 x 16 kept values as mma's A fragment, meta e) * B
// (32 x 8: two k16 blocks' b0b1, b2b3), f32; the sparsity selector SEL picks the lanes giving e.
template <int SEL>
__device__ __forceinline__ void mma_sp(float (&d)[4], const uint32_t (&a)[4], const uint4& b, uint32_t e) {
  asm volatile(
      "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, %13;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y), "r"(b.z), "r"(b.w), "r"(e), "n"(SEL));
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

// Unit k (two k16 blocks of code columns) of chunk v[r][u] of each of the R tiles against the x
// fragments at xp: one uint4 per n8 block, 32 uint4 apart, for 32 columns of x (see gemv_kernel's
// shared memory); SP: 64 columns, the second 32 at xp + pair (each code block is one mma.sp over
// 32 columns of x, its meta word k, selector kb2).
template <int BITS, bool SP, int R, int NB, int U>
__device__ __forceinline__ void mma_unit(Sums<NB> (&sum)[R], const Chunk (&v)[R][U], int u, int k, const uint4* xp,
                                         int pair) {
  uint4 bf[SP ? 2 : 1][NB];
#pragma unroll
  for (int h = 0; h < (SP ? 2 : 1); ++h)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) bf[h][nb] = xp[h * pair + nb * 8 * 4];
#pragma unroll
  for (int kb2 = 0; kb2 < 2; ++kb2) {
    const int kb = 2 * k + kb2;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t av[4];
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) av[reg] = pair_values<BITS>(v[r][u], 4 * kb + reg, sum[r].add[reg]);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        if constexpr (SP) {
          const uint32_t e = k ? v[r][u].hi.y : v[r][u].hi.x;  // L::meta_word(kb) = k
          if (kb2) mma_sp<1>(sum[r].run[nb], av, bf[1][nb], e);
          else mma_sp<0>(sum[r].run[nb], av, bf[0][nb], e);
        } else {
          mma(sum[r].run[nb], av, kb2 ? bf[0][nb].z : bf[0][nb].x, kb2 ? bf[0][nb].w : bf[0][nb].y);
        }
      }
    }
  }
}

// A warp's finished sums into p[r][i][row] (its partial result of tile r for x row i): lane (g, t)
// holds columns n = 8 nb + 2t + {0, 1} of rows g, g + 8; y of x row i = column i (hi) + column
// i + M (lo). M <= 4: the lo columns sit in lane t ^ (M / 2) (M = 1: in the same lane).
template <int M, int R, int NB>
__device__ __forceinline__ void write_parts(const Sums<NB> (&sum)[R], float (&p)[R][M][kRows], int g, int tq) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2);
      if constexpr (NB == 1) {
        if constexpr (M == 1) {
          if (tq == 0 && e % 2 == 0) p[r][0][row] = sum[r].acc[0][e] + sum[r].acc[0][e + 1];
        } else {
          const float lo = __shfl_xor_sync(0xffffffffu, sum[r].acc[0][e], M / 2);
          const int i = 2 * tq + e % 2;
          if (i < M) p[r][i][row] = sum[r].acc[0][e] + lo;
        }
      } else {
#pragma unroll
        for (int nb = 0; nb < NB / 2; ++nb)
          p[r][nb * 8 + 2 * tq + e % 2][row] = sum[r].acc[nb][e] + sum[r].acc[nb + NB / 2][e];
      }
    }
  }
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

// The fixed point of GemvResidual: v * 2^32 rounded, or kPoison where |v| >= 2^20 or v is NaN. With
// at most kGemvResidualMaxSplit terms a sum of normal values stays below kPoisoned and one with a
// poisoned term above it (no overflow: 31 * 2^58 < 2^63).
constexpr long long kPoison = 1ll << 58, kPoisoned = 1ll << 57;
constexpr long long kNormalBound = kGemvResidualMaxSplit * (1ll << 52);  // |sum| of normal terms below
static_assert(kNormalBound < kPoisoned && kPoison - kNormalBound > kPoisoned && kGemvResidualMaxSplit <= LLONG_MAX / kPoison,
              "GemvResidual's fixed point");
__device__ __forceinline__ long long to_fixed(float v) {
  return fabsf(v) < 1048576.f ? __float2ll_rn(v * 4294967296.f) : kPoison;
}
__device__ __forceinline__ float from_fixed(long long q) {
  return q >= kPoisoned ? __int_as_float(0x7fffffff) : __ll2float_rn(q) * 2.3283064365386963e-10f;
}

}  // namespace lithe::cuda::gemv_impl

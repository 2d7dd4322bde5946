// Group-quantized matrix-vector products for decode (cuda_gq.h: gemv_linear), batch m <= 8 on
// CUDA cores, and the expansion of the same packed matrix to dense f16 (gemv_dequantize_f16).
// The layout is described in gq_gemv_layout.h; the kernel streams it once from HBM.
//
// Work split
// - One block of 16 warps per tile of 32 rows, lane l on row l. Warp w takes chunks w, w + 16,
//   w + 32, ... of the tile, so every warp load is 512 contiguous bytes (chunk c of the 32 rows)
//   and all lanes of a warp need the same x values: x is read as float4 through L1 (one broadcast
//   per load), or, with act-order, from a copy of x gathered by perm into shared memory when the
//   block starts (every x row and column is used by the 32 rows of the block). When m rows of
//   gathered x do not fit in shared memory (m * n_in * 4 bytes; e.g. m = 8 at n_in = 14336), the
//   rows go in several launches, each reading the weights again.
// - A batch is U chunks: their loads (ld.global.nc.L1::no_allocate; int3 also its 8-byte hi
//   chunks) and scale records are issued before any arithmetic. The first batch is issued before
//   griddepcontrol.wait (PDL): weights are never written by kernels.
// - The 16 warps' partial sums meet in shared memory; warp i adds up x row i and applies the
//   epilogue (a template point: store / accumulate now, fused epilogues later). No shuffles.
//
// Arithmetic per unit (32 columns, int8: 16; one scale record):
// - (word & mask) | 0x64006400 (one LOP3; int8: one PRMT) makes an f16 pair 1024 + c * 2^(b*j);
//   one HFMA2 with (2^-(b*j), -(1024 * 2^-(b*j) + zero)) gives the exact integers c - zero, which
//   are converted to f32 and multiplied into t[i] += (c - zero) * x[i] (f32 FMAs, exact products).
//   About 2 instructions per weight (int4: ~120 per 16 bytes at m = 1) plus one FMA per weight
//   and x row.
// - At the end of the unit acc[i] += scale * t[i]: W = scale * (c - zero) exactly as the reference
//   has it; only the order of the f32 sums differs.
// - With m >= 4 the kernel is bound by those f32 FMAs (one per weight and x row), not by HBM.
// Instantiations: bits {2, 3, 4, 8} x M {1, 2, 4, 8} (m rounded up; x rows >= m are skipped by
// uniform predicates, never stored) x act-order, and one dequantize kernel per bits.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gq_gemv_layout.h"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda {
namespace {

namespace L = gemv_layout;

constexpr int kWarps = 16;  // warps sharing one tile (warp w takes chunks w, w + 16, ...)
constexpr int kThreads = 32 * kWarps;
static_assert(L::kTileRows == 32, "one row per lane");

// Tuning: U chunks per batch (4: 2 KiB in flight per warp), and the occupancy asked of ptxas in
// blocks of 512 threads per SM: 2 (<= 64 registers) for m <= 2, where the batch's loads and the
// unit's f32 values fit (int3 M = 2 would spill), 1 (<= 128) otherwise.
template <int BITS, int M>
struct Cfg {
  static constexpr int U = 4;
  static constexpr int min_blocks = M == 1 || (M == 2 && BITS != 3) ? 2 : 1;
};

struct Args {
  const uint4* codes;
  const uint2* hi;        // int3 only
  const uint32_t* recs;
  const int32_t* perm;    // act-order only
  const float* x;
  int64_t n_out;
  int n_in, chunks, groups, units, m;
  uint32_t gmagic;  // group of 32-column block b: umulhi(b, gmagic), or b when 0 (group 32)
};

// The epilogue of output y[i][row] = v: the kernels' template point.
struct StoreEpi {
  float* y;
  int64_t n_out;
  bool accumulate;
  __device__ __forceinline__ void operator()(int i, int64_t row, float v) const {
    float* p = y + i * n_out + row;
    *p = accumulate ? *p + v : v;
  }
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

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream(const uint2* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
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
__device__ __forceinline__ int group_of(const Args& a, int unit) {
  const uint32_t b = static_cast<uint32_t>(BITS == 8 ? unit >> 1 : unit);  // 32-column block
  return static_cast<int>(a.gmagic ? __umulhi(b, a.gmagic) : b);
}

// acc[i] += scale * sum over unit k of chunk ch of (c - zero) * x[i] (col0: its first column).
// x: the x rows (global, row stride n_in), or with PERM the gathered copy in shared memory.
template <int BITS, int M>
__device__ __forceinline__ void unit_fma(const Args& a, const float* x, const Chunk& ch, int k, uint32_t rec,
                                         int col0, float (&acc)[M]) {
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
      if (M <= 2 || i < M / 2 || i < a.m) {
        const float4 xv = *reinterpret_cast<const float4*>(x + i * a.n_in + col0 + 4 * e);
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

// Issues batch b of this lane: chunks b, b + 16, ..., and their scale records.
template <int BITS, int U>
__device__ __forceinline__ void load_batch(const Args& a, const uint4* cp, const uint2* hp, const uint32_t* rp, int b,
                                           Chunk (&v)[U], uint32_t (&rec)[U][Codec<BITS>::kUnits]) {
  using C = Codec<BITS>;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = b + kWarps * u;
    if (c < a.chunks) {
      v[u].lo = ld_stream(cp + c * L::kTileRows);
      if constexpr (C::kHi) v[u].hi = ld_stream(hp + c * L::kTileRows);
#pragma unroll
      for (int k = 0; k < C::kUnits; ++k) {
        const int unit = min(c * C::kUnits + k, a.units - 1);  // a padding unit: any record
        rec[u][k] = __ldg(rp + static_cast<uint32_t>(group_of<BITS>(a, unit)) * L::kTileRows);
      }
    }
  }
}

// PERM: dynamic shared memory holds x[i][perm[k]] for i < m (m * n_in floats).
template <int BITS, int M, bool PERM, class Epi>
__global__ void __launch_bounds__(kThreads, Cfg<BITS, M>::min_blocks) gemv_kernel(const Args a, const Epi epi) {
  using C = Codec<BITS>;
  constexpr int U = Cfg<BITS, M>::U;
  extern __shared__ float4 xs4[];
  __shared__ float part[kWarps][M][32];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t tile = blockIdx.x;
  detail::pdl_release();
  const int64_t slot0 = tile * a.chunks * L::kTileRows + lane;
  const uint4* cp = a.codes + slot0;
  const uint2* hp = C::kHi ? a.hi + slot0 : nullptr;
  const uint32_t* rp = a.recs + tile * a.groups * L::kTileRows + lane;

  Chunk v[U];
  uint32_t rec[U][C::kUnits];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    v[u] = Chunk{};
#pragma unroll
    for (int k = 0; k < C::kUnits; ++k) rec[u][k] = 0;
  }
  int b = warp;
  if (b < a.chunks) load_batch<BITS, U>(a, cp, hp, rp, b, v, rec);
  detail::pdl_wait();  // x and y come from the previous kernel

  const float* x = a.x;
  if constexpr (PERM) {  // gather x by perm into shared memory
    float* xs = reinterpret_cast<float*>(xs4);
    for (int i = 0; i < a.m; ++i)
      for (int k = static_cast<int>(threadIdx.x); k < a.n_in; k += kThreads)
        xs[i * a.n_in + k] = a.x[i * a.n_in + __ldg(a.perm + k)];
    __syncthreads();
    x = xs;
  }

  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.f;
#pragma unroll 1
  for (; b < a.chunks; b += kWarps * U) {
    if (b != warp) load_batch<BITS, U>(a, cp, hp, rp, b, v, rec);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = b + kWarps * u;
      if (c >= a.chunks) break;  // warp-uniform
#pragma unroll
      for (int k = 0; k < C::kUnits; ++k) {
        const int unit = c * C::kUnits + k;
        if (C::kUnits == 1 || unit < a.units) unit_fma<BITS, M>(a, x, v[u], k, rec[u][k], unit * C::kUnitCols, acc);
      }
    }
  }

  // The 16 warps' sums of each row meet in shared memory; warp i finishes x row i.
#pragma unroll
  for (int i = 0; i < M; ++i) part[warp][i][lane] = acc[i];
  __syncthreads();
  if (warp >= M || warp >= a.m) return;
  float sum = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += part[w][warp][lane];
  const int64_t row = tile * L::kTileRows + lane;
  if (row < a.n_out) epi(warp, row, sum);
}

// Dense f16 [n_out][n_in] (original column order): one thread per stored chunk.
template <int BITS>
__global__ void __launch_bounds__(256) dequant_kernel(const Args a, int64_t slots, __half* out) {
  using C = Codec<BITS>;
  constexpr uint32_t magic = 0x64006400u;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < slots;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tc = idx / L::kTileRows, tile = tc / a.chunks;
    const int c = static_cast<int>(tc % a.chunks), lane = static_cast<int>(idx % L::kTileRows);
    const int64_t row = tile * L::kTileRows + lane;
    if (row >= a.n_out) continue;
    Chunk ch;
    ch.lo = a.codes[idx];
    if constexpr (C::kHi) ch.hi = a.hi[idx];
    __half* orow = out + row * a.n_in;
#pragma unroll
    for (int k = 0; k < C::kUnits; ++k) {
      const int unit = c * C::kUnits + k;
      if (unit >= a.units) continue;
      const uint32_t rec = a.recs[(tile * a.groups + group_of<BITS>(a, unit)) * L::kTileRows + lane];
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
        if (a.perm == nullptr) {
          *reinterpret_cast<uint4*>(orow + col) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j)
            orow[a.perm[col + j]] = __ushort_as_half(static_cast<unsigned short>(hw[j / 2] >> (16 * (j % 2))));
        }
      }
    }
  }
}

bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

std::string ptr_str(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Checks a packed weight against the layout it claims and fills the kernel arguments.
Status make_args(const PackedWeight& w, const void* w_dev, const std::string& f, Args& a, L::Geometry& g) {
  using detail::bad_arg;
  if (w.layout != kLayoutGemv)
    return bad_arg(f + "layout " + std::to_string(w.layout) + " is not the GEMV layout (pack_gemv)");
  const Status sup = gemv_supports(w.fmt, w.n_out, w.n_in);
  if (!sup.is_ok()) return sup;
  g = L::geometry(w.fmt, w.n_out, w.n_in, w.has_perm);
  if (w.section[0] != g.codes || w.section[1] != g.hi || w.section[2] != g.recs || w.section[3] != g.perm ||
      w.bytes != g.bytes)
    return bad_arg(f + "the descriptor's sections / size (" + std::to_string(w.bytes) +
                   " bytes) do not match the GEMV layout of its shape (" + std::to_string(g.bytes) + " bytes)");
  if (w_dev == nullptr || !aligned(w_dev, 16))
    return bad_arg(f + "w_dev = " + ptr_str(w_dev) + " is null or not 16-byte aligned");
  const auto* base = static_cast<const uint8_t*>(w_dev);
  a.codes = reinterpret_cast<const uint4*>(base + g.codes);
  a.hi = reinterpret_cast<const uint2*>(base + g.hi);
  a.recs = reinterpret_cast<const uint32_t*>(base + g.recs);
  a.perm = w.has_perm ? reinterpret_cast<const int32_t*>(base + g.perm) : nullptr;
  a.n_out = w.n_out;
  a.n_in = static_cast<int>(w.n_in);
  a.chunks = static_cast<int>(g.chunks);
  a.groups = static_cast<int>(g.groups);
  a.units = static_cast<int>(g.units);
  const uint64_t bpg = static_cast<uint64_t>(w.fmt.group / 32);
  a.gmagic = bpg == 1 ? 0u : static_cast<uint32_t>(((uint64_t{1} << 32) + bpg - 1) / bpg);
  return Status::ok();
}

// Largest dynamic shared memory a block may ask for on the current device.
int64_t smem_optin() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
                                                 cudaSuccess)
    return 48 * 1024;
  return v;
}

template <int BITS, int M, bool PERM>
Status launch(const Args& a, const StoreEpi& epi, int64_t tiles, Stream s) {
  auto* kernel = gemv_kernel<BITS, M, PERM, StoreEpi>;
  const size_t smem = PERM ? static_cast<size_t>(a.m) * a.n_in * sizeof(float) : 0;
  if (PERM &&  // static (<= 16 KiB) + dynamic may pass the 48 KiB granted without asking
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess)
    return detail::launched("gq gemv_kernel (shared memory size)");
  detail::launch_pdl(kernel, dim3(static_cast<unsigned>(tiles)), dim3(kThreads), smem, s, a, epi);
  return detail::launched("gq gemv_kernel");
}

template <int BITS, bool PERM>
Status launch_m(const Args& a, const StoreEpi& epi, int64_t tiles, Stream s) {
  if (a.m == 1) return launch<BITS, 1, PERM>(a, epi, tiles, s);
  if (a.m == 2) return launch<BITS, 2, PERM>(a, epi, tiles, s);
  if (a.m <= 4) return launch<BITS, 4, PERM>(a, epi, tiles, s);
  return launch<BITS, 8, PERM>(a, epi, tiles, s);
}

template <bool PERM>
Status launch_bits(int bits, const Args& a, const StoreEpi& epi, int64_t tiles, Stream s) {
  switch (bits) {
    case 2: return launch_m<2, PERM>(a, epi, tiles, s);
    case 3: return launch_m<3, PERM>(a, epi, tiles, s);
    case 4: return launch_m<4, PERM>(a, epi, tiles, s);
    default: return launch_m<8, PERM>(a, epi, tiles, s);
  }
}

// Whether [a, a + na) and [b, b + nb) (bytes) share memory.
bool overlap(const void* a, int64_t na, const void* b, int64_t nb) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(nb) && pb < pa + static_cast<uintptr_t>(na);
}

}  // namespace

Status gemv_linear(const PackedWeight& w, const void* w_dev, const float* x, int64_t m, float* y, bool accumulate,
                   Stream s) {
  using detail::bad_arg;
  const std::string f = "gemv_linear [" + std::to_string(w.n_out) + " x " + std::to_string(w.n_in) + "]: ";
  Args a{};
  L::Geometry g;
  LITHE_TRY(make_args(w, w_dev, f, a, g));
  if (m < 1 || m > kGemvMaxRows)
    return bad_arg(f + "m = " + std::to_string(m) + " is not in 1.." + std::to_string(kGemvMaxRows));
  if (x == nullptr || !aligned(x, 16)) return bad_arg(f + "x = " + ptr_str(x) + " is null or not 16-byte aligned");
  if (y == nullptr || !aligned(y, alignof(float)))
    return bad_arg(f + "y = " + ptr_str(y) + " is null or not 4-byte aligned");
  if (overlap(y, m * w.n_out * 4, x, m * w.n_in * 4)) return bad_arg(f + "y overlaps x");
  if (!w.has_perm) {
    a.x = x;
    a.m = static_cast<int>(m);
    return launch_bits<false>(w.fmt.bits, a, StoreEpi{y, w.n_out, accumulate}, g.tiles, s);
  }
  // Act-order: x gathered into shared memory, as many rows per launch as fit (the static part of
  // the block's shared memory is at most 16 KiB); more launches read the weights again.
  const int64_t rows_fit = (smem_optin() - 16 * 1024) / (w.n_in * 4);
  if (rows_fit < 1)
    return Status(StatusCode::unsupported, f + "act-order needs n_in * 4 = " + std::to_string(w.n_in * 4) +
                                               " bytes of shared memory per block, more than this device has");
  for (int64_t r0 = 0; r0 < m; r0 += rows_fit) {
    a.x = x + r0 * w.n_in;
    a.m = static_cast<int>(std::min(rows_fit, m - r0));
    LITHE_TRY(launch_bits<true>(w.fmt.bits, a, StoreEpi{y + r0 * w.n_out, w.n_out, accumulate}, g.tiles, s));
  }
  return Status::ok();
}

Status gemv_dequantize_f16(const PackedWeight& w, const void* w_dev, void* out, Stream s) {
  using detail::bad_arg;
  const std::string f = "gemv_dequantize_f16 [" + std::to_string(w.n_out) + " x " + std::to_string(w.n_in) + "]: ";
  Args a{};
  L::Geometry g;
  LITHE_TRY(make_args(w, w_dev, f, a, g));
  if (out == nullptr || !aligned(out, 16))
    return bad_arg(f + "out = " + ptr_str(out) + " is null or not 16-byte aligned");
  const int64_t slots = g.tiles * g.chunks * L::kTileRows;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(slots, 256), 8192))), block(256);
  auto* o = static_cast<__half*>(out);
  switch (w.fmt.bits) {
    case 2: dequant_kernel<2><<<grid, block, 0, s>>>(a, slots, o); break;
    case 3: dequant_kernel<3><<<grid, block, 0, s>>>(a, slots, o); break;
    case 4: dequant_kernel<4><<<grid, block, 0, s>>>(a, slots, o); break;
    default: dequant_kernel<8><<<grid, block, 0, s>>>(a, slots, o); break;
  }
  return detail::launched("gq dequant_kernel");
}

}  // namespace lithe::cuda

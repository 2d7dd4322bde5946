// Marlin-class mixed-precision GEMM (cuda_gq.h): y[m][n_out] (=|+=) x[m][n_in] · Wᵀ with f16
// activations and int4 weights (group 128 or per channel, sym or asym, act-order) on tensor cores
// (mma.sync m16n8k16, f32 accumulation; wgmma on sm_90a for m >= 17), for sm_80 and sm_90.
// Weights laid out by pack_marlin (marlin_pack.cpp documents the layout).
//
// The launcher runs two kernels: to_f16_kernel converts x to f16 into scratch (gathered by the
// act-order permutation, zero-padded to k_pad columns), then gemm_kernel<Cfg> runs the product.
//
// GEMM, in GEMM terms: A = x16 [m][k], B = Wᵀ [k][n] (n = n_out), C = y [m][n].
// - Tiles. A block tile is M_T = 16*MB rows × N_T = 64*NW columns × K_T = 16*KS of k. A "unit" is
//   one such tile's k step: K_T × N_T int4 weights (8 KiB) and M_T × K_T of A. Configs (Cfg
//   below), all N_T=128, K_T=128: m <= 16: MB=1, 6 stages; m in 17..64: MB = ceil(m/16), 4
//   stages; m > 64: MB=4 and the rows are cut into 64-row slices that are scheduled as
//   independent problems (B is then streamed once per slice). 256-column tiles for m > 16 read
//   A half as often but make the k-split partial tiles twice as large; they measured slower
//   (bench/RESULTS.md, thirteenth session). 2:4 sparse keeps them (see SpM*).
// - Warps. 8 warps; warp (wn, wk): wn = warp % NW owns output columns [64 wn, 64 wn + 64) of the
//   tile, wk = warp / NW the k16 steps [wk*KSW, (wk+1)*KSW) of each unit (k split inside the block,
//   KSW = 2). Each warp multiplies M_T × 16 by 16 × 64 per step: per m16 block 8 mma.m16n8k16.
//   The KW = 8/NW partial sums are added through shared memory when a slice of k ends.
// - Weights. One 16-byte shared-memory load per lane and k16 step gives the lane its 32 int4 B
//   fragment values of 4 column blocks of 16 (the packed order). Dequantization per 32-bit word
//   (8 values): two lop3 (mask | 0x6400 exponent: f16 1024 + q, or 1024 + 16q for the odd nibble),
//   a shift by 8, two more lop3, then q - z exactly in f16 (sub of 1024 + z, or fma by 1/16 and
//   -(64 + z)), times the group scale (f16x2 mul): the four results are the B fragment registers.
//   Scales (and zeros) of the unit's group are copied per unit into shared memory and expanded
//   into registers once per unit (8 columns per lane).
// - Pipeline. Weights, scales, zeros and A go global -> shared memory with cp.async (16 bytes, L2
//   only; weights with an L2 evict_first policy: they are read exactly once, A stays in L2) into a
//   ring of STAGES units; A rows >= m are zero-filled. Fragments are double-buffered in registers:
//   the next step's (or next unit's first step's) A (ldmatrix.x4, XOR-swizzled rows, conflict-free)
//   and B words are loaded before the current step's dequant + mma. The wait for the next unit and
//   the block barrier that frees a ring slot happen once per unit, before its last step.
// - Partitioning ("striped", as stream-K). Units are ordered slice-major (slice = 64-row slice x
//   column tile) with k fastest; block b of the grid (<= #SMs) takes the contiguous run of
//   T = ceil(units / #SMs) units starting at b*T, crossing slice boundaries as needed, so every SM
//   streams the same number of weight bytes whatever the shape.
// - Output. At the end of a block's part of a slice the k-warps add their accumulators into an f32
//   tile in shared memory, in warp order; all 256 threads then move the tile in float4.
// - Global reduction. A slice whose k range is split over blocks b_first..b_last is finished by the
//   last block to arrive: each block writes its f32 partial tile (valid rows only) into scratch,
//   and counts itself in at the slice's counter (scratch, indexed by b_last; detail::arrive_last:
//   one acquire-release atomic after a block barrier, no fence per thread); the block that sees
//   the count complete resets the counter to 0 and sums y (when accumulating) and the partials in
//   block order, so the result does not depend on arrival order; it loads several partials at
//   once, so that their latencies overlap. No block ever waits for another.
// - Cluster sums (sm_90, host: cluster_ks_for). Where the k-split is even (every slice's k range
//   is exactly ks = k_tiles / per_block blocks' units, 2 <= ks <= 8: Llama's 4096 x 4096 at any m)
//   and all clusters fit at once, the ks blocks of a slice are one thread-block cluster: each puts
//   its partial tile in its own shared memory (mma.sync: the f32 tile; wgmma: the ring, free by
//   then), a cluster barrier, then block r adds (y when accumulating and) the ks tiles in block
//   order through distributed shared memory for the r-th ks-th of the tile and stores it: the
//   same bits as the scratch sum, without scratch traffic, counters or a lone summing block. A
//   second barrier keeps every tile alive until read. (The blocks of a cluster are resident
//   together by the hardware's guarantee, so these barriers cannot deadlock as a wait on an
//   ordinary block could.) LITHE_MARLIN_CLUSTER=0 turns it off. On an H100 at one block per SM
//   only 30 clusters of 4 fit (GPC sizes: bench/experiments/cluster_occupancy.cu), so a 4-way
//   split of 128 blocks keeps the scratch sums there; 2-way splits (66 fit) and the smaller
//   kernels' 4-way splits use clusters. Not in the 2:4 kernel for m > 48 (Cfg::CLUSTER).
// - 2:4 sparse (fmt.sparse24; Cfg SPARSE, the same kernel): the weights become the sparse A operand
//   of mma.sp::ordered_metadata m16n8k32 (16 output columns x 32 of k, stored as the 2 kept codes
//   per run of 4 plus 2-bit indices), x the B operand (ldmatrix.x4 of 8 rows x 32 of k). The
//   packed nibble order makes the same dequantization yield the A fragment; each lane also reads
//   8 bytes of metadata per k32 step (column blocks 0, 2 with sparsity selector 0 in lanes t = 0, 1;
//   blocks 1, 3 with selector 1 in lanes t = 2, 3). Same tiles, pipeline, partitioning and
//   reduction; one k32 step per warp and unit, so fragments are loaded per step (no double
//   buffering); 8-row blocks of x past m are skipped. Weight traffic is 3/4 of dense.
// - wgmma (sm_90a; Cfg WG, the same kernel: WgM2/4/8): on sm_90 for dense weights and m >= 17
//   (kWgMinM) the product is computed transposed, yᵀ = W·xᵀ, with wgmma.mma_async m64nNk16
//   (N = M_T = 32, 64 or 128: m <= 32, <= 64, else 128-row slices, so the weights are streamed
//   once for up to 128 rows). A = W from registers: warpgroup wn (warps 4wn..4wn+3) owns the
//   tile's columns [64 wn, 64 wn + 64); its warp wq takes word wq of the packed 16 bytes (column
//   block 16 wq..), whose dequantized registers b00, b10, b01, b11 are exactly wgmma's A fragment
//   of rows 16 wq.. (mma.m16n8k16's A layout), so the packed format is unchanged. B = xᵀ from the
//   ring through a descriptor: x K-major with 128-byte swizzle (per k half, 128-byte rows, 16-byte
//   chunk c of row r at c ^ (r & 7); slots 1 KiB aligned); cp.async'd x is made visible to the
//   async proxy by fence.proxy.async before the barrier that publishes a unit. Each warpgroup
//   runs all 8 k16 steps of a unit (no k split): dequantize, then per group of kWgGroup steps
//   (2 for the 128-row tile, else 4: measured) wgmma.fence, the group's wgmmas, commit, wait
//   until one group is pending (the A registers of the previous group are then free). The
//   accumulators (f32, N/2 per thread) skip the shared-memory tile: y is stored from registers,
//   partial tiles in fragment order, with the same counters and block-order sum. Set
//   LITHE_MARLIN_WGMMA=0 to run the mma.sync kernels instead.
// - Programmatic dependent launch (sm_90): the GEMM is launched with programmatic stream
//   serialization after the conversion kernel, which triggers its dependents at once; the GEMM
//   issues its first weight loads, then waits (griddepcontrol.wait) before touching x16, y or
//   scratch. Set LITHE_MARLIN_PDL=0 to launch it plainly.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/marlin_layout.cuh"
#include "kernels/cuda/marlin_ptx.cuh"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda {
namespace marlin {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;              // grid bound = number of slice counters in scratch
constexpr int64_t kCounterBytes = kMaxBlocks * 4;

// Tile configuration: MB m16 blocks of rows, NW warps along n (64 columns each), KS k16 steps of
// k per unit, STAGES ring slots, DB fragment double buffering, SPARSE: 2:4 weights on mma.sp,
// WG: sm_90a wgmma (NW warpgroups of 4 warps along n, each the whole k of a unit; yᵀ = W·xᵀ).
template <int MB_, int NW_, int KS_, int STAGES_, bool DB_, bool SPARSE_, bool WG_ = false>
struct Cfg {
  static constexpr int MB = MB_, NW = NW_, KS = KS_, STAGES = STAGES_;
  static constexpr bool DB = DB_;        // fragments double-buffered in registers (else loaded per step)
  static constexpr bool SPARSE = SPARSE_;
  static constexpr bool WG = WG_;
  // Cluster sums (cluster_sum) where the k-split allows; not in the 2:4 kernel for m > 48, which
  // sits at 255 registers: the call there spilled 8 more bytes and ran 1-2% slower (H100).
  static constexpr bool CLUSTER = !(SPARSE && MB_ == 4);
  static constexpr int FB = DB ? 2 : 1;  // fragment buffers
  static constexpr int KW = WG ? 1 : 8 / NW;  // warps (wgmma: warpgroups) along k
  // Accumulators per thread: [MB][ACC_J][4]; mma.sync: [m16 block][n8 block][c]; wgmma: the
  // m64nN f32 fragment d[0 .. N/2) (N = M_T) as [N/16][2][4].
  static constexpr int ACC_J = WG ? 2 : 8;
  static constexpr int M_T = 16 * MB, N_T = 64 * NW, K_T = 16 * KS;
  // A step is one mma's k: 16 (m16n8k16) or 32 (mma.sp m16n8k32); KSW steps per warp per unit.
  static constexpr int STEP_K = SPARSE ? 32 : 16;
  static constexpr int KSTEPS = K_T / STEP_K;
  static constexpr int KSW = KSTEPS / KW;
  // x fragments (ldmatrix.x4, 4 registers) per step: one per m16 block (dense: the A operand), one
  // per 8 rows (sparse: the B operand).
  static constexpr int NX = SPARSE ? 2 * MB : MB;
  // Per ring slot, in 16-byte chunks: weight codes, 2:4 metadata, x, scales, zeros.
  static constexpr int B_CHUNKS = KSTEPS * NW * 32;
  static constexpr int M_CHUNKS = SPARSE ? KSTEPS * NW * 16 : 0;
  static constexpr int A_ROW_CHUNKS = K_T / 8;
  static constexpr int A_CHUNKS = M_T * A_ROW_CHUNKS;
  static constexpr int S_CHUNKS = N_T / 8;
  static constexpr int Z_CHUNKS = N_T / 16;
  static constexpr int B_OFF = 0, M_OFF = B_CHUNKS, A_OFF = M_OFF + M_CHUNKS, S_OFF = A_OFF + A_CHUNKS;
  static constexpr int Z_OFF = S_OFF + S_CHUNKS;
  // wgmma reads x through a 128-byte-swizzle descriptor: every slot's x tile 1024-byte aligned.
  static constexpr int SLOT = WG ? (Z_OFF + Z_CHUNKS + 63) / 64 * 64 : Z_OFF + Z_CHUNKS;
  // The f32 output tile [M_T][TS] in shared memory after the ring. Row stride padding: the
  // fragment-order stores of a warp then take the minimal number of wavefronts (dense: float2 at
  // rows g, columns 2t; sparse: floats at rows 2t, columns g).
  static constexpr int TS = N_T + (SPARSE ? 4 : 8);
  // wgmma keeps no output tile (the accumulators go out from registers) but aligns the ring to 1 KiB.
  static constexpr size_t SMEM = static_cast<size_t>(SLOT) * 16 * STAGES +
                                 (WG ? 1024 : static_cast<size_t>(M_T) * TS * 4);
  static_assert((WG ? 4 : 1) * NW * KW == 8 && KSW * KW == KSTEPS && KSW >= 1, "8 warps split n and k");
  static_assert(!WG || (!SPARSE && DB && NW == 2 && A_OFF % 64 == 0 && (MB == 2 || MB == 4 || MB == 8)),
                "wgmma: dense, 2 warpgroups, x tile 1 KiB aligned, N = M_T in {32, 64, 128}");
  static_assert(!DB || KSW % 2 == 0, "fragment double buffering assumes an even number of steps per unit");
  static_assert(B_CHUNKS % kThreads == 0 && M_CHUNKS <= kThreads, "weight chunks per unit");
  static_assert(S_CHUNKS <= 64 && Z_CHUNKS <= 64, "scale / zero loaders");
  static_assert(STAGES >= 3, "ring");
};

using CfgM1 = Cfg<1, 2, 8, 6, true, false>;  // m <= 16
using CfgM2 = Cfg<2, 2, 8, 4, true, false>;  // m <= 32
using CfgM3 = Cfg<3, 2, 8, 4, true, false>;  // m <= 48
using CfgM4 = Cfg<4, 2, 8, 4, true, false>;  // m > 48 (64-row slices)
// 2:4 sparse: one k32 step per warp and unit, so fragments are loaded per step; m > 16 keeps the
// 256-column tiles (N_T = 128 with sparse fragments was not made to work: bench/DEVICE_RUNS.md).
using SpM1 = Cfg<1, 2, 8, 6, false, true>;
using SpM2 = Cfg<2, 4, 4, 4, false, true>;
using SpM3 = Cfg<3, 4, 4, 4, false, true>;
using SpM4 = Cfg<4, 4, 4, 4, false, true>;
// sm_90a wgmma (m64nNk16, N = M_T): m <= 32, m <= 64, m > 64 (128-row slices: the weights are
// streamed once for up to 128 rows).
using WgM2 = Cfg<2, 2, 8, 8, true, false, true>;
using WgM4 = Cfg<4, 2, 8, 6, true, false, true>;
using WgM8 = Cfg<8, 2, 8, 5, true, false, true>;
constexpr int kMaxTile = 128 * 128;  // M_T * N_T of the largest tile (scratch bound without a device)
static_assert(WgM8::M_T * WgM8::N_T <= kMaxTile && SpM4::M_T * SpM4::N_T <= kMaxTile && CfgM4::M_T * CfgM4::N_T <= kMaxTile,
              "kMaxTile");

struct Params {
  const uint4* b;     // packed codes
  const uint4* meta;  // 2:4 metadata (sparse kernels)
  const uint4* s;     // packed scales
  const uint4* z;     // packed zeros, or null (sym: 8)
  const uint4* a;     // x16 [m][k_pad]
  float* y;           // [m][n]
  float* partial;     // [grid][2][M_T * N_T] partial tiles
  unsigned* counters;  // [kMaxBlocks], zero between calls
  int fences;         // arrive_last's fences (count_fences())
  int m, n, k_pad, group;
  int n_tiles, k_tiles, units, per_block;
  int accumulate;
  int cluster_ks;  // 0: the k-split's partial tiles go through scratch; else see "Cluster sums"
};

using detail::cp_async;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::hfma2;  // f16x2 arithmetic on raw registers
using detail::hmul2;
using detail::hsub2;
using detail::lop3_and_or;

// f16x2 constants.
constexpr uint32_t kMaskLo = 0x000f000fu, kMaskHi = 0x00f000f0u, kExp = 0x64006400u;  // 1024
constexpr uint32_t kSixteenth = 0x2c002c00u;                                          // 1/16
constexpr uint32_t k960 = 0x63806380u;                                                // 960
constexpr uint32_t kSymLo = 0x64086408u;                                              // 1024 + 8
constexpr uint32_t kSymHi = 0xd480d480u;                                              // -(64 + 8)

// ---- x f32 -> f16 (gathered, zero-padded) ---------------------------------------------------------
__global__ void to_f16_kernel(const float* __restrict__ x, const int* __restrict__ perm, uint4* __restrict__ x16,
                              int m, int n_in, int k_pad, int vec) {
  detail::pdl_release();  // the GEMM may start its weight loads now; it waits for our writes
  const int chunks = k_pad / 8;
  const int64_t total = static_cast<int64_t>(m) * chunks;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(idx / chunks);
    const int k0 = static_cast<int>(idx % chunks) * 8;
    const float* xr = x + static_cast<int64_t>(row) * n_in;
    float v[8];
    if (vec && perm == nullptr && k0 + 8 <= n_in) {
      const float4 lo = *reinterpret_cast<const float4*>(xr + k0);
      const float4 hi = *reinterpret_cast<const float4*>(xr + k0 + 4);
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int k = k0 + e;
        v[e] = k < n_in ? xr[perm != nullptr ? perm[k] : k] : 0.f;
      }
    }
    uint4 o;
    const __half2 h0 = __floats2half2_rn(v[0], v[1]), h1 = __floats2half2_rn(v[2], v[3]);
    const __half2 h2 = __floats2half2_rn(v[4], v[5]), h3 = __floats2half2_rn(v[6], v[7]);
    std::memcpy(&o.x, &h0, 4);
    std::memcpy(&o.y, &h1, 4);
    std::memcpy(&o.z, &h2, 4);
    std::memcpy(&o.w, &h3, 4);
    x16[idx] = o;
  }
}

// ---- the GEMM -----------------------------------------------------------------------------------
// Cluster sums (gemm_kernel with Params::cluster_ks = ks > 0): the block's one slice `slice` is
// tile ns of row slice ms; every block of the cluster has its partial tile in shared memory at
// `smem` (wgmma: float4 i of thread t at ring float4 i * kThreads + t, where acc4 puts it; mma.sync:
// the f32 tile after the ring). Block `rank` adds y (when accumulating) and the ks tiles in rank
// order = block order for float4s [rank Q / ks, (rank + 1) Q / ks) of the tile and stores them. Not
// inlined: its registers stay out of the main loop's allocation (inlined, the 2:4 kernel at m > 48
// spilled more and ran 1-2% slower).
template <class C>
__device__ __noinline__ void cluster_sum(float* y, int m, int n, int slice, int n_tiles, bool accumulate, int ks,
                                         const uint4* smem) {
  const int tid = static_cast<int>(threadIdx.x);
  const int ns = slice % n_tiles, ms = slice / n_tiles;
  const int row0 = ms * C::M_T, rows = min(C::M_T, m - row0);
  const int rank = cluster_rank();
  cluster_sync();
  if constexpr (C::WG) {
    const float4* const tile = reinterpret_cast<const float4*>(smem);
    constexpr int Q = C::M_T / 8 * kThreads;
    for (int q = rank * Q / ks + tid; q < (rank + 1) * Q / ks; q += kThreads) {
      // Thread tq's acc4(i): x at (row r0, column c), y (r0 + 1, c), z (r0, c + 8), w (r0 + 1, c + 8).
      const int i = q / kThreads, tq = q % kThreads, lq = tq & 31;
      const int r0 = 8 * i + 2 * (lq & 3), cb = ns * C::N_T + 64 * (tq >> 7);
      if (r0 >= rows || cb >= n) continue;
      float* const y0 = y + static_cast<int64_t>(row0 + r0) * n + cb + 16 * ((tq >> 5) & 3) + (lq >> 2);
      const bool row1 = r0 + 1 < rows;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (accumulate) {
        v.x = __ldcg(y0), v.z = __ldcg(y0 + 8);
        if (row1) v.y = __ldcg(y0 + n), v.w = __ldcg(y0 + n + 8);
      }
      add_cluster_f4(v, tile + q, ks);
      y0[0] = v.x, y0[8] = v.z;
      if (row1) y0[n] = v.y, y0[n + 8] = v.w;
    }
  } else {
    const float* const tile = reinterpret_cast<const float*>(smem + C::STAGES * C::SLOT);
    constexpr int Q_ROW = C::N_T / 4, Q = C::M_T * Q_ROW;
    const int col0 = ns * C::N_T, cols4 = min(C::N_T, n - col0) / 4;
    for (int q = rank * Q / ks + tid; q < (rank + 1) * Q / ks; q += kThreads) {
      if (q / Q_ROW >= rows || q % Q_ROW >= cols4) continue;
      auto* const y4 = reinterpret_cast<float4*>(y + static_cast<int64_t>(row0 + q / Q_ROW) * n + col0 + 4 * (q % Q_ROW));
      float4 v = accumulate ? __ldcg(y4) : make_float4(0.f, 0.f, 0.f, 0.f);
      add_cluster_f4(v, reinterpret_cast<const float4*>(tile + (q / Q_ROW) * C::TS + 4 * (q % Q_ROW)), ks);
      *y4 = v;
    }
  }
  cluster_sync();  // the other blocks may still be reading our tile
}

template <class C>
__global__ void __launch_bounds__(kThreads, 1) gemm_kernel(const Params p) {
  extern __shared__ uint4 smem_raw[];
  // wgmma: the ring starts at the next 1 KiB boundary (C::SMEM has the slack).
  uint4* const smem = C::WG ? smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u) / 16 : smem_raw;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // mma.sync: warp (wn, wk) = (warp % NW, warp / NW). wgmma: warpgroup wn = warp / 4 owns the 64
  // columns [64 wn, 64 wn + 64) of the tile; its warp wq = warp % 4 holds rows 16 wq.. of the
  // m64 A operand = column block wq (word wq of the packed 16 bytes).
  const int wn = C::WG ? warp / 4 : warp % C::NW, wk = C::WG ? 0 : warp / C::NW, wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const int nb64 = p.n >> 6;
  const int u_begin = blockIdx.x * p.per_block;
  const int n_units = min(p.per_block, p.units - u_begin);
  const bool has_z = p.z != nullptr;
  const uint64_t policy = evict_first_policy();

  // Cursors (k tile, column tile, row slice) of the next unit to fetch and of the unit computed.
  int f_kt = u_begin % p.k_tiles, f_ns, f_ms;
  {
    const int s = u_begin / p.k_tiles;
    f_ns = s % p.n_tiles;
    f_ms = s / p.n_tiles;
  }
  int c_kt = f_kt, c_ns = f_ns, c_ms = f_ms;
  auto advance = [&](int& kt, int& ns, int& ms) {
    if (++kt == p.k_tiles) {
      kt = 0;
      if (++ns == p.n_tiles) {
        ns = 0;
        ++ms;
      }
    }
  };

  // Weights, scales and zeros of unit (kt, ns) into ring slot `slot`; column runs >= n are skipped.
  auto fetch_weights = [&](int slot, int kt, int ns) {
    uint4* sb = smem + slot * C::SLOT;
#pragma unroll
    for (int c = 0; c < C::B_CHUNKS / kThreads; ++c) {
      const int id = tid + c * kThreads;
      const int r = id / (C::NW * 32), rem = id % (C::NW * 32);
      const int nb = ns * C::NW + (rem >> 5);
      if (nb < nb64)
        cp_async_ef(sb + C::B_OFF + id, p.b + ((kt * C::KSTEPS + r) * nb64 + nb) * 32 + (rem & 31), policy);
    }
    if constexpr (C::SPARSE) {
      if (tid < C::M_CHUNKS) {
        const int r = tid / (C::NW * 16), rem = tid % (C::NW * 16);
        const int nb = ns * C::NW + (rem >> 4);
        if (nb < nb64)
          cp_async_ef(sb + C::M_OFF + tid, p.meta + ((kt * C::KSTEPS + r) * nb64 + nb) * 16 + (rem & 15), policy);
      }
    }
    const int gi = kt * C::K_T / p.group;
    if (tid < C::S_CHUNKS) {
      const int col = ns * C::N_T + tid * 8;
      if (col < p.n) cp_async(sb + C::S_OFF + tid, p.s + (gi * p.n + col) / 8);
    } else if (has_z && tid >= 64 && tid < 64 + C::Z_CHUNKS) {
      const int i = tid - 64, col = ns * C::N_T + i * 16;
      if (col < p.n) cp_async(sb + C::Z_OFF + i, p.z + (gi * p.n + col) / 16);
    }
  };
  // Activations of unit (kt, ms): rows >= m are zero-filled; chunk ch of row r is stored at
  // ch ^ (r & 7) so that ldmatrix's 8 row addresses hit 8 different bank groups. wgmma (xᵀ as the
  // K-major B operand, 128-byte swizzle): per k half h = ch / 8, 128-byte rows (row r at
  // h * M_T * 128 + r * 128 bytes), the 16-byte chunk ch % 8 at position (ch % 8) ^ (r & 7).
  auto fetch_act = [&](int slot, int kt, int ms) {
    uint4* sa = smem + slot * C::SLOT + C::A_OFF;
#pragma unroll
    for (int c = 0; c < (C::A_CHUNKS + kThreads - 1) / kThreads; ++c) {
      const int id = tid + c * kThreads;
      if (C::A_CHUNKS % kThreads == 0 || id < C::A_CHUNKS) {
        const int r = id / C::A_ROW_CHUNKS, ch = id % C::A_ROW_CHUNKS;
        const int row = ms * C::M_T + r;
        const bool ok = row < p.m;
        const uint4* src = p.a + static_cast<int64_t>(ok ? row : 0) * (p.k_pad / 8) + kt * C::A_ROW_CHUNKS + ch;
        const int dst = C::WG ? (ch >> 3) * C::M_T * 8 + r * 8 + ((ch & 7) ^ (r & 7))
                              : r * C::A_ROW_CHUNKS + (ch ^ (r & 7));
        cp_async_zfill(sa + dst, src, ok);
      }
    }
  };

  // Prologue: the first STAGES-1 units. Weights first (they do not depend on earlier kernels),
  // then wait for the previous grid (PDL), then the activations; one commit group per unit
  // (group 0 also holds all the prologue's weights).
  {
    int kt = f_kt, ns = f_ns, ms = f_ms;
#pragma unroll
    for (int st = 0; st < C::STAGES - 1; ++st) {
      if (st < n_units) fetch_weights(st, kt, ns);
      advance(kt, ns, ms);
    }
  }
  detail::pdl_wait();
#pragma unroll
  for (int st = 0; st < C::STAGES - 1; ++st) {
    if (st < n_units) fetch_act(st, f_kt, f_ms);
    cp_async_commit();
    advance(f_kt, f_ns, f_ms);
  }

  // wgmma: never written outside the wgmma (the first one of a slice runs with scale-d = 0, see
  // fresh), so that ptxas need not wait for the tensor cores to move them.
  float acc[C::MB][C::ACC_J][4];
  int fresh = 1;
  if constexpr (!C::WG) {
#pragma unroll
    for (int mb = 0; mb < C::MB; ++mb)
#pragma unroll
      for (int j = 0; j < C::ACC_J; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mb][j][c] = 0.f;
  }

  uint32_t af[C::FB][C::NX][4];  // x fragments (double-buffered over steps when C::DB)
  uint32_t bq[C::FB][4];         // weight words
  uint32_t mq[C::FB][2];         // 2:4 metadata (sparse)
  int xrows = C::M_T;            // rows of x in the unit's slice (sparse: 8-row blocks past it are skipped)
  // The unit's scales (s, s) and zero terms (1024 + z, -(64 + z)) per column block: entry
  // i = 2j + h is column 16j + 8h + g of the warp's 64. The next unit's raw scales and zeros are
  // read at the transition and expanded once its predecessor is done.
  uint32_t sc[8], zl[8], zh[8];
  uint4 sv_n;
  uint2 zv_n = make_uint2(0u, 0u);
#pragma unroll
  for (int i = 0; i < 8; ++i) zl[i] = kSymLo, zh[i] = kSymHi;

  // Fragments of step kk of ring slot `slot`: the lane's 16 bytes of weights (and 8 of metadata),
  // and x by ldmatrix.x4. Dense (x = A operand, 16 x 16 per m16 block): lanes 0-15 address rows
  // 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15. Sparse (x = B operand, 8 rows x 32 of k
  // per 8-row block): lane l addresses row l % 8 at k chunk l / 8.
  auto load_frags = [&](int buf, int slot, int kk) {
    const uint4* sb = smem + slot * C::SLOT;
    if constexpr (C::WG) {  // the warp's one word (x goes to the tensor cores from shared memory)
      bq[buf][0] = reinterpret_cast<const uint32_t*>(sb + C::B_OFF + (kk * C::NW + wn) * 32 + lane)[wq];
      return;
    }
    const uint4 q = sb[C::B_OFF + (kk * C::NW + wn) * 32 + lane];
    bq[buf][0] = q.x, bq[buf][1] = q.y, bq[buf][2] = q.z, bq[buf][3] = q.w;
    const uint4* sa = sb + C::A_OFF;
    if constexpr (C::SPARSE) {
      const uint2 e = reinterpret_cast<const uint2*>(sb + C::M_OFF)[(kk * C::NW + wn) * 32 + lane];
      mq[buf][0] = e.x, mq[buf][1] = e.y;
#pragma unroll
      for (int nb8 = 0; nb8 < C::NX; ++nb8) {
        const int r = 8 * nb8 + (lane & 7);
        const int ch = 4 * kk + (lane >> 3);
        if (8 * nb8 < xrows) ldmatrix_x4(af[buf][nb8], smem_u32(sa + r * C::A_ROW_CHUNKS + (ch ^ (lane & 7))));
      }
    } else {
#pragma unroll
      for (int mb = 0; mb < C::MB; ++mb) {
        const int r = 16 * mb + (lane & 15);
        const int ch = 2 * kk + (lane >> 4);
        ldmatrix_x4(af[buf][mb], smem_u32(sa + r * C::A_ROW_CHUNKS + (ch ^ (lane & 7))));
      }
    }
  };
  auto load_sz = [&](int slot) {
    const uint4* sb = smem + slot * C::SLOT;
    if constexpr (C::WG) {  // entries 2 wq, 2 wq + 1 only: scales in sv_n.x, zeros in zv_n.x's low half
      sv_n.x = reinterpret_cast<const uint32_t*>(sb + C::S_OFF + wn * 8 + g)[wq];
      if (has_z) zv_n.x = reinterpret_cast<const uint16_t*>(sb + C::Z_OFF)[(wn * 8 + g) * 4 + wq];
      return;
    }
    sv_n = sb[C::S_OFF + wn * 8 + g];
    if (has_z) zv_n = reinterpret_cast<const uint2*>(sb + C::Z_OFF)[wn * 8 + g];
  };
  auto expand_sz = [&]() {
    if constexpr (C::WG) {  // sc, zl, zh [0]: column 16 wq + g, [1]: column 16 wq + 8 + g
      sc[0] = __byte_perm(sv_n.x, 0, 0x1010);
      sc[1] = __byte_perm(sv_n.x, 0, 0x3232);
      if (has_z) {
        zl[0] = __byte_perm(zv_n.x, 0x64u, 0x4040u);
        zl[1] = __byte_perm(zv_n.x, 0x64u, 0x4141u);
        zh[0] = hsub2(k960, zl[0]);
        zh[1] = hsub2(k960, zl[1]);
      }
      return;
    }
    const uint32_t sw[4] = {sv_n.x, sv_n.y, sv_n.z, sv_n.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sc[2 * i] = __byte_perm(sw[i], 0, 0x1010);
      sc[2 * i + 1] = __byte_perm(sw[i], 0, 0x3232);
    }
    if (has_z) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t b = static_cast<uint32_t>(i & 3);
        zl[i] = __byte_perm(i < 4 ? zv_n.x : zv_n.y, 0x64u, 0x4040u | b | (b << 8));  // f16x2 1024 + z
        zh[i] = hsub2(k960, zl[i]);                                                  // -(64 + z)
      }
    }
  };
  // Word q of column block j (scale / zero entries e = 2j, 2j + 1) -> the f16x2 registers b00, b01
  // (column block 16j.., k 2t / 2t + 8) and b10, b11 (16j + 8..).
  auto dequant = [&](uint32_t q, int e, uint32_t& b00, uint32_t& b01, uint32_t& b10, uint32_t& b11) {
    const uint32_t lo0 = lop3_and_or<kMaskLo>(q, kExp), hi0 = lop3_and_or<kMaskHi>(q, kExp);
    q >>= 8;
    const uint32_t lo1 = lop3_and_or<kMaskLo>(q, kExp), hi1 = lop3_and_or<kMaskHi>(q, kExp);
    // lo: (1024 + q) - (1024 + z); hi: (1024 + 16q) / 16 - (64 + z): q - z exactly, then * s.
    b00 = hmul2(hsub2(lo0, zl[e]), sc[e]);
    b01 = hmul2(hfma2(hi0, kSixteenth, zh[e]), sc[e]);
    b10 = hmul2(hsub2(lo1, zl[e + 1]), sc[e + 1]);
    b11 = hmul2(hfma2(hi1, kSixteenth, zh[e + 1]), sc[e + 1]);
  };
  // wgmma: descriptor of k16 step kk of ring slot `slot`'s x tile (k half kk / 4, 32 bytes per step).
  auto x_desc = [&](int slot, int kk) {
    return sw128_desc(smem_u32(smem + slot * C::SLOT + C::A_OFF) + (kk >> 2) * C::M_T * 128 + (kk & 3) * 32);
  };
  constexpr int kWgGroup = C::M_T >= 128 ? 2 : 4;  // wgmma: k16 steps per commit group (measured)
  uint32_t ag[kWgGroup][4];        // wgmma: the A fragments of a group's steps
  auto compute = [&](int buf, int slot, int kk) {
    if constexpr (C::WG) {
      // The warp's word is column block wq = rows 16 wq.. of the m64 A operand: A fragment
      // {row g k 2t, row g+8 k 2t, row g k 2t+8, row g+8 k 2t+8} = {b00, b10, b01, b11}. Steps
      // go to the tensor cores in groups of kWgGroup (one commit group); the wait then retires
      // the previous group, so that the next group's dequantization overlaps this one's work and
      // may reuse the previous group's A registers (waiting for fewer groups than that makes
      // ptxas serialize the wgmmas: C7513). The ring slot refilled before a unit's last step is
      // then retired: its last group was followed by at least one more group and its wait.
      static_assert(C::KSW % kWgGroup == 0 && kWgGroup <= C::KSW / 2, "wgmma groups per unit");
      dequant(bq[buf][0], 0, ag[kk % kWgGroup][0], ag[kk % kWgGroup][2], ag[kk % kWgGroup][1],
              ag[kk % kWgGroup][3]);
      if (kk % kWgGroup == kWgGroup - 1) {
        wgmma_fence();
#pragma unroll
        for (int u = 0; u < kWgGroup; ++u)
          wgmma_rs(acc, ag[u], x_desc(slot, kk - kWgGroup + 1 + u), u == 0 && fresh ? 0 : 1);
        fresh = 0;
        wgmma_commit();
        wgmma_wait<1>();
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t b00, b01, b10, b11;
        dequant(bq[buf][j], 2 * j, b00, b01, b10, b11);
        if constexpr (C::SPARSE) {
          // Word j is column block f = j: A = {a0a1, a2a3, a4a5, a6a7} = {b00, b10, b01, b11};
          // accumulator [nb8 / 2][2f + nb8 % 2] is columns 16f.. x rows 8 nb8...
          const uint32_t e = mq[buf][j >> 1];
#pragma unroll
          for (int nb8 = 0; nb8 < C::NX; ++nb8) {
            if (8 * nb8 < xrows) {
              if (j & 1)
                mma_sp_16832<1>(acc[nb8 >> 1][2 * j + (nb8 & 1)], b00, b10, b01, b11, af[buf][nb8], e);
              else
                mma_sp_16832<0>(acc[nb8 >> 1][2 * j + (nb8 & 1)], b00, b10, b01, b11, af[buf][nb8], e);
            }
          }
        } else {
#pragma unroll
          for (int mb = 0; mb < C::MB; ++mb) {
            mma_16816(acc[mb][2 * j], af[buf][mb], b00, b01);
            mma_16816(acc[mb][2 * j + 1], af[buf][mb], b10, b11);
          }
        }
      }
    }
  };

  // Block b's partial tile of slice s in scratch: slot 0 if s is the block's first slice, else 1
  // (its last).
  auto partial_of = [&](int s, int b) {
    const int slot = (b * p.per_block / p.k_tiles == s) ? 0 : 1;
    return reinterpret_cast<float4*>(p.partial + static_cast<int64_t>(b * 2 + slot) * (C::M_T * C::N_T));
  };
  // Counts this block's partial tile of slice s (covering blocks b_first..b_last) in; true in the
  // block that completes the count (it then leaves the counter at 0).
  auto arrive_last = [&](int b_first, int b_last) {
    return detail::arrive_last(p.counters + b_last, static_cast<unsigned>(b_last - b_first + 1), p.fences != 0);
  };
  auto finish_slice_wg = [&](int ns, int ms) {
    // Straight from the accumulators: acc[i / 2][i % 2][c] is y row 8i + 2t + (c & 1) of the
    // slice, column 64 wn + 16 wq + g + 8 (c >> 1) of the tile. Scalar stores to y (each warp
    // store fills 32-byte sectors); partial tiles in fragment order (float4 i of thread tid at
    // i * kThreads + tid), summed by the last block in block order as below.
    wgmma_wait<0>();
    const int s = ms * p.n_tiles + ns;
    const int b_first = s * p.k_tiles / p.per_block;
    const int b_last = ((s + 1) * p.k_tiles - 1) / p.per_block;
    const int row0 = ms * C::M_T, rows = min(C::M_T, p.m - row0);
    const int col = ns * C::N_T + 64 * wn + 16 * wq + g;
    const bool col_ok = ns * C::N_T + 64 * wn < p.n;
    constexpr int NI = C::M_T / 8;
    auto yp = [&](int i, int c) {
      return p.y + static_cast<int64_t>(row0 + 8 * i + 2 * t + (c & 1)) * p.n + col + 8 * (c >> 1);
    };
    auto acc4 = [&](int i) {
      return make_float4(acc[i >> 1][i & 1][0], acc[i >> 1][i & 1][1], acc[i >> 1][i & 1][2], acc[i >> 1][i & 1][3]);
    };
    auto ok = [&](int i, int c) { return col_ok && 8 * i + 2 * t + (c & 1) < rows; };
    if (b_first == b_last) {
#pragma unroll
      for (int i = 0; i < NI; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (ok(i, c)) *yp(i, c) = p.accumulate ? __ldcg(yp(i, c)) + acc[i >> 1][i & 1][c] : acc[i >> 1][i & 1][c];
      return;
    }
    if (C::CLUSTER && p.cluster_ks > 0) {  // this block's only slice: its tile goes to the ring (free by now)
      cp_async_wait<0>();
      __syncthreads();  // both warpgroups are past their last wgmma
      float4* const mine = reinterpret_cast<float4*>(smem);
#pragma unroll
      for (int i = 0; i < NI; ++i) mine[i * kThreads + tid] = acc4(i);
      return;  // summed by cluster_sum after the main loop
    }
    {
      float4* part = partial_of(s, blockIdx.x);
#pragma unroll
      for (int i = 0; i < NI; ++i)
        if (8 * i < rows) __stcg(part + i * kThreads + tid, acc4(i));
    }
    if (!arrive_last(b_first, b_last)) return;
    float v[NI][4];
#pragma unroll
    for (int i = 0; i < NI; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) v[i][c] = p.accumulate && ok(i, c) ? __ldcg(yp(i, c)) : 0.f;
    // Per partial, all NI loads are issued before the first add (unconditionally: entries of rows
    // >= m are summed but never stored), so that their latencies overlap.
    for (int b = b_first; b <= b_last; ++b) {
      float4 w[NI];
      if (b == static_cast<int>(blockIdx.x)) {
#pragma unroll
        for (int i = 0; i < NI; ++i) w[i] = acc4(i);
      } else {
        const float4* part = partial_of(s, b);
#pragma unroll
        for (int i = 0; i < NI; ++i) w[i] = __ldcg(part + i * kThreads + tid);
      }
#pragma unroll
      for (int i = 0; i < NI; ++i) v[i][0] += w[i].x, v[i][1] += w[i].y, v[i][2] += w[i].z, v[i][3] += w[i].w;
    }
#pragma unroll
    for (int i = 0; i < NI; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (ok(i, c)) *yp(i, c) = v[i][c];
  };
  // End of this block's part of a slice. The k-warps add their sums into a shared-memory tile in
  // a fixed order; then all threads move the tile in float4: straight into y when the block covers
  // the slice's whole k range, else into a partial tile in scratch, counted; the block completing
  // the count adds y (when accumulating) and all partial tiles in block order, so the result does
  // not depend on the arrival order.
  auto finish_slice = [&](int ns, int ms) {
    float* tile = reinterpret_cast<float*>(smem + C::STAGES * C::SLOT);
#pragma unroll
    for (int w2 = 0; w2 < C::KW; ++w2) {
      if (wk == w2) {
        if constexpr (C::SPARSE) {
          // acc[nb8 / 2][2f + nb8 % 2][c]: row 8 nb8 + 2t + (c & 1), column 16f + 8 (c >> 1) + g.
#pragma unroll
          for (int nb8 = 0; nb8 < C::NX; ++nb8)
#pragma unroll
            for (int f = 0; f < 4; ++f)
#pragma unroll
              for (int c = 0; c < 4; ++c) {
                float* d = tile + (8 * nb8 + 2 * t + (c & 1)) * C::TS + wn * 64 + 16 * f + 8 * (c >> 1) + g;
                const float v = acc[nb8 >> 1][2 * f + (nb8 & 1)][c];
                *d = w2 > 0 ? *d + v : v;
              }
        } else {
#pragma unroll
          for (int mb = 0; mb < C::MB; ++mb)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
              for (int j = 0; j < 8; ++j) {
                float2* d = reinterpret_cast<float2*>(tile + (16 * mb + 8 * h + g) * C::TS + wn * 64 + 8 * j + 2 * t);
                float2 v = make_float2(acc[mb][j][2 * h], acc[mb][j][2 * h + 1]);
                if (w2 > 0) {
                  const float2 o = *d;
                  v.x = o.x + v.x;
                  v.y = o.y + v.y;
                }
                *d = v;
              }
        }
      }
      __syncthreads();
    }
    const int s = ms * p.n_tiles + ns;
    const int b_first = s * p.k_tiles / p.per_block;
    const int b_last = ((s + 1) * p.k_tiles - 1) / p.per_block;
    const int col0 = ns * C::N_T, row0 = ms * C::M_T;
    const int rows = min(C::M_T, p.m - row0);
    const int cols4 = min(C::N_T, p.n - col0) / 4;
    float* yt = p.y + static_cast<int64_t>(row0) * p.n + col0;
    // Thread tid handles float4 q = tid + u * kThreads (row q / Q_ROW, column 4 (q % Q_ROW)).
    constexpr int Q_ROW = C::N_T / 4;
    constexpr int U = C::M_T * Q_ROW / kThreads;
    static_assert(C::M_T * Q_ROW % kThreads == 0, "tile float4 per thread");
    auto tile4 = [&](int q) {
      return *reinterpret_cast<const float4*>(tile + (q / Q_ROW) * C::TS + 4 * (q % Q_ROW));
    };
    auto ok = [&](int q) { return q / Q_ROW < rows && q % Q_ROW < cols4; };
    auto y4 = [&](int q) {
      return reinterpret_cast<float4*>(yt + static_cast<int64_t>(q / Q_ROW) * p.n + 4 * (q % Q_ROW));
    };
    if (b_first == b_last) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = tid + u * kThreads;
        if (ok(q)) {
          float4 v = tile4(q);
          if (p.accumulate) {
            const float4 o = __ldcg(y4(q));
            v.x = o.x + v.x, v.y = o.y + v.y, v.z = o.z + v.z, v.w = o.w + v.w;
          }
          *y4(q) = v;
        }
      }
      return;
    }
    if (C::CLUSTER && p.cluster_ks > 0) return;  // the tile stays in shared memory for cluster_sum after the main loop
    {
      float4* part = partial_of(s, blockIdx.x);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = tid + u * kThreads;
        if (ok(q)) __stcg(part + q, tile4(q));
      }
    }
    if (!arrive_last(b_first, b_last)) return;
    // y (when accumulating), then the partials in block order; kP partials' loads are issued
    // together so that their latencies overlap (about 16 float4 in flight per thread).
    constexpr int kP = std::clamp(16 / U, 1, 8);
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int q = tid + u * kThreads;
      v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (p.accumulate && ok(q)) v[u] = __ldcg(y4(q));
    }
    for (int b0 = b_first; b0 <= b_last; b0 += kP) {
      float4 w[kP][U];
#pragma unroll
      for (int j = 0; j < kP; ++j) {
        const int b = b0 + j;
        const float4* part = partial_of(s, b);
        const bool mine = b == static_cast<int>(blockIdx.x);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int q = tid + u * kThreads;
          w[j][u] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (b <= b_last && ok(q)) w[j][u] = mine ? tile4(q) : __ldcg(part + q);
        }
      }
#pragma unroll
      for (int j = 0; j < kP; ++j)
#pragma unroll
        for (int u = 0; u < U; ++u) v[u].x += w[j][u].x, v[u].y += w[j][u].y, v[u].z += w[j][u].z, v[u].w += w[j][u].w;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int q = tid + u * kThreads;
      if (ok(q)) *y4(q) = v[u];
    }
  };

  // Main loop over this block's units.
  cp_async_wait<C::STAGES - 2>();
  if constexpr (C::WG) fence_proxy_async();
  __syncthreads();
  if constexpr (C::DB) load_frags(0, 0, wk * C::KSW);
  load_sz(0);
  expand_sz();
  int slot = 0;
  for (int i = 0; i < n_units; ++i) {
    const int next = slot + 1 == C::STAGES ? 0 : slot + 1;
    if constexpr (C::SPARSE) xrows = min(C::M_T, p.m - c_ms * C::M_T);  // fragments are loaded per step
    // Before the unit's last step: unit i + 1 has landed and every warp is done reading the slot
    // of unit i - 1, so refill that slot with unit i + STAGES - 1.
    auto transition = [&]() {
      cp_async_wait<C::STAGES - 3>();
      if constexpr (C::WG) fence_proxy_async();
      __syncthreads();
      if (i + C::STAGES - 1 < n_units) {
        const int fslot = slot == 0 ? C::STAGES - 1 : slot - 1;
        fetch_weights(fslot, f_kt, f_ns);
        fetch_act(fslot, f_kt, f_ms);
      }
      cp_async_commit();
      advance(f_kt, f_ns, f_ms);
    };
#pragma unroll
    for (int j = 0; j < C::KSW; ++j) {
      if constexpr (C::DB) {
        if (j + 1 < C::KSW) {
          load_frags((j + 1) & 1, slot, wk * C::KSW + j + 1);
        } else {
          transition();
          load_frags((j + 1) & 1, next, wk * C::KSW);  // unit i + 1's first step
          load_sz(next);
        }
        compute(j & 1, slot, wk * C::KSW + j);
      } else {
        if (j + 1 == C::KSW) transition();
        load_frags(0, slot, wk * C::KSW + j);
        if (j + 1 == C::KSW) load_sz(next);
        compute(0, slot, wk * C::KSW + j);
      }
    }
    expand_sz();
    if (c_kt == p.k_tiles - 1 || i == n_units - 1) {
      if constexpr (C::WG) {
        finish_slice_wg(c_ns, c_ms);
        fresh = 1;  // the next unit's first wgmma overwrites the accumulators
      } else {
        finish_slice(c_ns, c_ms);
      }
      if constexpr (!C::WG)
#pragma unroll
        for (int mb = 0; mb < C::MB; ++mb)
#pragma unroll
          for (int j = 0; j < C::ACC_J; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mb][j][c] = 0.f;
    }
    advance(c_kt, c_ns, c_ms);
    slot = next;
  }
  if constexpr (C::WG) wgmma_wait<0>();  // (finish_slice_wg has waited already: tells ptxas so)
  cp_async_wait<0>();
  if (C::CLUSTER && p.cluster_ks > 0)
    cluster_sum<C>(p.y, p.m, p.n, static_cast<int>(blockIdx.x) * p.per_block / p.k_tiles, p.n_tiles, p.accumulate != 0,
                   p.cluster_ks, smem);
}

// ---- host side ----------------------------------------------------------------------------------
struct Plan {
  int mb, m_t, n_t, k_t;
};
template <class C>
constexpr Plan plan_of() {
  return {C::MB, C::M_T, C::N_T, C::K_T};
}
using detail::env_zero;

// wgmma for m > 64: 128-row slices stream the weights once, but where a block gets few units of
// them (at most kShortRun: Llama's 4096 x 4096 gets 8 on 132 SMs) the k-split's fixed costs (four
// partial tiles of 64 KiB per slice there) outweigh that, and 64-row slices (half the partial
// tiles, a k-split of two) measured faster (bench/RESULTS.md, twenty-second session).
// LITHE_MARLIN_WG_ROWS=64 or 128 (a benchmark knob) sets the slice height for every shape.
constexpr int64_t kShortRun = 8;
Plan plan_for(const PackedWeight& w, int64_t m, int sms, bool wg) {
  const bool sparse = w.fmt.sparse24;
  if (wg) {
    if (m <= 32) return plan_of<WgM2>();
    if (m <= 64) return plan_of<WgM4>();
    static const int rows = detail::env_knob("LITHE_MARLIN_WG_ROWS");
    if (rows == 64 || rows == 128) return rows == 64 ? plan_of<WgM4>() : plan_of<WgM8>();
    constexpr Plan big = plan_of<WgM8>();
    const int64_t units = detail::ceil_div(m, big.m_t) * detail::ceil_div(w.n_out, big.n_t) * detail::ceil_div(w.n_in, big.k_t);
    return detail::ceil_div(units, std::max(sms, 1)) <= kShortRun ? plan_of<WgM4>() : big;
  }
  if (m <= 16) return sparse ? plan_of<SpM1>() : plan_of<CfgM1>();
  if (m <= 32) return sparse ? plan_of<SpM2>() : plan_of<CfgM2>();
  if (m <= 48) return sparse ? plan_of<SpM3>() : plan_of<CfgM3>();
  return sparse ? plan_of<SpM4>() : plan_of<CfgM4>();
}

constexpr int kMaxDevices = 64;
using detail::DeviceFacts;
// detail::device_facts with the SM count capped at kMaxBlocks (the grid this GEMM launches).
Status marlin_facts(DeviceFacts& out) {
  LITHE_TRY(detail::device_facts(out));
  out.sms = std::min(out.sms, kMaxBlocks);
  return Status::ok();
}

// The wgmma kernels run on sm_90 for m >= kWgMinM, dense weights, unless LITHE_MARLIN_WGMMA=0,
// and only where the binary holds sm_90a code for them: 90a among the build's targets
// (LITHE_BUILT_SM90A, src/CMakeLists.txt; a plain sm_90 build compiles them to a trap, see
// marlin_ptx.cuh: wgmma_rs) and the kernel's code for this device is sm_90 code, not sm_80 code
// run on it.
constexpr int64_t kWgMinM = 17;
bool wgmma_on(const DeviceFacts& d, int64_t m, bool sparse) {
#if !defined(LITHE_BUILT_SM90A)
  return false;
#endif
  static const bool env_off = env_zero("LITHE_MARLIN_WGMMA");
  if (env_off || sparse || m < kWgMinM || d.major != 9) return false;
  static std::array<std::atomic<int>, kMaxDevices> built{};  // 0: not asked yet, 1: yes, 2: no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return false;
  }
  if (built[dev].load(std::memory_order_acquire) == 0) {
    cudaFuncAttributes a{};
    const bool ok = cudaFuncGetAttributes(&a, gemm_kernel<WgM8>) == cudaSuccess && a.binaryVersion == 90;
    if (!ok) (void)cudaGetLastError();
    built[dev].store(ok ? 1 : 2, std::memory_order_release);
  }
  return built[dev].load(std::memory_order_acquire) == 1;
}

bool pdl_on(const DeviceFacts& d) {
  static const bool env_off = env_zero("LITHE_MARLIN_PDL");
  return d.major >= 9 && !env_off;
}

int64_t align256(int64_t v) { return (v + 255) / 256 * 256; }

struct ScratchLayout {
  int64_t x16_off, partial_off, total;
};
ScratchLayout scratch_layout(const PackedWeight& w, int64_t m, int sms, bool wg) {
  const Plan pl = plan_for(w, m, sms, wg);
  ScratchLayout l;
  l.x16_off = kCounterBytes;
  l.partial_off = l.x16_off + align256(m * padded_k(w.n_in) * 2);
  l.total = l.partial_off + static_cast<int64_t>(sms) * 2 * pl.m_t * pl.n_t * 4;
  return l;
}

// Cluster sums (gemm_kernel's "Cluster sums"): the k-split count ks when every slice's k range is
// exactly ks blocks' units (2 <= ks <= kMaxClusterKs; then each block has one slice), the device is
// sm_90 running sm_90 code of the kernel, LITHE_MARLIN_CLUSTER is not 0 and all grid / ks clusters
// fit on the device at once (detail::max_active_clusters); else 0. cfg: the launch without attributes.
template <class C>
int cluster_ks_for(const Params& p, int grid, const DeviceFacts& d, const cudaLaunchConfig_t& cfg) {
  static const bool env_off = env_zero("LITHE_MARLIN_CLUSTER");
  if (!C::CLUSTER || env_off || d.major != 9 || p.k_tiles % p.per_block != 0) return 0;
  const int ks = p.k_tiles / p.per_block;
  if (ks < 2 || ks > kMaxClusterKs || grid % ks != 0) return 0;
  return detail::max_active_clusters(reinterpret_cast<const void*>(gemm_kernel<C>), cfg, ks) >= grid / ks ? ks : 0;
}

template <class C>
Status launch_gemm(const Params& p, int grid, bool pdl, const DeviceFacts& d, cudaStream_t s) {
  if (C::SMEM > static_cast<size_t>(d.smem_optin))
    return Status(StatusCode::unsupported, "marlin: the " + std::to_string(C::M_T) + "-row tile needs " +
                                               std::to_string(C::SMEM) + " bytes of shared memory; the device allows " +
                                               std::to_string(d.smem_optin));
  static std::array<std::atomic<bool>, kMaxDevices> opted{};
  int dev = 0;
  (void)cudaGetDevice(&dev);
  auto* kernel = gemm_kernel<C>;
  if (!opted[dev].load(std::memory_order_acquire)) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(C::SMEM));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(StatusCode::internal, std::string("marlin: cudaFuncSetAttribute: ") + cudaGetErrorString(e));
    }
    opted[dev].store(true, std::memory_order_release);
  }
  cudaLaunchConfig_t cfg{};  // for the cluster query
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = C::SMEM;
  Params q = p;
  q.cluster_ks = cluster_ks_for<C>(p, grid, d, cfg);
  detail::launch_with(pdl, q.cluster_ks, kernel, cfg.gridDim, cfg.blockDim, C::SMEM, s, q);
  return detail::launched("marlin gemm_kernel");
}

}  // namespace
}  // namespace marlin

int64_t marlin_scratch_bytes(const PackedWeight& w, int64_t m) {
  detail::DeviceFacts d;
  m = std::max<int64_t>(m, 1);
  if (!marlin::marlin_facts(d).is_ok()) {  // an upper bound: the largest grid of the largest tiles
    const marlin::ScratchLayout l = marlin::scratch_layout(w, m, marlin::kMaxBlocks, false);
    return l.partial_off + int64_t{marlin::kMaxBlocks} * 2 * marlin::kMaxTile * 4;
  }
  return marlin::scratch_layout(w, m, d.sms, marlin::wgmma_on(d, m, w.fmt.sparse24)).total;
}

Status marlin_linear(const PackedWeight& w, const void* w_dev, const float* x, int64_t m, float* y, bool accumulate,
                     void* scratch, int64_t scratch_bytes, Stream stream) {
  using namespace marlin;
  if (w.layout != kLayoutMarlin)
    return detail::bad_arg("marlin_linear: weight layout " + std::to_string(w.layout) +
                           " is not the Marlin layout (pack it with pack_marlin)");
  LITHE_TRY(marlin_supports(w.fmt, w.n_out, w.n_in));
  if (m < 1 || m > (int64_t{1} << 24))
    return detail::bad_arg("marlin_linear: row count " + std::to_string(m) + " is not in 1..2^24");
  if (w_dev == nullptr || x == nullptr || y == nullptr || scratch == nullptr)
    return detail::bad_arg("marlin_linear: null weight, x, y or scratch pointer");
  if (reinterpret_cast<uintptr_t>(w_dev) % 16 != 0 || reinterpret_cast<uintptr_t>(scratch) % 256 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return detail::bad_arg("marlin_linear: the weights and y must be 16-byte aligned, scratch 256-byte aligned");
  DeviceFacts d;
  LITHE_TRY(marlin_facts(d));
  const bool wg = wgmma_on(d, m, w.fmt.sparse24);
  const ScratchLayout sl = scratch_layout(w, m, d.sms, wg);
  if (scratch_bytes < sl.total)
    return detail::bad_arg("marlin_linear: scratch of " + std::to_string(scratch_bytes) + " bytes is too small for " +
                           std::to_string(m) + " rows of [" + std::to_string(w.n_out) + ", " + std::to_string(w.n_in) +
                           "] (needs " + std::to_string(sl.total) + ", see marlin_scratch_bytes)");
  const Plan pl = plan_for(w, m, d.sms, wg);
  const int64_t k_pad = padded_k(w.n_in);
  const int64_t n_tiles = detail::ceil_div(w.n_out, pl.n_t);
  const int64_t k_tiles = detail::ceil_div(w.n_in, pl.k_t);
  const int64_t m_slices = detail::ceil_div(m, pl.m_t);
  const int64_t units = m_slices * n_tiles * k_tiles;
  if (units >= (int64_t{1} << 31) / 2)
    return detail::bad_arg("marlin_linear: " + std::to_string(m) + " rows of [" + std::to_string(w.n_out) + ", " +
                           std::to_string(w.n_in) + "] is too large a problem (32-bit unit indexing)");
  const int64_t per_block = detail::ceil_div(units, d.sms);
  const int64_t grid = detail::ceil_div(units, per_block);

  auto* base = static_cast<uint8_t*>(scratch);
  const auto* wb = static_cast<const uint8_t*>(w_dev);
  auto* x16 = reinterpret_cast<uint4*>(base + sl.x16_off);

  // x -> f16 (gathered by perm, zero-padded to k_pad).
  {
    const int* perm = w.has_perm ? reinterpret_cast<const int*>(wb + w.section[kSecPerm]) : nullptr;
    const int64_t chunks = m * (k_pad / 8);
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>(detail::ceil_div(chunks, threads), int64_t{d.sms} * 8));
    const int vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 ? 1 : 0;
    to_f16_kernel<<<blocks, threads, 0, stream>>>(x, perm, x16, static_cast<int>(m), static_cast<int>(w.n_in),
                                                  static_cast<int>(k_pad), vec);
    LITHE_TRY(detail::launched("marlin to_f16_kernel"));
  }

  Params p{};
  p.b = reinterpret_cast<const uint4*>(wb + w.section[kSecCodes]);
  p.meta = reinterpret_cast<const uint4*>(wb + w.section[kSecMeta]);
  p.s = reinterpret_cast<const uint4*>(wb + w.section[kSecScales]);
  p.z = w.fmt.sym ? nullptr : reinterpret_cast<const uint4*>(wb + w.section[kSecZeros]);
  p.a = x16;
  p.y = y;
  p.partial = reinterpret_cast<float*>(base + sl.partial_off);
  p.counters = reinterpret_cast<unsigned*>(base);
  p.fences = detail::count_fences() ? 1 : 0;
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(w.n_out);
  p.k_pad = static_cast<int>(k_pad);
  p.group = static_cast<int>(w.fmt.group);
  p.n_tiles = static_cast<int>(n_tiles);
  p.k_tiles = static_cast<int>(k_tiles);
  p.units = static_cast<int>(units);
  p.per_block = static_cast<int>(per_block);
  p.accumulate = accumulate ? 1 : 0;
  const bool pdl = pdl_on(d);
  const int gr = static_cast<int>(grid);
  if (w.fmt.sparse24) {
    switch (pl.mb) {
      case 1: return launch_gemm<SpM1>(p, gr, pdl, d, stream);
      case 2: return launch_gemm<SpM2>(p, gr, pdl, d, stream);
      case 3: return launch_gemm<SpM3>(p, gr, pdl, d, stream);
      default: return launch_gemm<SpM4>(p, gr, pdl, d, stream);
    }
  }
  if (wg) {
    switch (pl.mb) {
      case 2: return launch_gemm<WgM2>(p, gr, pdl, d, stream);
      case 4: return launch_gemm<WgM4>(p, gr, pdl, d, stream);
      default: return launch_gemm<WgM8>(p, gr, pdl, d, stream);
    }
  }
  switch (pl.mb) {
    case 1: return launch_gemm<CfgM1>(p, gr, pdl, d, stream);
    case 2: return launch_gemm<CfgM2>(p, gr, pdl, d, stream);
    case 3: return launch_gemm<CfgM3>(p, gr, pdl, d, stream);
    default: return launch_gemm<CfgM4>(p, gr, pdl, d, stream);
  }
}

}  // namespace lithe::cuda

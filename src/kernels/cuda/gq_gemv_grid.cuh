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
//   is issued before the previous one is multiplied. Where it helps (gq_gemv.cu: prefetch_batches),
//   lane 0 also asks L2 for the batch after each batch it loads (and, before the wait, for the
//   second batch): more of the stream in flight than the registers hold.
// - Where the group size allows (M <= 4), a block's full batches run a copy of the loop with every
//   group run's start known at compile time ("Static group runs" in gemv_kernel): no branches.
// - After the wait the block stages its k-range of x once for its 8 tiles (at M = 16, where that
//   would take more than kMaxStagedBytes, in passes: pass_of), into shared memory as MMA
//   B fragments: each value gathered by perm (act-order), times the norm weight (folded RMSNorm;
//   at M <= 8 copied into shared memory before the wait),
//   zero past n_in, and split into f16 hi = f16(x) and lo = f16(x - hi), so hi + lo carries ~22
//   bits of x. (Staging per 16-row tile instead cost more instructions than the weights: ncu, H100.)
//   The block also sums x^2 over its range, in a loop over columns that is the same for every m.
// - Fragment rows n of B: n < M is hi of x row n, M <= n < 2M lo of x row n - M (x rows >= m are
//   zero). M <= 4: one n8 block (an M = 1 MMA wastes 6 of its 8 columns, which costs nothing here:
//   the tensor cores are idle otherwise); M = 8, 16: 2M / 8 blocks.
// - Each warp's sums go through shared memory to one thread per (x row, item row). With KS = 1 that
//   thread applies the epilogue; otherwise the block writes its partial sums to scratch and the
//   last block of the item to arrive (a counter, reset by that block: detail::arrive_last, one
//   acquire-release atomic per block instead of a fence in every thread, made Llama-2-7B int4
//   decode 4.5% faster on an H100) adds the KS partials in ks
//   order (deterministic), zeroes them (one scratch serves launches of every shape: it must be all
//   zero between launches) and applies the epilogue: store / accumulate / swiglu, times 1/rms
//   under a folded norm. rope_kv (q, k, v): the item's finished rows go to shared memory first, then
//   pair by pair through the rotation into y and the KV cache (rope.cuh, as the matvec kernel).
// - Cluster sums (sm_90, Args::cluster; host: cluster_for). Where 2 <= KS <= 8 and every item's
//   blocks fit on the device at once as one thread-block cluster (with room to spare), they are
//   launched so, and instead of the scratch, counters and last block, each block keeps its partial
//   sums in its shared memory; after a cluster barrier block r adds the KS blocks' sums of its KS-th
//   of the item's outputs in ks order through distributed shared memory (the same additions in the
//   same order: the same bits) and applies the epilogue (rope_kv: block 0 takes the whole item); a
//   second barrier keeps every block's sums alive until read. LITHE_GEMV_CLUSTER=0 turns it off.
// - Deferred residual sums (Args::acc_add, acc_fold, acc_in; cuda_gq.h: GemvResidual). An
//   accumulate launch with acc_add needs no scratch, counter or last block: every block adds its
//   partial sums, as 2^-32 fixed point (gq_gemv_math.cuh: to_fixed), into the int64 accumulator
//   with red.add and exits (integer sums: the same bits in any order). A launch reading that
//   residual gets acc_in and reads x + acc (x_in; staged and squared alike); the next accumulate
//   launch folds the accumulator into its y (acc_fold, a share per block, loaded before x is staged
//   and stored after). On an H100 the o and down launches' scratch sums and epilogues took ~4 us of
//   a Llama-2-7B int4 layer's 65 (bench/RESULTS.md, twenty-fifth session).
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
// - 2:4 sparse int4 (SP; gq_gemv_layout.h): the codes are the kept half, the sparse A operand of
//   mma.sp m16n8k32 with the same fragment order and dequantization; each code k16 block is one
//   mma.sp over 32 columns of x (two staged k16 blocks: one uint4 per lane), its meta word loaded
//   beside the codes (Chunk::hi). Block ranges, staging and the x^2 sums count columns of x, twice
//   the code columns. On an H100 a Llama-2-7B 2:4 + int4 g128 decode runs 15% faster than int4 g128
//   (bench/RESULTS.md, twenty-sixth session).
// Instantiations: bits {2, 3, 4, 8} and 2:4 int4 x M {1, 2, 4, 8, 16} (m rounded up; x rows >= m are
// zero) x {one to three matrices, act-order, swiglu}.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/gq_gemv_math.cuh"

namespace lithe::cuda::gemv_impl {

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
    t.hp[r] = mt.hi + slot0;  // int3's hi bits or 2:4 meta words (else never read)
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

// Issues the batch at chunk b of this warp's range [.., end). GU < 0: any batch, every unit's
// record. Static group runs (gemv_kernel; GU >= 0): every chunk of the batch is below end unless
// !FULL, and only the records that start a group of GU units (none for GU = 0).
template <int BITS, bool SP, int R, int U, int GU = -1, bool FULL = false>
__device__ __forceinline__ void load_batch(const Geo& g, const Tiles<R>& t, int b, int end, Batch<BITS, R, U>& bt) {
  using C = Codec<BITS, SP>;
  // The batch's lane pointers once (one wide multiply-add each); chunk u is then an immediate offset.
  const uint4* cb[R];
  const uint2* hb[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    cb[r] = t.cp[r] + static_cast<uint32_t>(b) * 32u;
    hb[r] = C::kHi || C::kMeta ? t.hp[r] + static_cast<uint32_t>(b) * 32u : nullptr;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = b + u;
    if (FULL || c < end)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        bt.v[r][u].lo = ld_stream(cb[r] + u * 32);
        if constexpr (C::kHi || C::kMeta) bt.v[r][u].hi = ld_stream(hb[r] + u * 32);
#pragma unroll
        for (int k = 0; k < C::kUnits; ++k) {
          const int unit = min(c * C::kUnits + k, g.units - 1);  // a padding unit: any record
          if constexpr (GU < 0)
            bt.rec[r][u][k] = __ldg(t.rp[r] + static_cast<uint32_t>(group_of(g, unit)) * 8u);
          else if constexpr (GU > 0)
            if ((u * C::kUnits + k) % GU == 0)  // (the batch starts a group)
              bt.rec[r][u][k] = __ldg(t.rp[r] + static_cast<uint32_t>(unit / GU) * 8u);
        }
      }
  }
}

// Asks L2 for the batch at chunk b of this warp's range [.., end) (lane 0: the codes, int3's high
// bits or 2:4 meta words and the records of the batch's groups of each of the R tiles), so that more
// of the stream is in flight than the registers hold (Args::pf batches ahead of the loads).
template <int BITS, bool SP, int R, int U>
__device__ __forceinline__ void prefetch_batch(const Geo& g, const Tiles<R>& t, int b, int end, int lane) {
  using C = Codec<BITS, SP>;
  if (lane != 0 || b >= end) return;
  const uint32_t n = static_cast<uint32_t>(min(U, end - b));
  const int g0 = group_of(g, b * C::kUnits), g1 = group_of(g, min((b + static_cast<int>(n)) * C::kUnits, g.units) - 1);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    detail::prefetch_l2(t.cp[r] + static_cast<uint32_t>(b) * 32u, n * 512u);
    if constexpr (C::kHi || C::kMeta) detail::prefetch_l2(t.hp[r] + static_cast<uint32_t>(b) * 32u, n * 256u);
    detail::prefetch_l2(t.rp[r] + static_cast<uint32_t>(g0) * 8u, static_cast<uint32_t>(g1 - g0 + 1) * 64u);
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

// Units per group for static group runs (gemv_kernel) over units [u0, u1): 0 where they lie in one
// group, 1, 2 or 4 where every group has that many units and u0 starts one, else -1 (gemv_kernel
// runs no copy for 1, group 32: it spilled; dropping the 1 here re-allocated the kernel's registers,
// which the device could not re-time in the thirty-second session). (A padding unit that lands on a
// group start only adds zeros to a fresh run: the same bits as the general loop.)
__device__ __forceinline__ int static_group_units(const Geo& g, int u0, int u1) {
  if (group_of(g, u0) == group_of(g, u1 - 1)) return 0;
  const int gu = group_of(g, 1) == 1 ? 1 : group_of(g, 2) == 1 ? 2 : group_of(g, 4) == 1 && group_of(g, 3) == 0 ? 4 : -1;
  return gu > 0 && u0 % gu == 0 ? gu : -1;
}

// Value (i, col) of x as the launch reads it: plus the deferred residual sums where there are some.
__device__ __forceinline__ float x_in(const Args& a, int i, int col) {
  const int64_t k = static_cast<int64_t>(i) * a.g.n_in + col;
  return a.acc_in != nullptr ? a.x[k] + from_fixed(a.acc_in[k]) : a.x[k];
}

// Whether a launch copies its norm weights into shared memory before griddepcontrol.wait
// (gemv_kernel): M <= 8 under a folded norm, the block's range of x (`cols` columns) within
// kMaxStagedCols. They then follow the staged x in dynamic shared memory (smem_of).
template <int M>
__host__ __device__ inline bool norm_early(const Args& a, int cols) {
  return M <= 8 && a.norm != nullptr && a.norm_early != 0 && cols <= kMaxStagedCols;
}

// Stages x[0..m)[col0 .. col0 + span) as B fragments into xs (see gemv_kernel): thread s of the
// loop takes k16 blocks 2p, 2p + 1, x row i, quad t, loads its 8 values once (gathered by perm,
// times the norm weight; zero past n_in) and writes them as hi to fragment row i and as lo to
// fragment row M + i. Rows i in [m, M) get zeros.
// xf: x row 0 of the range already read (x_in, gathered by perm: xf[c] is staged column col0 + c),
// or null to read x itself; gf: the norm weight of staged column col0 + c at gf[c] (gathered by
// perm), or null to read it from a.norm.
template <int M, bool PERM>
__device__ __forceinline__ void stage_x(const Args& a, const int32_t* perm, int col0, int span, const float* xf,
                                        const float* gf, uint4* xs) {
  // v (staged columns col, col + 1; src: their columns of x) times their norm weights, if any.
  auto times_norm = [&](float (&v)[2], int col, int2 src) {
    if (gf != nullptr) {
      v[0] *= gf[col - col0], v[1] *= gf[col - col0 + 1];
    } else if (a.norm != nullptr) {
      const float2 g2 = PERM ? make_float2(__ldg(a.norm + src.x), __ldg(a.norm + src.y))
                             : __ldg(reinterpret_cast<const float2*>(a.norm + col));
      v[0] *= g2.x, v[1] *= g2.y;
    }
  };
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
        if (col < n_in && xf != nullptr) {  // (x row 0)
          v[0] = xf[col - col0];
          v[1] = xf[col - col0 + 1];
          // (perm read only where the norm weight comes from a.norm)
          times_norm(v, col, PERM && gf == nullptr && a.norm != nullptr ? *reinterpret_cast<const int2*>(perm + col)
                                                                        : make_int2(col, col + 1));
        } else if (col < n_in) {  // n_in is even: both columns or neither
          if (PERM) {
            const int2 src = *reinterpret_cast<const int2*>(perm + col);
            v[0] = x_in(a, i, src.x);
            v[1] = x_in(a, i, src.y);
            times_norm(v, col, src);
          } else {
            const float2 x2 = *reinterpret_cast<const float2*>(xr + col);
            v[0] = x2.x;
            v[1] = x2.y;
            if (a.acc_in != nullptr) {  // 16-byte aligned: col and n_in are even
              const longlong2 q = *reinterpret_cast<const longlong2*>(a.acc_in + static_cast<int64_t>(i) * n_in + col);
              v[0] += from_fixed(q.x);
              v[1] += from_fixed(q.y);
            }
            times_norm(v, col, make_int2(col, col + 1));
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

// GemvReady: waits until the producer has flagged every column block of x in [col0, col0 + span)
// (acquire; the barrier passes that on to the whole block).
__device__ __forceinline__ void wait_ready(const Args& a, int col0, int span) {
  const int c1 = min(col0 + span, a.g.n_in);
  const int f0 = col0 / a.ready_cols, nf = (c1 - 1) / a.ready_cols - f0 + 1;
  for (int f = static_cast<int>(threadIdx.x); f < nf; f += kThreads)
    while (detail::ld_acquire_gpu(a.ready + f0 + f) == 0) __nanosleep(64);
  __syncthreads();
}

// ks > 1 with the item's blocks as one cluster (gemv_kernel's "Cluster sums"): part and ss_blk hold
// this block's partial sums and x^2 sums. Block `rank` adds the ks blocks' values of its share of
// the item's outputs o = i * kItemRows + row of the item, in rank (= ks) order, and finishes them.
template <int BITS, int M, int R>
__device__ __forceinline__ void cluster_sum(const Args& a, int64_t item, float (&part)[kWarps][R][M][kRows],
                                            const float (&ss_blk)[M]) {
  constexpr int K = detail::kMaxClusterSize;
  detail::cluster_sync();  // every block's sums are in its shared memory
  const int rank = detail::cluster_rank();
  const bool rope = R == 1 && a.epi == Epilogue::rope_kv;
  const int total = a.m * kItemRows, share = (total + a.ks - 1) / a.ks;
  const int lo = rope ? 0 : rank * share, hi = rope ? (rank == 0 ? total : 0) : min(lo + share, total);
  for (int o = lo + static_cast<int>(threadIdx.x); o < hi; o += kThreads) {
    const int i = o / kItemRows, w = o % kItemRows / kRows, row = o % kRows;
    float pv[K][R], sv[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k < a.ks) {  // all loads first, then the adds in order
#pragma unroll
        for (int r = 0; r < R; ++r) pv[k][r] = detail::ld_dsmem_f32(&part[w][r][i][row], k);
        sv[k] = a.norm != nullptr ? detail::ld_dsmem_f32(&ss_blk[i], k) : 0.f;
      }
    float val[R], ss = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) val[r] = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k < a.ks) {
#pragma unroll
        for (int r = 0; r < R; ++r) val[r] += pv[k][r];
        ss += sv[k];
      }
    if (rope) {  // this thread alone reads and writes entry o of part
      apply_norm<R>(a, val, ss);
      part[w][0][i][row] = val[0];
      continue;
    }
    bool valid;
    const Tiles<R> tw = tiles_of<BITS, R>(a, item, w, 0, valid);
    if (valid) finish<R>(a, tw, row, i, val, ss);
  }
  detail::cluster_sync();  // the other blocks have read our sums (and block 0's rows are all in part)
  if constexpr (R == 1)
    if (rope && rank == 0) rope_kv_item<M>(a, item, part);
}

// Dynamic shared memory: the block's k-range of x (or a pass of it) as B fragments, uint4
// [span / 32][2M][4]: for k16 blocks 2p and 2p + 1, fragment row n (n < M: hi of x row n, else lo of
// x row n - M), quad t: (b0b1, b2b3) of block 2p, then of block 2p + 1.
// PERM: act-order (x gathered by the matrix's perm). R = 2: swiglu over two tiles per warp. SP: 2:4
// sparse (a chunk's code columns cover twice as many columns of x: span and col0 count x's).
template <int BITS, bool SP, int M, int R, bool PERM>
__global__ void __launch_bounds__(kThreads, min_blocks_of(M, R)) gemv_kernel(const Args a) {
  using C = Codec<BITS, SP>;
  constexpr int U = loads_of(BITS) / R;
  constexpr int SR = 2 * M;                 // B rows: hi of x rows 0..M-1, then lo
  constexpr int NB = SR <= 8 ? 1 : SR / 8;  // n8 blocks
  extern __shared__ uint4 xs[];
  __shared__ float part[kWarps][R][M][kRows];
  __shared__ float ss_part[kWarps][M];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, tq = lane & 3;
  const int64_t item = blockIdx.x / a.ks;
  const int ks = static_cast<int>(blockIdx.x % a.ks);
  detail::pdl_release();
  bool has_tile;  // warp-uniform
  const Tiles<R> t = tiles_of<BITS, R>(a, item, warp, lane, has_tile);
  const int begin = ks * a.cpb, end = min(begin + a.cpb, a.g.chunks);  // the block's chunks
  const int span = a.cpb * C::kXSpan, col0 = begin * C::kXSpan;  // its columns of x
  const int pass = can_pass(M, R) ? a.pass : a.cpb;  // chunks of x staged at once (pass_of; "Staging passes")

  Batch<BITS, R, U> cur;
  if (has_tile) {
    load_batch<BITS, SP, R, U>(a.g, t, begin, end, cur);
    for (int d = 1; d <= a.pf0; ++d) prefetch_batch<BITS, SP, R, U>(a.g, t, begin + d * U, end, lane);
  }
  // M <= 8 under a folded norm (norm_early): the norm weight of each staged column (gathered by
  // perm) is copied into gf, after the staged x, before the wait, like the weights. It is a model
  // weight, cold in L2 by the next token: staging would otherwise wait for it beside or after x (an
  // H100, int4 g128, side by side with the tree before: decode +2.4%, the m = 8 layer -1.8%;
  // bench/RESULTS.md, twenty-ninth session; in a static array in every M <= 8 kernel it was 0.5%
  // slower at decode: thirtieth session). Not at M = 16: 8 KiB more shared memory a block there
  // cost the M = 16 launches without a norm 3-5%.
  constexpr int kPre = kMaxStagedCols / kThreads;
  const bool early = norm_early<M>(a, span);
  float* const gf = reinterpret_cast<float*>(xs + static_cast<size_t>(pass) * C::kXSpan / 32 * SR * 4);
  if (early) {
    const int n_cols = min(span, a.g.n_in - col0);
    for (int c = static_cast<int>(threadIdx.x); c < n_cols; c += kThreads)
      detail::cp_async4(gf + c, a.norm + (PERM ? __ldg(t.perm + col0 + c) : col0 + c), 4);
    detail::cp_async_commit();
  }
  // x, y and the scratch belong to the previous kernel until here (or x's producer's flags: GemvReady).
  if (a.ready != nullptr) wait_ready(a, col0, span);
  else detail::pdl_wait();

  // GemvResidual fold: this block's share of y += acc_fold, acc_fold = 0 (its first element per
  // thread loaded here, stored after x is staged: the round trips overlap).
  const int64_t fold_n = a.acc_fold != nullptr ? static_cast<int64_t>(a.m) * a.mat[0].n_out : 0;
  const int64_t fold_per = (fold_n + gridDim.x - 1) / gridDim.x;
  const int64_t fold_end = min(fold_n, (blockIdx.x + 1) * fold_per);
  const int64_t fold0 = blockIdx.x * fold_per + threadIdx.x;
  float fy = 0.f;
  long long fq = 0;
  if (fold0 < fold_end) fy = a.mat[0].y[fold0], fq = a.acc_fold[fold0];
  // M = 1 under a folded norm (hoist): x is read once, in the x^2 loop's order (the same sums in the
  // same order as the loop below), into registers and xf, and staged from xf (and gf). Every block of
  // the launch reads its range at once, so the bytes matter (the deferred residual sums add 8 per value).
  const bool hoist = M == 1 && a.norm != nullptr && span <= kPre * kThreads;
  __shared__ float xf[M == 1 ? kMaxStagedCols : 1];
  float pre[kPre];
  if (M == 1 && hoist) {
    const int hi_col = min(col0 + span, a.g.n_in);
#pragma unroll
    for (int j = 0; j < kPre; ++j) {
      const int c = static_cast<int>(threadIdx.x) + j * kThreads, col = col0 + c;
      pre[j] = col < hi_col ? x_in(a, 0, PERM ? __ldg(t.perm + col) : col) : 0.f;
      if (c < span) xf[c] = pre[j];
    }
    if (early) detail::cp_async_wait<0>();
    __syncthreads();
  } else if (early) {
    detail::cp_async_wait<0>();
    __syncthreads();
  }
  stage_x<M, PERM>(a, t.perm, col0, pass * C::kXSpan, M == 1 && hoist ? xf : nullptr, early ? gf : nullptr, xs);
  if (fold0 < fold_end) {
    a.mat[0].y[fold0] = fy + from_fixed(fq);
    a.acc_fold[fold0] = 0;
    for (int64_t e = fold0 + kThreads; e < fold_end; e += kThreads) {
      a.mat[0].y[e] += from_fixed(a.acc_fold[e]);
      a.acc_fold[e] = 0;
    }
  }
  if (M == 1 && hoist) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPre; ++j) ss = fmaf(pre[j], pre[j], ss);
    ss = detail::warp_sum(ss);
    if (lane == 0) ss_part[warp][0] = ss;
  }
  // The sums of squares of x over the range: the same loop whatever m (1/rms independent of m).
  if (a.norm != nullptr && !hoist) {
    const int hi_col = min(col0 + span, a.g.n_in);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= a.m) break;  // block-uniform
      float ss = 0.f;
      for (int col = col0 + static_cast<int>(threadIdx.x); col < hi_col; col += kThreads) {
        const float val = x_in(a, i, PERM ? __ldg(t.perm + col) : col);
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
  int staged = begin;  // the first chunk of the staged pass
  // Multiplies batch bt, which holds chunks [b, b + U) of the range.
  // GU >= 0 (static group runs): the batch is full and starts a group of GU units (or lies in the
  // range's one group, GU = 0), so where runs start is known at compile time.
  auto multiply = [&]<int GU = -1>(const Batch<BITS, R, U>& bt, int b) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = b + u;
      if (GU < 0 && c >= end) break;  // warp-uniform
#pragma unroll
      for (int k = 0; k < C::kUnits; ++k) {
        // A padding unit past n_in (the last chunk's second half) runs like any other: its codes
        // and its staged x are zero and its record is a real one (load_batch), so it adds zeros.
        const int unit = c * C::kUnits + k;
        bool starts;  // warp-uniform
        if constexpr (GU < 0) {
          const int grp = group_of(a.g, unit);
          starts = grp != run_group;
          run_group = grp;
        } else if constexpr (GU > 0) {
          starts = (u * C::kUnits + k) % GU == 0;
        } else {
          starts = false;  // (the range's one group)
        }
        if (starts) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            fold(sum[r]);
            start_run<BITS>(sum[r], bt.rec[r][u][k]);
          }
        }
        // B fragments of the unit's two k16 blocks (SP: four, two per mma.sp): one uint4 per n8 block.
        mma_unit<BITS, SP, R, NB, U>(sum, bt.v, u, k, xs_lane + ((c - staged) * (C::kBlocks / 2) + k) * C::kXs * SR * 4,
                                     SR * 4);
      }
    }
  };
  // Two batches per iteration, each loaded into the buffer the other one is not using: the batch
  // in flight never has to be copied from one set of registers to the other.
  // Staging passes (pass < cpb: the block's range of x at M rows would not leave room for
  // kBlocksPerSm blocks per SM): x is staged `pass` chunks at a time (a multiple of 2U: passes start
  // at an iteration), every warp of the block at the barriers, the next batch already in flight.
  // The same multiplications in the same order: the same bits.
  Batch<BITS, R, U> nxt;
  const int ahead = a.pf * U;  // the prefetch runs this many chunks ahead of the loads
  const bool passes = can_pass(M, R) && pass < end - begin;  // block-uniform
  // Static group runs (M <= 4; Args::runs). Where every group of the block's range is GU = 2 or 4
  // units and the range starts a group (GU 2: int4 / int3 / int2 g64, 2:4 int4 g128; GU 4: int4 /
  // int3 / int2 / int8 g128), or the range lies in one group (per channel: GU = 0), its pairs of full
  // batches run a copy of the loop in which the fold of each run and the start of the next sit where
  // the compiler can see them: no branch per unit or chunk, so a batch is one block of code it can
  // schedule (the two groups of an int4 g128 batch become two independent MMA chains; the loop's
  // instructions per batch fell by a third), and only the records that start a group are loaded.
  // The same operations in the same order: the same bits. The rest of the range runs the loop below.
  // Why: a warp's batch is a chain of dependent instructions more than a load of bandwidth; with one
  // block per SM instead of two the H200 ran each warp's batch only ~20% faster (thirty-second
  // session's trace). H200, Llama-2-7B int4 g128 decode side by side: 519.6 vs 484.3 tok/s
  // (bench/RESULTS.md). Not at M = 8, 16, nor group 32 (GU = 1): those copies spill.
  int b0 = begin;
  if constexpr (M <= 4) {
    auto runs = [&]<int GU>() {
      static_assert(GU == 0 || U * C::kUnits % (GU + (GU == 0)) == 0, "batches start groups");
      if constexpr (GU == 0)
#pragma unroll
        for (int r = 0; r < R; ++r) start_run<BITS>(sum[r], cur.rec[r][0][0]);  // (loaded by the general load_batch)
#pragma unroll 1
      for (; b0 + 2 * U <= end; b0 += 2 * U) {
        load_batch<BITS, SP, R, U, GU, true>(a.g, t, b0 + U, end, nxt);
        if (ahead > 0) prefetch_batch<BITS, SP, R, U>(a.g, t, b0 + U + ahead, end, lane);
        multiply.template operator()<GU>(cur, b0);
        if (b0 + 3 * U <= end) load_batch<BITS, SP, R, U, GU, true>(a.g, t, b0 + 2 * U, end, cur);
        else if (b0 + 2 * U < end) load_batch<BITS, SP, R, U, GU, false>(a.g, t, b0 + 2 * U, end, cur);
        if (ahead > 0) prefetch_batch<BITS, SP, R, U>(a.g, t, b0 + 2 * U + ahead, end, lane);
        multiply.template operator()<GU>(nxt, b0 + U);
      }
      // The loop below goes on with the range's one group (GU = 0) or at the start of a group.
      run_group = GU == 0 ? group_of(a.g, begin * C::kUnits) : -1;
    };
    const int gu = static_group_units(a.g, begin * C::kUnits, end * C::kUnits);
    if (a.runs != 0 && has_tile && !passes && begin + 2 * U <= end) {  // (warp-uniform)
      if (gu == 0) {
        runs.template operator()<0>();
      } else if (gu == 2) {
        if constexpr (U * C::kUnits % 2 == 0) runs.template operator()<2>();
      } else if (gu == 4) {
        if constexpr (U * C::kUnits % 4 == 0) runs.template operator()<4>();
      }
    }
  }
#pragma unroll 1
  for (int b = b0; (has_tile || passes) && b < end; b += 2 * U) {
    if (passes && b - staged == pass) {
      __syncthreads();  // every warp is done with the previous pass
      staged = b;
      stage_x<M, PERM>(a, t.perm, b * C::kXSpan, min(pass, end - b) * C::kXSpan, nullptr, nullptr, xs);  // (M = 16)
      __syncthreads();
    }
    if (!has_tile) continue;
    if (b + U < end) load_batch<BITS, SP, R, U>(a.g, t, b + U, end, nxt);
    if (ahead > 0) prefetch_batch<BITS, SP, R, U>(a.g, t, b + U + ahead, end, lane);
    multiply(cur, b);
    if (b + U >= end) break;
    if (b + 2 * U < end) load_batch<BITS, SP, R, U>(a.g, t, b + 2 * U, end, cur);
    if (ahead > 0) prefetch_batch<BITS, SP, R, U>(a.g, t, b + 2 * U + ahead, end, lane);
    multiply(nxt, b + U);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) fold(sum[r]);

  write_parts<M, R, NB>(sum, part[warp], g, tq);
  __syncthreads();
  const bool has_norm = a.norm != nullptr;
  auto block_ss = [&](int i) {  // the block's x^2 sum of x row i: its warps' parts in order
    float ss = 0.f;
    if (has_norm)
#pragma unroll
      for (int w = 0; w < kWarps; ++w) ss += ss_part[w][i];
    return ss;
  };
  if constexpr (R == 1)
    if (a.acc_add != nullptr) {  // GemvResidual: the block's partial sums into the accumulator, done
      for (int o = static_cast<int>(threadIdx.x); o < a.m * kItemRows; o += kThreads) {
        const int i = o / kItemRows, w = o % kItemRows / kRows, row = o % kRows;
        bool valid;
        const Tiles<R> tw = tiles_of<BITS, R>(a, item, w, 0, valid);
        const int64_t orow = tw.tile[0] * kRows + row;
        if (valid && orow < tw.n_out[0])
          atomicAdd(reinterpret_cast<unsigned long long*>(a.acc_add + i * tw.n_out[0] + orow),
                    static_cast<unsigned long long>(to_fixed(part[w][0][i][row])));
      }
      return;
    }
  if (a.cluster) {
    __shared__ float ss_blk[M];
    if (threadIdx.x < M) ss_blk[threadIdx.x] = static_cast<int>(threadIdx.x) < a.m ? block_ss(static_cast<int>(threadIdx.x)) : 0.f;
    cluster_sum<BITS, M, R>(a, item, part, ss_blk);
    return;
  }
  // One thread per (x row i, row of the item): o = i * kItemRows + warp * 16 + row.
  // ks > 1: this item's partial sums [ks][R][kMaxM][kItemRows] and x^2 sums [ks][kMaxM] in scratch.
  const int64_t sums = a.items * a.ks * (R * kMaxM * kItemRows);
  float* const partial = a.ks == 1 ? nullptr : a.partial + item * a.ks * (R * kMaxM * kItemRows);
  float* const ss_out = a.ks == 1 ? nullptr : a.partial + sums + item * a.ks * kMaxM;
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
  if (!detail::arrive_last(a.counters + item, static_cast<unsigned>(a.ks), a.fences)) return;
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

// Shared memory for `chunks` chunks of staged x: the B fragments, span / 32 k16-block pairs x 2M
// rows x 4 quads x 16 bytes (span in columns of x).
template <int BITS, bool SP, int M>
size_t xs_bytes(int chunks) {
  return static_cast<size_t>(chunks) * Codec<BITS, SP>::kXSpan / 32 * (2 * M) * 4 * 16;
}

// Dynamic shared memory of a launch staging `pass` chunks at once: the B fragments, then, where
// norm_early, the norm weights of the block's columns (a float each).
template <int BITS, bool SP, int M>
size_t smem_of(const Args& a, int pass) {
  const int cols = a.cpb * Codec<BITS, SP>::kXSpan;
  return xs_bytes<BITS, SP, M>(pass) + (norm_early<M>(a, cols) ? static_cast<size_t>(cols) * 4 : 0);
}

// Chunks of x a block stages at once (gemv_kernel: "Staging passes"): its whole range, unless that
// would take more than kMaxStagedBytes of shared memory in a can_pass kernel (kBlocksPerSm blocks
// per SM; at M = 16 a range of 2048 columns takes 128 KiB, room for one block per SM: e.g.
// Llama-3-8B's 4096 x 14336 split 2 ways); then passes of a multiple of 2U chunks that fit.
// LITHE_GEMV_PASS=N (a test and benchmark knob) stages N chunks (rounded down to such a multiple)
// at a time in every can_pass launch.
template <int BITS, bool SP, int M, int R>
int pass_of(const Args& a) {
  static const int knob = detail::env_knob("LITHE_GEMV_PASS");
  constexpr int step = 2 * (loads_of(BITS) / R);
  int pass = a.cpb;
  if (!can_pass(M, R))
    return pass;
  if (knob > 0)
    pass = knob / step * step;
  else if (xs_bytes<BITS, SP, M>(a.cpb) > kMaxStagedBytes)
    pass = static_cast<int>(kMaxStagedBytes / xs_bytes<BITS, SP, M>(1)) / step * step;
  return std::clamp(pass, std::min(step, a.cpb), a.cpb);
}

// Cluster sums (gemv_kernel) where asked (Args::cluster), 2 <= ks <= 8 and this kernel's clusters
// of every item fit on the device at once with 1/8 to spare (detail::max_active_clusters: sm_90 code
// on an sm_90 device). The spare: in a decode step (PDL: a launch starts while its predecessor's
// blocks still hold SMs) o and down split 7 ways as 32 clusters of 7, exactly an H100's capacity,
// took 14.4 us a layer more than the same split with scratch sums. On an H100 (two blocks per SM:
// 132 clusters of 2 fit, 79 of 3, 32 of 7, 30 of 8) that leaves Llama-2-7B's qkv (96 items, ks = 2);
// the split is never changed for clusters (gate/up 2 ways instead of 3 lost 18 us a layer;
// bench/RESULTS.md, twenty-third session).
inline int cluster_for(const Args& a, const void* kernel, size_t smem) {
  if (!a.cluster || a.ks < 2 || a.ks > detail::kMaxClusterSize) return 0;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  return detail::max_active_clusters(kernel, cfg, a.ks) >= a.items + a.items / 8 ? 1 : 0;
}

template <int BITS, bool SP, int M, int R, bool PERM>
Status launch(const Args& a, Stream s) {
  static std::atomic<uint64_t> opted{0};
  auto* kernel = gemv_kernel<BITS, SP, M, R, PERM>;
  Args b = a;
  b.pass = pass_of<BITS, SP, M, R>(a);
  const size_t smem = smem_of<BITS, SP, M>(b, b.pass);
  LITHE_TRY(detail::allow_smem(kernel, opted, smem, "gq gemv_kernel"));
  const dim3 grid(static_cast<unsigned>(a.items * a.ks));
  b.cluster = cluster_for(a, reinterpret_cast<const void*>(kernel), smem);
  // PDL by default (pdl_enabled): the first batch of weights loads while the previous kernel ends.
  detail::launch_with(detail::pdl_enabled(true), b.cluster ? b.ks : 0, kernel, grid, dim3(kThreads), smem, s, b);
  return detail::launched("gq gemv_kernel");
}

// f.template operator()<M, R, PERM>() for the kernel instantiation that serves a: M = m rounded up
// to 1, 2, 4, 8 or 16; R = 2 for swiglu; PERM for act-order.
template <class F>
auto with_kernel(const Args& a, F&& f) {
  auto by_m = [&]<int R, bool PERM>() {
    if (a.m == 1) return f.template operator()<1, R, PERM>();
    if (a.m == 2) return f.template operator()<2, R, PERM>();
    if (a.m <= 4) return f.template operator()<4, R, PERM>();
    if (a.m <= 8) return f.template operator()<8, R, PERM>();
    return f.template operator()<16, R, PERM>();
  };
  if (a.epi == Epilogue::swiglu) return by_m.template operator()<2, false>();
  if (a.mat[0].perm != nullptr) return by_m.template operator()<1, true>();
  return by_m.template operator()<1, false>();
}

template <int BITS, bool SP>
Status launch_grid(const Args& a, Stream s) {
  return with_kernel(a, [&]<int M, int R, bool PERM>() { return launch<BITS, SP, M, R, PERM>(a, s); });
}

template <int BITS, bool SP>
int cluster_size(const Args& a) {
  return with_kernel(a, [&]<int M, int R, bool PERM>() {
    auto* kernel = gemv_kernel<BITS, SP, M, R, PERM>;
    const size_t smem = smem_of<BITS, SP, M>(a, pass_of<BITS, SP, M, R>(a));
    return cluster_for(a, reinterpret_cast<const void*>(kernel), smem) ? a.ks : 0;
  });
}

}  // namespace lithe::cuda::gemv_impl

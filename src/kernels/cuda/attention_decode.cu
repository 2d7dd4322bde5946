// attention_decode: split-K flash decoding for n_q <= kDecodeMaxQueries, f32 math throughout.
//
// The kernel (decode_split_kernel), grid (n_kv_heads, n_splits, row_groups), 128 threads = 4 warps.
//   A block owns one kv head g, one "row" (row = (query t, head h of g's group)) for a single
//   sequence over a cache of at most kRowBlockSlots, else up to kRB = 4 of them (every K/V row
//   read serves all of them), and one chunk of slots. The grid depends on host values only
//   (n_splits from kv_capacity and the SM count); the chunk length is derived in the kernel from
//   *n_kv (device): ceil(n_kv / n_splits) rounded up to the tile size, so short contexts use few,
//   short chunks and a captured graph stays valid as n_kv grows. A block whose chunk starts at or
//   past *n_kv writes an empty partial (max = -inf, sum = 0). blockIdx.x = kv head, so the blocks
//   of one split, scheduled together, read whole cache rows.
//   Split 0 of an unpaged cache (attention_decode) asks for its first tile before *n_kv arrives
//   (rows [0, min(T, capacity)), whatever they hold: scores past *n_kv are masked and V is zeroed
//   there), one dependent L2 round trip fewer: +0.9% Llama-2-7B int4 decode on an H200.
//   LITHE_ATTN_EARLY_ISSUE=0 (a benchmark knob) reads *n_kv first.
//   The chunk is walked in tiles of T slots (16 KiB of K: T = 64 for f16 at D = 128), copied into
//   shared memory with 16-byte cp.async, double-buffered. Each warp takes a quarter of the tile:
//   a slot's row is spread over LPS = D / EL lanes (EL = elements per 16 bytes, 8 for f16, 4 for
//   f32), so a warp step covers 32 / LPS slots; q' = q * scale * log2e sits in registers (EL
//   dims per lane and row), dot products are reduced with shuffles. Each warp keeps its own online
//   softmax state (max m, sum l, acc[EL] per row, log2 domain); at the end the lane groups of a
//   warp, then the 4 warps (through shared memory) are merged into the block's partial.
//   More than kRB rows per kv head (GQA group x n_q) are cut into row groups (blockIdx.z) that
//   read the same K/V (from L2, mostly): the rows' q and acc live in registers.
//   Partials go to `work`: after the counters (kDecodeCounterBytes), acc [n_q*n_heads][n_splits]
//   [D] f32, then (m, l) [n_q*n_heads][n_splits] float2.
// Merge, in the same kernel: every block, done with its partial (an empty one included), counts
//   itself in its (row group, kv head)'s counter; the block that brings it to n_splits (the last
//   to finish) resets it to 0 and merges the partials of its rows, a warp per (query, head) row,
//   writing out (zeros where no split saw a slot). Counters are zero between launches, so graph
//   replays need no reset (the scratch's counter area is zeroed once when allocated).
//   Where split 0 takes the whole context (*n_kv <= kSingleTiles * T), its block writes out
//   directly (the bits the merge of its one partial gives) and the other splits return at once.
//   AttentionParams::ready: each row's flag is reset before the successor may start and set once
//   the row is written out (split 0's block, or the merging one), so that o's GEMV can start on a
//   head as soon as it lands (cuda_gq.h: GemvReady).
//   LITHE_ATTN_SINGLE=0 (a benchmark knob) merges always.
//
// attention_decode_batch (decode_batch_kernel): the same blocks for many sequences, grid z =
//   sequence x row group; each sequence's pointers come from a device array, its partials from its
//   own part of `work` and its counters from its own z; the split count spreads ~2 blocks per SM
//   over all of them (a batch of 64 decode steps: one split each).
//
// Shared memory: K/V [2 stages][K, V][T][D] (64 KiB) | pos [2][T] i32 |
//   warp m, l [4][kRB] f32. The warp merge reuses the K/V area for acc [4][kRB][D].
#include <algorithm>
#include <atomic>
#include <climits>

#include "kernels/cuda/attention_common.cuh"

namespace lithe::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 128, kWarps = 4;
constexpr int kRB = 4;           // rows per block
constexpr int kMinChunk = 64;    // smallest chunk the host split count plans for
constexpr int kMaxSms = 192;     // SM counts above this are treated as this (bounds the scratch)
constexpr int kBlocksPerSm = 2;  // the split count targets this many blocks per SM
// A tile's ITER = 8 warp steps are processed in kSub passes of ITER / kSub (scores, softmax
// update, P V per pass): fewer live registers, so that 3 blocks fit per SM (measured on an H200:
// 16K-slot decode went from 2.2 to 3.1 TB/s against one pass at 2 blocks per SM).
constexpr int kSub = 4;
// Contexts of up to this many tiles are one block's (per row group), which walks them in turn:
// no partials and no merge (decode_block).
constexpr int kSingleTiles = 2;
// Caches of at most this many slots get a block per row in single-sequence decode (decode).
constexpr int64_t kRowBlockSlots = 1024;

template <int D, typename KV>
struct DecodeCfg {
  static constexpr int EL = 16 / static_cast<int>(sizeof(KV));          // elements per lane (16 bytes)
  static constexpr int LPS = D / EL;                                    // lanes per slot
  static constexpr int SPW = 32 / LPS;                                  // slots per warp step
  static constexpr int T = 16384 / (D * static_cast<int>(sizeof(KV)));  // slots per tile
  static constexpr int ITER = T / kWarps / SPW;                         // warp steps per tile
  static constexpr size_t kKvBytes = size_t{4} * T * D * sizeof(KV);    // 2 stages x (K, V)
  static constexpr size_t kSmem = kKvBytes + size_t{2} * T * 4 + size_t{2} * kWarps * kRB * 4;
  static_assert(ITER * SPW * kWarps == T && LPS * SPW == 32, "tile split");
  static_assert(size_t{kWarps} * kRB * D * 4 <= kKvBytes, "warp merge fits in the K/V area");
};

struct DecodeArgs {
  const float* q;
  const int32_t* q_pos;
  const void* k;
  const void* v;
  const int32_t* kv_pos;
  const int32_t* n_kv;
  int capacity;
  int64_t stride;
  KvPages pages;
  int n_heads, group;
  int rows;      // n_q * group
  int rows_blk;  // rows per block (blockIdx.z picks the group), <= kRB
  int n_splits;
  int single;           // 1: a context that one chunk holds is finished by its block (decode_block)
  int fences;           // arrive_last's fences (count_fences())
  float qscale;         // scale * log2(e)
  unsigned* counters;   // work: [row_groups][n_kv_heads] blocks done (zero between launches)
  float* acc;           // work: [n_q * n_heads][n_splits][D]
  float2* ml;           // work: [n_q * n_heads][n_splits]
  float* out;
  int early_issue;  // 1: split 0 issues its first tile before reading *n_kv (decode_block)
  unsigned* ready;  // AttentionParams::ready: [n_heads] (n_q = 1), or null
  int single_tiles;  // contexts of up to this many tiles are split 0's alone (decode_block)
};

// (query t, head h) row index t * n_heads + h of local row r of the block at (kv head g, first
// row r0): rows of a kv head's group are (t, g * group + j) for t-major r0 + r = t * group + j.
__device__ __forceinline__ int64_t row_index(const DecodeArgs& a, int g, int r0, int r) {
  const int rr = r0 + r, t = rr / a.group, h = g * a.group + rr % a.group;
  return static_cast<int64_t>(t) * a.n_heads + h;
}

// Merges the n_splits partials of one (query, head) row into out (a warp; lane l owns dims
// [l*E, l*E + E)): out = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i, zeros if no split saw
// a slot. Partials were written by other blocks of this grid: read through L2 (ld.global.cg).
template <int D>
__device__ __forceinline__ void merge_row(const DecodeArgs& a, int64_t row, int lane) {
  constexpr int E = D / 32;  // dims per lane
  const float2* mlr = a.ml + row * a.n_splits;
  float M = -INFINITY;
  for (int i = lane; i < a.n_splits; i += 32) M = fmaxf(M, __ldcg(mlr + i).x);
  M = warp_max(M);
  float o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = 0.f;
  if (M != -INFINITY) {
    float l = 0.f;
    for (int i = lane; i < a.n_splits; i += 32) {
      const float2 x = __ldcg(mlr + i);
      if (x.x != -INFINITY) l += x.y * ex2(x.x - M);
    }
    l = warp_sum(l);
    const float* ar = a.acc + row * a.n_splits * D + lane * E;
    // Loads are unconditional (several splits' in flight at once); an empty split's acc, never
    // written, is loaded but not used.
#pragma unroll 4
    for (int i = 0; i < a.n_splits; ++i) {
      const float mi = __ldcg(mlr + i).x;
      float v[E];
      if constexpr (E == 4) {
        const float4 t = __ldcg(reinterpret_cast<const float4*>(ar + static_cast<int64_t>(i) * D));
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) v[e] = __ldcg(ar + static_cast<int64_t>(i) * D + e);
      }
      if (mi != -INFINITY) {
        const float w = ex2(mi - M);
#pragma unroll
        for (int e = 0; e < E; ++e) o[e] = fmaf(w, v[e], o[e]);
      }
    }
    const float inv = 1.f / l;  // l >= 1: the split holding the max contributes 2^0 * (>= 1)
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] *= inv;
  }
  float* dst = a.out + row * D + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) dst[e] = o[e];
}

// AttentionParams::ready of the block's R rows (n_q = 1: row index = head). Reset by split 0's
// block before the launch lets its successor start (decode_split_kernel: the fence makes the 0
// visible first); published by the block that writes the rows out, once every thread has written
// (the barrier orders the block's writes before the release).
__device__ __forceinline__ void reset_ready(const DecodeArgs& a, int g, int r0, int R) {
  if (a.ready == nullptr || blockIdx.y != 0 || static_cast<int>(threadIdx.x) >= R) return;
  a.ready[row_index(a, g, r0, static_cast<int>(threadIdx.x))] = 0;
  __threadfence();
}
__device__ __forceinline__ void publish_ready(const DecodeArgs& a, int g, int r0, int R) {
  if (a.ready == nullptr) return;
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < R) st_release_gpu(a.ready + row_index(a, g, r0, static_cast<int>(threadIdx.x)), 1u);
}

// Called by every thread of a block once its partial is written: counts the block in its (row
// group, kv head) counter; the last of the n_splits blocks resets the counter and merges the R
// rows (a warp each).
template <int D>
__device__ __forceinline__ void merge_if_last(const DecodeArgs& a, int g, int r0, int R) {
  unsigned* c = a.counters + static_cast<int64_t>(blockIdx.z) * gridDim.x + g;
  if (!arrive_last(c, static_cast<unsigned>(a.n_splits), a.fences)) return;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  for (int r = warp; r < R; r += kWarps) merge_row<D>(a, row_index(a, g, r0, r), lane);
  publish_ready(a, g, r0, R);
}

// The EL elements of one 16-byte chunk as floats.
__device__ __forceinline__ void load_chunk(const __half* p, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void load_chunk(const float* p, float (&f)[4]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
}

// One block's work; rg: its row group (blockIdx.z, or its part of it in a batch).
template <int D, typename KV>
__device__ __forceinline__ void decode_block(const DecodeArgs& a, int rg) {
  using C = DecodeCfg<D, KV>;
  constexpr int T = C::T, EL = C::EL, LPS = C::LPS, SPW = C::SPW, NS = C::ITER / kSub;
  extern __shared__ __align__(16) unsigned char smem[];
  KV* kv_s = reinterpret_cast<KV*>(smem);  // stage st: K tile 2*st, V tile 2*st+1 (T*D each)
  int* pos_s = reinterpret_cast<int*>(smem + C::kKvBytes);
  float* wm = reinterpret_cast<float*>(pos_s + 2 * T);  // [kWarps][kRB]
  float* wl = wm + kWarps * kRB;                        // [kWarps][kRB]
  float* wacc = reinterpret_cast<float*>(smem);         // [kWarps][kRB][D], after the loop

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grp = lane / LPS, dl = lane % LPS;  // slot of the warp step, 16-byte chunk of the row
  const int g = blockIdx.x, split = blockIdx.y, r0 = rg * a.rows_blk;
  const int R = min(a.rows_blk, a.rows - r0);
  // Local row r -> (query t, head h); its partial lives at index (t * n_heads + h) * n_splits + split.
  auto part_index = [&](int r) { return row_index(a, g, r0, r) * a.n_splits + split; };

  const int64_t head_off = static_cast<int64_t>(g) * D;
  const KV* kg = static_cast<const KV*>(a.k) + head_off;
  const KV* vg = static_cast<const KV*>(a.v) + head_off;
  auto issue = [&](int stage, int s0, int lim) {  // slots [s0, s0 + T) -> stage; slots >= lim read as 0
    constexpr int kChunks = D / EL;      // 16-byte chunks per row
    KV* kd = kv_s + 2 * stage * T * D;
    KV* vd = kd + T * D;
#pragma unroll
    for (int i = 0; i < T * kChunks / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c / kChunks, ch = c % kChunks;
      const bool ok = s0 + r < lim;
      const int64_t off = (ok ? a.pages.row(s0 + r) * a.stride : 0) + ch * EL;
      cp_async16(kd + r * D + ch * EL, kg + off, ok ? 16 : 0);
      cp_async16(vd + r * D + ch * EL, vg + off, ok ? 16 : 0);
    }
    if (tid < T) {
      const bool ok = s0 + tid < lim;
      cp_async4(pos_s + stage * T + tid, a.kv_pos + (ok ? s0 + tid : 0), ok ? 4 : 0);
    }
  };
  // Split 0 of an unpaged cache starts at slot 0 whatever *n_kv is: its first tile is asked for
  // before *n_kv arrives (one dependent L2 round trip fewer), bounded by the capacity (rows
  // [0, capacity) are allocated; past *n_kv they hold anything, NaN included: scores there are
  // masked and V is zeroed where it is read). A batch's sequences have capacities of their own: off.
  const bool early = a.early_issue && split == 0 && a.pages.blocks == nullptr;
  if (early) {
    issue(0, 0, a.capacity);
    cp_async_commit();
  }

  // This lane's EL dims of each row's q' (rows >= R: zeros, position INT_MIN: never used).
  float q[kRB][EL];
  int qp[kRB];
#pragma unroll
  for (int r = 0; r < kRB; ++r) {
#pragma unroll
    for (int e = 0; e < EL; ++e) q[r][e] = 0.f;
    qp[r] = INT_MIN;
    if (r < R) {
      const int rr = r0 + r, t = rr / a.group, h = g * a.group + rr % a.group;
      const float* src = a.q + (static_cast<int64_t>(t) * a.n_heads + h) * D + dl * EL;
#pragma unroll
      for (int e = 0; e < EL; e += 4) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(src + e));
        q[r][e] = x.x * a.qscale, q[r][e + 1] = x.y * a.qscale, q[r][e + 2] = x.z * a.qscale,
        q[r][e + 3] = x.w * a.qscale;
      }
      qp[r] = a.q_pos[t];
    }
  }
  const int n_kv = max(0, min(*a.n_kv, a.capacity));
  int chunk = (n_kv + a.n_splits - 1) / a.n_splits;
  chunk = max(T, (chunk + T - 1) / T * T);
  // Contexts of up to single_tiles tiles are split 0's alone, which walks them in turn.
  if (n_kv <= a.single_tiles * T) chunk = max(T, (n_kv + T - 1) / T * T);
  // One chunk holds every slot: split 0 writes out itself, as the merge of its one partial would
  // (the same bits), and the other splits have nothing to do: no partials, no counting, no merge
  // (three dependent L2 round trips fewer). On an H200 one block over two tiles beat two blocks and
  // the merge (Llama-2-7B int4 decode +0.5%, thirty-fourth session; on an H100 in the twenty-fourth
  // it was no faster); 128-slot chunks at n_kv 512-640 cost 1.5% of a Llama-2-7B decode (H100).
  const bool single = a.single && chunk >= n_kv;
  const int s_begin = split * chunk;  // < n_kv + n_splits * T: no overflow for capacity <= 2^30
  const int s_end = min(s_begin + chunk, n_kv);
  if (s_begin >= s_end) {  // nothing of this chunk is filled: empty partial
    if (early) cp_async_wait<0>();  // (n_kv = 0) no copy into shared memory outlives the block
    if (single) {
      if (split == 0) {  // no slot at all: zeros, as the merge writes them
        for (int idx = tid; idx < R * D; idx += kThreads) a.out[row_index(a, g, r0, idx / D) * D + idx % D] = 0.f;
        publish_ready(a, g, r0, R);
      }
      return;
    }
    if (tid < R) a.ml[part_index(tid)] = make_float2(-INFINITY, 0.f);
    merge_if_last<D>(a, g, r0, R);
    return;
  }

  const int n_tiles = (s_end - s_begin + T - 1) / T;
  if (!early) {
    issue(0, s_begin, s_end);
    cp_async_commit();
  }

  float acc[kRB][EL], m[kRB], l[kRB];
#pragma unroll
  for (int r = 0; r < kRB; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < EL; ++e) acc[r][e] = 0.f;
  }

  for (int i = 0; i < n_tiles; ++i) {
    const int st = i & 1, t0 = s_begin + i * T;
    if (i + 1 < n_tiles) issue(st ^ 1, t0 + T, s_end);
    cp_async_commit();
    cp_async_wait<1>();  // tile i landed
    __syncthreads();
    const KV* kt = kv_s + 2 * st * T * D;
    const KV* vt = kt + T * D;
    const int* pt = pos_s + st * T;
    const int ls0 = warp * (T / kWarps) + grp;  // this lane's slot at step `it`: ls0 + it * SPW

#pragma unroll 1
    for (int sub = 0; sub < kSub; ++sub) {  // kSub passes of NS warp steps (bounds registers)
      const int ls0s = ls0 + sub * NS * SPW;
      float s[NS][kRB];  // scores, then probabilities
#pragma unroll
      for (int it = 0; it < NS; ++it) {
        const int ls = ls0s + it * SPW;
        float kf[EL];
        load_chunk(kt + ls * D + dl * EL, kf);
        const bool in = t0 + ls < s_end;
        const int pp = pt[ls];
#pragma unroll
        for (int r = 0; r < kRB; ++r) {
          s[it][r] = -INFINITY;
          if (r < R) {
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < EL; ++e) d = fmaf(q[r][e], kf[e], d);
#pragma unroll
            for (int o = LPS / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            if (in && pp <= qp[r]) s[it][r] = d;
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRB; ++r) {  // online softmax; the max is shared by the whole warp
        if (r < R) {
          float mt = -INFINITY;
#pragma unroll
          for (int it = 0; it < NS; ++it) mt = fmaxf(mt, s[it][r]);
#pragma unroll
          for (int o = LPS; o < 32; o <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
          const float m_new = fmaxf(m[r], mt), base = m_new == -INFINITY ? 0.f : m_new;
          const float al = ex2(m[r] - base);
          m[r] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int it = 0; it < NS; ++it) {
            s[it][r] = ex2(s[it][r] - base);
            sum += s[it][r];
          }
          l[r] = l[r] * al + sum;  // this lane group's slots only; groups are summed at the end
#pragma unroll
          for (int e = 0; e < EL; ++e) acc[r][e] *= al;
        }
      }
#pragma unroll
      for (int it = 0; it < NS; ++it) {  // acc += p v
        const int ls = ls0s + it * SPW;
        float vf[EL];
        load_chunk(vt + ls * D + dl * EL, vf);
        if (t0 + ls >= s_end)  // a slot past the range (read by `early`): p = 0 must not meet NaN
#pragma unroll
          for (int e = 0; e < EL; ++e) vf[e] = 0.f;
#pragma unroll
        for (int r = 0; r < kRB; ++r)
          if (r < R) {
#pragma unroll
            for (int e = 0; e < EL; ++e) acc[r][e] = fmaf(s[it][r], vf[e], acc[r][e]);
          }
      }
    }
    __syncthreads();  // tile buffers are refilled two tiles later
  }

  // Merge the lane groups of each warp (same dims, other slots), then the warps.
#pragma unroll
  for (int r = 0; r < kRB; ++r)
    if (r < R) {
#pragma unroll
      for (int o = LPS; o < 32; o <<= 1) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);
#pragma unroll
        for (int e = 0; e < EL; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
      }
    }
  // No copy is in flight (the last step committed an empty group) and every warp passed the
  // loop's final barrier: the K/V area is free.
  if (grp == 0)
#pragma unroll
    for (int r = 0; r < kRB; ++r)
      if (r < R)
#pragma unroll
        for (int e = 0; e < EL; ++e) wacc[(warp * kRB + r) * D + dl * EL + e] = acc[r][e];
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRB; ++r) {
      wm[warp * kRB + r] = m[r];
      wl[warp * kRB + r] = l[r];
    }
  __syncthreads();
  for (int idx = tid; idx < R * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w * kRB + r]);
    const float base = M == -INFINITY ? 0.f : M;
    float o = 0.f, L = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float sc = ex2(wm[w * kRB + r] - base);  // 0 for a warp that saw nothing
      o = fmaf(sc, wacc[(w * kRB + r) * D + d], o);
      L = fmaf(sc, wl[w * kRB + r], L);
    }
    if (single) {  // merge_row of one partial: weight 2^0 = 1, then times 1 / L (L >= 1), or zeros
      a.out[row_index(a, g, r0, r) * D + d] = M == -INFINITY ? 0.f : o * (1.f / L);
      continue;
    }
    const int64_t pi = part_index(r);
    a.acc[pi * D + d] = o;
    if (d == 0) a.ml[pi] = make_float2(M, L);
  }
  if (single) publish_ready(a, g, r0, R);
  else merge_if_last<D>(a, g, r0, R);
}

template <int D, typename KV>
__global__ void __launch_bounds__(kThreads, 3) decode_split_kernel(const DecodeArgs a) {
  detail::pdl_wait();  // launched with launch_pdl: q, the cache and *n_kv come from earlier kernels
  const int r0 = static_cast<int>(blockIdx.z) * a.rows_blk;
  reset_ready(a, static_cast<int>(blockIdx.x), r0, min(a.rows_blk, a.rows - r0));
  detail::pdl_release();
  decode_block<D, KV>(a, blockIdx.z);
}

// A batch of sequences (attention_decode_batch): blockIdx.z = sequence * row_groups + row group.
// The sequence's fields replace a's, and its partials sit in its own part of the work area (its
// merge counters are blockIdx.z's, as for one sequence).
template <int D, typename KV>
__global__ void __launch_bounds__(kThreads, 3) decode_batch_kernel(const DecodeArgs a, const DecodeSeq* seqs,
                                                                    int row_groups, int64_t parts) {
  detail::pdl_wait();
  detail::pdl_release();
  const int seq = blockIdx.z / row_groups;
  const DecodeSeq s = seqs[seq];
  DecodeArgs b = a;
  b.q = s.q;
  b.q_pos = s.q_pos;
  b.k = s.k;
  b.v = s.v;
  b.kv_pos = s.kv_pos;
  b.n_kv = s.n_kv;
  b.pages = s.pages;
  b.out = s.out;
  b.acc = a.acc + seq * parts * D;
  b.ml = a.ml + seq * parts;
  decode_block<D, KV>(b, blockIdx.z % row_groups);
}

// Host-side plan: rows per block, row groups, splits. Pure function of p and an SM count.
struct DecodePlan {
  int rows = 0, row_groups = 0, rows_blk = 0, n_splits = 0;
};
// row_blocks: a block per row (one sequence: the grouped heads' blocks read the same K / V, from
// L2), else up to kRB rows a block. attention_decode_batch_max_seqs counts on the latter.
DecodePlan plan(const AttentionParams& p, int sms, int64_t n_seqs, bool row_blocks) {
  DecodePlan d;
  d.rows = static_cast<int>(p.n_q * (p.n_heads / p.n_kv_heads));
  d.row_groups = static_cast<int>(row_blocks ? d.rows : ceil_div(d.rows, kRB));
  d.rows_blk = static_cast<int>(ceil_div(d.rows, d.row_groups));  // balanced groups
  const int64_t max_chunks = std::max<int64_t>(1, ceil_div(p.kv_capacity, kMinChunk));
  const int64_t want =
      ceil_div(int64_t{kBlocksPerSm} * std::min(sms, kMaxSms), p.n_kv_heads * d.row_groups * n_seqs);
  d.n_splits = static_cast<int>(std::clamp<int64_t>(want, 1, max_chunks));
  return d;
}

size_t work_bytes(const AttentionParams& p, int n_splits) {
  return kDecodeCounterBytes + static_cast<size_t>(p.n_q * p.n_heads) * static_cast<size_t>(n_splits) *
                                   (static_cast<size_t>(p.head_dim) + 2) * 4;
}

// SM count of the current device, or 0 (error cleared) when it cannot be read.
int sm_count() {
  detail::DeviceFacts d;
  return detail::device_facts(d).is_ok() ? d.sms : 0;
}

template <int D, typename KV>
Status launch_decode(const DecodeArgs& a, const DecodePlan& d, int n_kv_heads, const DecodeSeq* seqs, int64_t n_seqs,
                     Stream stream) {
  static std::atomic<uint64_t> opted{0}, opted_batch{0};
  constexpr size_t smem = DecodeCfg<D, KV>::kSmem;
  if (seqs == nullptr) {
    auto* kernel = decode_split_kernel<D, KV>;
    LITHE_TRY(allow_smem(kernel, opted, smem, "attention_decode"));
    detail::launch_pdl(kernel, dim3(n_kv_heads, d.n_splits, d.row_groups), dim3(kThreads), smem, stream, a);
    return launched("attention_decode");
  }
  auto* kernel = decode_batch_kernel<D, KV>;
  LITHE_TRY(allow_smem(kernel, opted_batch, smem, "attention_decode_batch"));
  const int64_t parts = static_cast<int64_t>(d.rows / a.group) * a.n_heads * d.n_splits;
  detail::launch_pdl(kernel, dim3(n_kv_heads, d.n_splits, static_cast<unsigned>(d.row_groups * n_seqs)),
                     dim3(kThreads), smem, stream, a, seqs, d.row_groups, parts);
  return launched("attention_decode_batch");
}

// attention_decode (seqs == nullptr) or attention_decode_batch.
Status decode(const AttentionParams& p, const DecodeSeq* seqs, int64_t n_seqs, void* work, Stream s) {
  const char* who = seqs == nullptr ? "attention_decode" : "attention_decode_batch";
  LITHE_TRY(check_attention_params(p, who));
  if (p.n_q > kDecodeMaxQueries)
    return bad_arg(std::string(who) + ": n_q " + std::to_string(p.n_q) +
                   " exceeds kDecodeMaxQueries = " + std::to_string(kDecodeMaxQueries));
  if (p.n_kv == nullptr) return bad_arg(std::string(who) + ": null n_kv");
  if (p.ready != nullptr && (seqs != nullptr || p.n_q != 1))
    return bad_arg(std::string(who) + ": ready flags need one sequence and n_q = 1, got n_q " + std::to_string(p.n_q));
  if (p.n_q == 0 || n_seqs == 0) return Status::ok();
  if (work == nullptr || !aligned16(work))
    return bad_arg(std::string(who) + ": work must be a 16-byte aligned buffer");
  if (p.n_q * p.n_heads / p.n_kv_heads > int64_t{kRB} * 65535)
    return bad_arg(std::string(who) + ": n_heads / n_kv_heads = " + std::to_string(p.n_heads / p.n_kv_heads) +
                   " too large");
  const int sms = sm_count();
  if (sms <= 0) return Status(StatusCode::internal, std::string(who) + ": cannot read the device's SM count");
  // One sequence over a cache of at most kRowBlockSlots slots runs a block per row: on an H200
  // Llama-3-8B int4 decode (4 query heads a kv head) from an empty context ran 8.4% faster than
  // with the 4 rows one after another in a block, but 1.9% slower after 2048 tokens (each row's
  // block reads the K / V again; thirty-fourth session). The grid is fixed by the capacity (graph
  // replays), so the capacity decides. LITHE_ATTN_ROW_BLOCKS (a benchmark knob): 0 never, 1 always.
  static const int row_knob = env_knob("LITHE_ATTN_ROW_BLOCKS", -1);
  const bool row_blocks = seqs == nullptr && (row_knob >= 0 ? row_knob == 1 : p.kv_capacity <= kRowBlockSlots);
  const DecodePlan d = plan(p, sms, n_seqs, row_blocks);
  if (n_seqs < 0 || p.n_kv_heads * d.row_groups * n_seqs > static_cast<int64_t>(kDecodeCounterBytes / sizeof(unsigned)))
    return bad_arg(std::string(who) + ": " + std::to_string(n_seqs) + " sequences x n_kv_heads " +
                   std::to_string(p.n_kv_heads) + " x " + std::to_string(d.row_groups) + " row groups exceed the " +
                   std::to_string(kDecodeCounterBytes / sizeof(unsigned)) + " merge counters");
  DecodeArgs a{};
  a.q = p.q;
  a.q_pos = p.q_pos;
  a.k = p.k;
  a.v = p.v;
  a.kv_pos = p.kv_pos;
  a.n_kv = p.n_kv;
  a.capacity = static_cast<int>(p.kv_capacity);
  a.stride = p.kv_stride;
  a.pages = p.pages;
  a.n_heads = static_cast<int>(p.n_heads);
  a.group = static_cast<int>(p.n_heads / p.n_kv_heads);
  a.rows = d.rows;
  a.rows_blk = d.rows_blk;
  a.n_splits = d.n_splits;
  static const bool merge_always = env_zero("LITHE_ATTN_SINGLE");  // a benchmark knob: 0 always merges
  a.single = merge_always ? 0 : 1;
  a.fences = count_fences() ? 1 : 0;
  a.qscale = p.scale * kLog2e;
  a.counters = static_cast<unsigned*>(work);
  a.acc = reinterpret_cast<float*>(static_cast<char*>(work) + kDecodeCounterBytes);
  a.ml = reinterpret_cast<float2*>(reinterpret_cast<char*>(a.acc) + static_cast<size_t>(n_seqs) *
                                   static_cast<size_t>(p.n_q * p.n_heads) * d.n_splits * p.head_dim * 4);
  a.out = p.out;
  static const bool early_off = env_zero("LITHE_ATTN_EARLY_ISSUE");  // a benchmark knob: 0 reads *n_kv first
  a.early_issue = early_off || seqs != nullptr ? 0 : 1;
  a.ready = p.ready;
  static const int single_tiles = env_knob("LITHE_ATTN_SINGLE_TILES", kSingleTiles);  // a benchmark knob
  a.single_tiles = single_tiles;
  const int hk = static_cast<int>(p.n_kv_heads);
  if (p.kv == KvType::f16)
    return p.head_dim == 64 ? launch_decode<64, __half>(a, d, hk, seqs, n_seqs, s)
                            : launch_decode<128, __half>(a, d, hk, seqs, n_seqs, s);
  return p.head_dim == 64 ? launch_decode<64, float>(a, d, hk, seqs, n_seqs, s)
                          : launch_decode<128, float>(a, d, hk, seqs, n_seqs, s);
}

}  // namespace

size_t attention_decode_work_bytes(const AttentionParams& p) { return attention_decode_batch_work_bytes(p, 1); }

size_t attention_decode_batch_work_bytes(const AttentionParams& p, int64_t n_seqs) {
  if (p.n_q <= 0 || p.n_kv_heads <= 0 || p.n_heads <= 0 || p.head_dim <= 0 || p.n_heads % p.n_kv_heads != 0 ||
      n_seqs <= 0)
    return 0;
  return kDecodeCounterBytes + static_cast<size_t>(n_seqs) * (work_bytes(p, plan(p, kMaxSms, n_seqs, false).n_splits) -
                                                              kDecodeCounterBytes);
}

int64_t attention_decode_batch_max_seqs(const AttentionParams& p) {
  if (p.n_q <= 0 || p.n_kv_heads <= 0 || p.n_heads <= 0 || p.n_heads % p.n_kv_heads != 0) return 0;
  const int64_t row_groups = ceil_div(p.n_q * (p.n_heads / p.n_kv_heads), int64_t{kRB});
  return static_cast<int64_t>(kDecodeCounterBytes / sizeof(unsigned)) / (p.n_kv_heads * row_groups);
}

Status attention_decode(const AttentionParams& p, void* work, Stream s) { return decode(p, nullptr, 1, work, s); }

Status attention_decode_batch(const AttentionParams& p, const DecodeSeq* seqs, int64_t n_seqs, void* work, Stream s) {
  if (seqs == nullptr) return bad_arg("attention_decode_batch: null seqs");
  return decode(p, seqs, n_seqs, work, s);
}

}  // namespace lithe::cuda

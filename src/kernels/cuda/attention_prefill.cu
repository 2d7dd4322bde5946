// attention_prefill: tiled flash attention (FlashAttention-2 style) on f16 tensor cores.
//
// Grid (n_heads, ceil(n_q / 64)); block = 4 warps owning 64 queries of one head, 16 rows per warp.
// blockIdx.y runs backwards over the query blocks so that the heaviest (latest, causally longest)
// blocks of every head are scheduled first.
//
// Per block:
//  1. Query positions -> smem; Q rows (f32, pre-scaled by scale*log2e) -> f16 smem -> ldmatrix A
//     fragments kept in registers for the whole loop.
//  2. One pass over kv_pos[0, n_kv) builds two bitmaps over the 64-slot KV tiles:
//       any:  some slot of the tile is visible to some query of the block  (pos <= max q_pos)
//       part: the tile needs masking (a slot past n_kv, or pos > min q_pos)
//     Tiles outside `any` are skipped entirely (positions are arbitrary, so this is a runtime
//     check, not slot arithmetic); tiles outside `part` skip the per-element mask.
//  3. Loop over the active tiles. K and V tiles (64 slots x head_dim, f16) live in one smem buffer
//     each; V(j) is fetched while S = Q K(j)^T is computed, K(next) while softmax and O += P V(j)
//     run (cp.async for an f16 cache; load + convert for an f32 cache).
//     S, the running max / sum and O stay in f32 registers; P is rounded to f16 for the MMA.
//  4. O / l to out; rows that saw no slot (l = 0) get zeros.
//
// Shared memory (bytes, D = head_dim, rows padded by 16 bytes so that the 8 row addresses of an
// ldmatrix fall in distinct bank groups):
//   Q [64][D+8] f16 | K [64][D+8] f16 | V [64][D+8] f16 | pos [2][64] i32 | qpos [64] i32 |
//   red [4] i32 | any bits [nw] u32 | part bits [nw] u32      (nw = ceil(n_tiles / 32))
// D = 128: 52 KiB + bitmaps (2 blocks per SM by registers).
#include <atomic>
#include <climits>

#include "kernels/cuda/attention_common.cuh"

namespace lithe::cuda {
namespace {

using namespace detail;

constexpr int kBQ = 64;  // queries per block
constexpr int kBK = 64;  // slots per KV tile
constexpr int kThreads = 128;

template <int D>
struct PrefillSmem {
  static constexpr int kRow = D + 8;                            // halves per smem row
  static constexpr size_t kTileBytes = size_t{kBK} * kRow * 2;  // one 64-row f16 tile
  static constexpr size_t q = 0, k = kTileBytes, v = 2 * kTileBytes;
  static constexpr size_t pos = 3 * kTileBytes;  // int [2][64]
  static constexpr size_t qpos = pos + 2 * kBK * 4;
  static constexpr size_t red = qpos + kBQ * 4;
  static constexpr size_t bits = red + 16;
  static size_t bytes(int n_words) { return bits + size_t{2} * static_cast<size_t>(n_words) * 4; }
};

struct PrefillArgs {
  const float* q;
  const int32_t* q_pos;
  int n_q;
  const void* k;
  const void* v;
  const int32_t* kv_pos;
  int n_kv, n_tiles;
  int64_t stride;      // elements between cache rows
  KvPages pages;       // slot -> row
  int n_heads, group;  // group = n_heads / n_kv_heads
  float qscale;        // scale * log2(e)
  float* out;
};

// Copies slots [s0, s0 + 64) of one kv head (src points at its first element; slot s at row
// pages.row(s)) into a padded f16 tile; slots >= n_kv become zeros.
template <int D>
__device__ __forceinline__ void load_tile(__half* dst, const __half* src, int64_t stride, KvPages pages, int s0,
                                          int n_kv, int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll
  for (int i = 0; i < kBK * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads, r = c / kChunks, ch = c % kChunks;
    const bool ok = s0 + r < n_kv;
    const __half* g = src + (ok ? pages.row(s0 + r) * stride : 0) + ch * 8;
    cp_async16(dst + r * PrefillSmem<D>::kRow + ch * 8, g, ok ? 16 : 0);
  }
}
template <int D>
__device__ __forceinline__ void load_tile(__half* dst, const float* src, int64_t stride, KvPages pages, int s0,
                                          int n_kv, int tid) {
  constexpr int kChunks = D / 4;  // float4 per row
  constexpr int kPer = kBK * kChunks / kThreads;
  constexpr int kBatch = 8;  // loads in flight per thread (bounded for register pressure)
#pragma unroll
  for (int b = 0; b < kPer; b += kBatch) {
    float4 x[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = tid + (b + i) * kThreads, r = c / kChunks, ch = c % kChunks;
      x[i] = s0 + r < n_kv ? __ldg(reinterpret_cast<const float4*>(src + pages.row(s0 + r) * stride) + ch)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = tid + (b + i) * kThreads, r = c / kChunks, ch = c % kChunks;
      uint2 h;
      h.x = pack_half2(x[i].x, x[i].y);
      h.y = pack_half2(x[i].z, x[i].w);
      *reinterpret_cast<uint2*>(dst + r * PrefillSmem<D>::kRow + ch * 4) = h;
    }
  }
}

__device__ __forceinline__ void load_pos(int* dst, const int32_t* kv_pos, int s0, int n_kv, int tid) {
  if (tid < kBK) {
    const bool ok = s0 + tid < n_kv;
    cp_async4(dst + tid, kv_pos + (ok ? s0 + tid : 0), ok ? 4 : 0);
  }
}

// First tile t >= from whose bit is set, or n_tiles.
__device__ __forceinline__ int next_tile(const uint32_t* bits, int from, int n_tiles) {
  for (int t = from; t < n_tiles;) {
    const uint32_t m = bits[t >> 5] & (~0u << (t & 31));
    if (m != 0) return min(((t >> 5) << 5) + __ffs(static_cast<int>(m)) - 1, n_tiles);
    t = ((t >> 5) + 1) << 5;
  }
  return n_tiles;
}

template <int D, typename KV>
__global__ void __launch_bounds__(kThreads, 2) prefill_kernel(const PrefillArgs a) {
  using L = PrefillSmem<D>;
  constexpr int kRow = L::kRow;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* Qs = reinterpret_cast<__half*>(smem + L::q);
  __half* Ks = reinterpret_cast<__half*>(smem + L::k);
  __half* Vs = reinterpret_cast<__half*>(smem + L::v);
  int* pos_s = reinterpret_cast<int*>(smem + L::pos);
  int* qpos_s = reinterpret_cast<int*>(smem + L::qpos);
  int* red = reinterpret_cast<int*>(smem + L::red);
  const int n_words = (a.n_tiles + 31) >> 5;
  uint32_t* any_bits = reinterpret_cast<uint32_t*>(smem + L::bits);
  uint32_t* part_bits = any_bits + n_words;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int h = blockIdx.x;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBQ;
  const int64_t kv_off = static_cast<int64_t>(h / a.group) * D;
  const KV* kg = static_cast<const KV*>(a.k) + kv_off;
  const KV* vg = static_cast<const KV*>(a.v) + kv_off;

  // ---- 1. positions, Q -> smem ----
  if (tid < kBQ) qpos_s[tid] = q0 + tid < a.n_q ? a.q_pos[q0 + tid] : INT_MIN;
  if (tid == 0) {
    red[0] = INT_MIN;
    red[1] = INT_MAX;
  }
  for (int i = tid; i < 2 * n_words; i += kThreads) any_bits[i] = 0;
  {
    constexpr int kChunks = D / 4, kPer = kBQ * kChunks / kThreads;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = tid + i * kThreads, r = c / kChunks, ch = c % kChunks, t = q0 + r;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (t < a.n_q)
        x = __ldg(reinterpret_cast<const float4*>(a.q + (static_cast<int64_t>(t) * a.n_heads + h) * D) + ch);
      uint2 hv;
      hv.x = pack_half2(x.x * a.qscale, x.y * a.qscale);
      hv.y = pack_half2(x.z * a.qscale, x.w * a.qscale);
      *reinterpret_cast<uint2*>(Qs + r * kRow + ch * 4) = hv;
    }
  }
  __syncthreads();
  if (tid < kBQ && q0 + tid < a.n_q) {
    atomicMax(&red[0], qpos_s[tid]);
    atomicMin(&red[1], qpos_s[tid]);
  }
  __syncthreads();
  const int qmax = red[0], qmin = red[1];

  // ---- 2. tile bitmaps from one pass over the slot positions ----
  {
    const int n_slots = a.n_tiles * kBK;
    constexpr int kUnroll = 4;
    for (int base = 0; base < n_slots; base += kUnroll * kThreads) {
      int pv[kUnroll];
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const int s = base + i * kThreads + tid;
        pv[i] = s < a.n_kv ? __ldg(a.kv_pos + s) : 0;
      }
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const int s = base + i * kThreads + tid;
        if (base + i * kThreads + warp * 32 < n_slots) {  // warp-uniform: n_slots is a multiple of 64
          const bool in = s < a.n_kv;
          const unsigned vis = __ballot_sync(0xffffffffu, in && pv[i] <= qmax);
          const unsigned full = __ballot_sync(0xffffffffu, in && pv[i] <= qmin);
          if (lane == 0) {
            const int t = s / kBK;
            if (vis != 0) atomicOr(&any_bits[t >> 5], 1u << (t & 31));
            if (full != 0xffffffffu) atomicOr(&part_bits[t >> 5], 1u << (t & 31));
          }
        }
      }
    }
  }
  __syncthreads();

  // ---- 3. main loop ----
  uint32_t qf[D / 16][4];  // this warp's 16 query rows as A fragments
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], Qs + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRow + kk * 16 + (lane >> 4) * 8);
  const int qp0 = qpos_s[warp * 16 + (lane >> 2)], qp1 = qpos_s[warp * 16 + (lane >> 2) + 8];

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows g and g+8 (thread-partial l)

  int j = next_tile(any_bits, 0, a.n_tiles);
  if (j < a.n_tiles) {
    load_tile<D>(Ks, kg, a.stride, a.pages, j * kBK, a.n_kv, tid);
    load_pos(pos_s, a.kv_pos, j * kBK, a.n_kv, tid);
  }
  cp_async_commit();
  for (int it = 0; j < a.n_tiles; ++it) {
    load_tile<D>(Vs, vg, a.stride, a.pages, j * kBK, a.n_kv, tid);
    cp_async_commit();
    cp_async_wait<1>();  // K(j) and pos(j) landed (V(j) may be in flight)
    __syncthreads();

    // S = Q K^T: 16 rows x 64 slots per warp, as 8 n-tiles of 8 slots.
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < 4; ++nn) {
        uint32_t b[4];
        ldmatrix_x4(b, Ks + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * kRow + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_16816(s[2 * nn], qf[kk], b[0], b[1]);
        mma_16816(s[2 * nn + 1], qf[kk], b[2], b[3]);
      }
    }
    const bool partial = (part_bits[j >> 5] >> (j & 31)) & 1u;
    const int jn = next_tile(any_bits, j + 1, a.n_tiles);
    const int* ps = pos_s + (it & 1) * kBK;
    __syncthreads();  // every warp is done with K(j): fetch K(jn) into the same buffer
    if (jn < a.n_tiles) {
      load_tile<D>(Ks, kg, a.stride, a.pages, jn * kBK, a.n_kv, tid);
      load_pos(pos_s + ((it + 1) & 1) * kBK, a.kv_pos, jn * kBK, a.n_kv, tid);
    }
    cp_async_commit();

    if (partial) {  // slot s visible to row t iff s < n_kv and pos[s] <= q_pos[t]
      const int c2 = 2 * (lane & 3);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int2 pp = *reinterpret_cast<const int2*>(ps + nt * 8 + c2);
        const int sg = j * kBK + nt * 8 + c2;
        const bool in0 = sg < a.n_kv, in1 = sg + 1 < a.n_kv;
        if (!(in0 && pp.x <= qp0)) s[nt][0] = -INFINITY;
        if (!(in1 && pp.y <= qp0)) s[nt][1] = -INFINITY;
        if (!(in0 && pp.x <= qp1)) s[nt][2] = -INFINITY;
        if (!(in1 && pp.y <= qp1)) s[nt][3] = -INFINITY;
      }
    }

    // Online softmax; a row's 64 scores are spread over the 4 lanes of its quad.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float b0 = mn0 == -INFINITY ? 0.f : mn0, b1 = mn1 == -INFINITY ? 0.f : mn1;
    const float al0 = ex2(m0 - b0), al1 = ex2(m1 - b1);
    m0 = mn0;
    m1 = mn1;
    l0 *= al0;
    l1 *= al1;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o[i][0] *= al0;
      o[i][1] *= al0;
      o[i][2] *= al1;
      o[i][3] *= al1;
    }
    uint32_t pf[4][4];  // P as A fragments, one per 16-slot k-step
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float p0 = ex2(s[nt][0] - b0), p1 = ex2(s[nt][1] - b0);
      const float p2 = ex2(s[nt][2] - b1), p3 = ex2(s[nt][3] - b1);
      l0 += p0 + p1;
      l1 += p2 + p3;
      pf[nt >> 1][(nt & 1) * 2] = pack_half2(p0, p1);
      pf[nt >> 1][(nt & 1) * 2 + 1] = pack_half2(p2, p3);
    }

    cp_async_wait<1>();  // V(j) landed (K(jn) may be in flight)
    __syncthreads();
    // O += P V: V tile read transposed so that slots are the k dimension.
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRow + dn * 16 + (lane >> 4) * 8);
        mma_16816(o[2 * dn], pf[kk], b[0], b[1]);
        mma_16816(o[2 * dn + 1], pf[kk], b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with V(j) before the next V load
    j = jn;
  }

  // ---- 4. normalise and store ----
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  const int t0 = q0 + warp * 16 + (lane >> 2), t1 = t0 + 8;
  const int c2 = 2 * (lane & 3);
  if (t0 < a.n_q) {
    float* dst = a.out + (static_cast<int64_t>(t0) * a.n_heads + h) * D + c2;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i][0] * inv0, o[i][1] * inv0);
  }
  if (t1 < a.n_q) {
    float* dst = a.out + (static_cast<int64_t>(t1) * a.n_heads + h) * D + c2;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i][2] * inv1, o[i][3] * inv1);
  }
}

template <int D, typename KV>
Status launch_prefill(const PrefillArgs& a, int n_q_blocks, Stream stream) {
  static std::atomic<uint64_t> opted{0};
  const size_t smem = PrefillSmem<D>::bytes((a.n_tiles + 31) >> 5);
  auto* kernel = prefill_kernel<D, KV>;
  LITHE_TRY(allow_smem(kernel, opted, smem, "attention_prefill"));
  kernel<<<dim3(a.n_heads, n_q_blocks), kThreads, smem, stream>>>(a);
  return launched("attention_prefill");
}

}  // namespace

Status attention_prefill(const AttentionParams& p, int64_t n_kv_host, Stream s) {
  LITHE_TRY(check_attention_params(p, "attention_prefill"));
  if (n_kv_host < 0 || n_kv_host > p.kv_capacity)
    return bad_arg("attention_prefill: n_kv " + std::to_string(n_kv_host) +
                   " is outside [0, kv_capacity = " + std::to_string(p.kv_capacity) + "]");
  if (p.n_q == 0) return Status::ok();
  const int64_t n_q_blocks = ceil_div(p.n_q, kBQ);
  if (n_q_blocks > 65535 || p.n_heads > 65535)
    return bad_arg("attention_prefill: n_q " + std::to_string(p.n_q) + " or n_heads " + std::to_string(p.n_heads) +
                   " too large");
  PrefillArgs a{};
  a.q = p.q;
  a.q_pos = p.q_pos;
  a.n_q = static_cast<int>(p.n_q);
  a.k = p.k;
  a.v = p.v;
  a.kv_pos = p.kv_pos;
  a.n_kv = static_cast<int>(n_kv_host);
  a.n_tiles = static_cast<int>(ceil_div(n_kv_host, kBK));
  a.stride = p.kv_stride;
  a.pages = p.pages;
  a.n_heads = static_cast<int>(p.n_heads);
  a.group = static_cast<int>(p.n_heads / p.n_kv_heads);
  a.qscale = p.scale * kLog2e;
  a.out = p.out;
  const int nb = static_cast<int>(n_q_blocks);
  if (p.kv == KvType::f16)
    return p.head_dim == 64 ? launch_prefill<64, __half>(a, nb, s) : launch_prefill<128, __half>(a, nb, s);
  return p.head_dim == 64 ? launch_prefill<64, float>(a, nb, s) : launch_prefill<128, float>(a, nb, s);
}

}  // namespace lithe::cuda

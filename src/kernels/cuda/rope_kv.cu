// rope_kv_store (cuda_ops.h): attention's prologue in one launch: the rotary embedding of q and k
// (in place, as rope_kernel) and the store of the rotated k rows and the v rows into their cache
// slots (as kv_store_kernel), and the slots' positions.
//
// Grid (token t, head group y); the heads of a token are q's n_heads followed by k's n_kv_heads,
// `heads_per_block` of them per block. A block first computes its token's cos / sin table (in
// double, shared with rope_kernel through rope.cuh), then one thread per (head, pair) item: pair
// i < rot_dim / 2 is rotated (the elements rope_pair names); the other items cover the unrotated
// tail two elements at a time. Items of k heads also write both elements of k (rotated) and v to
// the cache slot (f32 or f16, round to nearest even). Launched with PDL: everything is read after
// detail::pdl_wait().
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"

namespace lithe::cuda {
namespace {

using detail::bad_arg;
using detail::kRopeMaxHalf;

constexpr int kThreads = 256;

__device__ __forceinline__ void store_as(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_as(__half* p, float v) { *p = __float2half_rn(v); }

template <typename KV>
__global__ void __launch_bounds__(kThreads) rope_kv_kernel(const RopeKvArgs a, int half, int heads_per_block) {
  detail::pdl_wait();  // q, k and v come from the previous kernel
  detail::pdl_release();
  __shared__ float cs[kRopeMaxHalf], sn[kRopeMaxHalf];
  const int64_t t = blockIdx.x;
  const int32_t pos = a.pos[t];
  detail::rope_table(pos, a.inv_freq, half, cs, sn);
  __syncthreads();

  const bool interleaved = a.mode == RopeMode::interleaved;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * heads_per_block;
  const int64_t n_all = a.n_heads + a.n_kv_heads;
  const int64_t h_end = h0 + heads_per_block < n_all ? h0 + heads_per_block : n_all;
  const int pairs = static_cast<int>(a.head_dim / 2);  // items per head
  const int64_t kv_dim = a.n_kv_heads * a.head_dim;
  const int64_t slot = h_end > a.n_heads ? a.slots[t] : 0;  // only blocks holding k heads store
  if (a.kv_pos != nullptr && threadIdx.x == 0 && h0 <= a.n_heads && a.n_heads < h_end) a.kv_pos[slot] = pos;
  const int items = static_cast<int>(h_end - h0) * pairs;
  for (int it = static_cast<int>(threadIdx.x); it < items; it += kThreads) {
    const int hl = it / pairs, i = it - hl * pairs;
    const int64_t h = h0 + hl, kh = h - a.n_heads;  // kh >= 0: k head
    float* x = kh >= 0 ? a.k + (t * a.n_kv_heads + kh) * a.head_dim : a.q + (t * a.n_heads + h) * a.head_dim;
    int2 e;
    float2 r;
    if (i < half) {
      e = detail::rope_pair(i, half, interleaved);
      r = detail::rope_rotate(x[e.x], x[e.y], cs[i], sn[i]);
      x[e.x] = r.x;
      x[e.y] = r.y;
    } else {  // past rot_dim: unchanged, only stored (k)
      if (kh < 0) continue;
      const int d = static_cast<int>(a.rot_dim) + 2 * (i - half);
      e = make_int2(d, d + 1);
      r = make_float2(x[e.x], x[e.y]);
    }
    if (kh >= 0) {
      const int64_t off = slot * kv_dim + kh * a.head_dim;
      KV* kc = static_cast<KV*>(a.k_cache) + off;
      KV* vc = static_cast<KV*>(a.v_cache) + off;
      const float* vs = a.v + (t * a.n_kv_heads + kh) * a.head_dim;
      store_as(kc + e.x, r.x);
      store_as(kc + e.y, r.y);
      store_as(vc + e.x, vs[e.x]);
      store_as(vc + e.y, vs[e.y]);
    }
  }
}

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

Status rope_kv_store(const RopeKvArgs& a, Stream s) {
  const std::string f = "rope_kv_store: ";
  if (a.m < 0 || a.n_heads < 0)
    return bad_arg(f + "m " + num(a.m) + " and n_heads " + num(a.n_heads) + " must be >= 0");
  if (a.n_kv_heads < 1) return bad_arg(f + "n_kv_heads " + num(a.n_kv_heads) + " must be >= 1");
  if (a.head_dim < 2 || a.head_dim % 2 != 0) return bad_arg(f + "head_dim " + num(a.head_dim) + " must be even, >= 2");
  if (a.rot_dim < 0 || a.rot_dim % 2 != 0 || a.rot_dim > a.head_dim || a.rot_dim > 2 * kRopeMaxHalf)
    return bad_arg(f + "rot_dim " + num(a.rot_dim) + " must be even, >= 0, <= head_dim " + num(a.head_dim) +
                   " and <= " + num(2 * kRopeMaxHalf));
  if (a.mode != RopeMode::interleaved && a.mode != RopeMode::half)
    return bad_arg(f + "unknown rope mode " + num(static_cast<int>(a.mode)));
  if (a.kv != KvType::f32 && a.kv != KvType::f16) return bad_arg(f + "unknown kv type " + num(static_cast<int>(a.kv)));
  if (a.m > INT32_MAX) return bad_arg(f + "m " + num(a.m) + " exceeds " + num(INT32_MAX));
  if (a.m == 0) return Status::ok();
  if ((a.n_heads > 0 && a.q == nullptr) || a.k == nullptr || a.v == nullptr || a.pos == nullptr ||
      a.slots == nullptr || a.k_cache == nullptr || a.v_cache == nullptr || (a.rot_dim > 0 && a.inv_freq == nullptr))
    return bad_arg(f + "null q, k, v, pos, slots, k_cache, v_cache or inv_freq");
  const int pairs = static_cast<int>(a.head_dim / 2);
  const int heads_per_block = std::max(1, kThreads / pairs);
  const int64_t groups = detail::ceil_div(a.n_heads + a.n_kv_heads, heads_per_block);
  if (groups > 65535)
    return bad_arg(f + "n_heads + n_kv_heads = " + num(a.n_heads + a.n_kv_heads) + " is too many heads");
  const dim3 grid(static_cast<unsigned>(a.m), static_cast<unsigned>(groups));
  const int half = static_cast<int>(a.rot_dim / 2);
  if (a.kv == KvType::f32)
    detail::launch_pdl(rope_kv_kernel<float>, grid, dim3(kThreads), 0, s, a, half, heads_per_block);
  else
    detail::launch_pdl(rope_kv_kernel<__half>, grid, dim3(kThreads), 0, s, a, half, heads_per_block);
  return detail::launched("rope_kv_kernel");
}

}  // namespace lithe::cuda

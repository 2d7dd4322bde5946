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
// rope_keys (the rotated keys of a pre-RoPE cache, for one attention call): a block per cache slot,
// the same per-token table and pair items over the slot's kv heads.
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
      const int64_t off = a.pages.row(slot) * kv_dim + kh * a.head_dim;
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

__device__ __forceinline__ float load_as(const float* p) { return *p; }
__device__ __forceinline__ float load_as(const __half* p) { return __half2float(*p); }

// rope_keys: block = one slot j (blocks past *n leave), threads over (kv head, pair) items as
// rope_kv_kernel's k heads; the slot's cos / sin table is computed once per block.
template <typename KV>
__global__ void __launch_bounds__(kThreads) rope_keys_kernel(const RopeKeysArgs a, int half) {
  detail::pdl_wait();  // the cache and *n come from earlier kernels
  detail::pdl_release();
  const int64_t j = blockIdx.x;
  if (j >= *a.n) return;  // block-uniform
  __shared__ float cs[kRopeMaxHalf], sn[kRopeMaxHalf];
  const int32_t pos = a.kv_pos[j];
  const bool turn = pos != kNoKvPosition;
  if (turn) detail::rope_table(pos, a.inv_freq, half, cs, sn);
  __syncthreads();
  const bool interleaved = a.mode == RopeMode::interleaved;
  const int pairs = static_cast<int>(a.head_dim / 2);
  const int64_t row = a.pages.row(j) * a.n_kv_heads * a.head_dim;
  const KV* src = static_cast<const KV*>(a.k_cache) + row;
  KV* dst = static_cast<KV*>(a.dst) + row;
  const int items = static_cast<int>(a.n_kv_heads) * pairs;
  for (int it = static_cast<int>(threadIdx.x); it < items; it += kThreads) {
    const int h = it / pairs, i = it - h * pairs;
    int2 e;
    if (i < half) {
      e = detail::rope_pair(i, half, interleaved);
    } else {  // past rot_dim: copied
      const int d = static_cast<int>(a.rot_dim) + 2 * (i - half);
      e = make_int2(d, d + 1);
    }
    const int64_t o = static_cast<int64_t>(h) * a.head_dim;
    float2 r = make_float2(load_as(src + o + e.x), load_as(src + o + e.y));
    if (turn && i < half) r = detail::rope_rotate(r.x, r.y, cs[i], sn[i]);
    store_as(dst + o + e.x, r.x);
    store_as(dst + o + e.y, r.y);
  }
}

std::string num(int64_t v) { return std::to_string(v); }

// The checks rope_kv_store and rope_keys share: head_dim even, rot_dim even and within it and
// the table's bound, a known mode and kv type. f names the caller.
Status check_rope_shape(const std::string& f, int64_t head_dim, int64_t rot_dim, RopeMode mode, KvType kv) {
  if (head_dim < 2 || head_dim % 2 != 0) return bad_arg(f + "head_dim " + num(head_dim) + " must be even, >= 2");
  if (rot_dim < 0 || rot_dim % 2 != 0 || rot_dim > head_dim || rot_dim > 2 * kRopeMaxHalf)
    return bad_arg(f + "rot_dim " + num(rot_dim) + " must be even, >= 0, <= head_dim " + num(head_dim) + " and <= " +
                   num(2 * kRopeMaxHalf));
  if (mode != RopeMode::interleaved && mode != RopeMode::half)
    return bad_arg(f + "unknown rope mode " + num(static_cast<int>(mode)));
  if (kv != KvType::f32 && kv != KvType::f16) return bad_arg(f + "unknown kv type " + num(static_cast<int>(kv)));
  return Status::ok();
}

}  // namespace

Status detail::check_rope(const std::string& f, int64_t nq, int64_t nk, int64_t nv, const MatvecRope* r) {
  if (r == nullptr) return bad_arg(f + "no rope arguments");
  LITHE_TRY(check_rope_shape(f, r->head_dim, r->rot_dim, r->mode, r->kv));
  if (nq % r->head_dim != 0 || nk % r->head_dim != 0 || nk != nv)
    return bad_arg(f + "q, k, v widths " + num(nq) + ", " + num(nk) + ", " + num(nv) + " must be whole heads of " +
                   num(r->head_dim) + " with k and v equal");
  if (r->pos == nullptr || r->slots == nullptr || r->k_cache == nullptr || r->v_cache == nullptr ||
      (r->rot_dim > 0 && r->inv_freq == nullptr))
    return bad_arg(f + "null pos, slots, k_cache, v_cache or inv_freq");
  return Status::ok();
}

Status rope_keys(const RopeKeysArgs& a, Stream s) {
  const std::string f = "rope_keys: ";
  if (a.capacity < 0 || a.capacity > INT32_MAX)
    return bad_arg(f + "capacity " + num(a.capacity) + " must be in [0, " + num(INT32_MAX) + "]");
  if (a.n_kv_heads < 1) return bad_arg(f + "n_kv_heads " + num(a.n_kv_heads) + " must be >= 1");
  LITHE_TRY(check_rope_shape(f, a.head_dim, a.rot_dim, a.mode, a.kv));
  if (a.capacity == 0) return Status::ok();
  if (a.k_cache == nullptr || a.dst == nullptr || a.kv_pos == nullptr || a.n == nullptr ||
      (a.rot_dim > 0 && a.inv_freq == nullptr))
    return bad_arg(f + "null k_cache, dst, kv_pos, n or inv_freq");
  const dim3 grid(static_cast<unsigned>(a.capacity));
  const int half = static_cast<int>(a.rot_dim / 2);
  if (a.kv == KvType::f32)
    detail::launch_pdl(rope_keys_kernel<float>, grid, dim3(kThreads), 0, s, a, half);
  else
    detail::launch_pdl(rope_keys_kernel<__half>, grid, dim3(kThreads), 0, s, a, half);
  return detail::launched("rope_keys_kernel");
}

Status rope_kv_store(const RopeKvArgs& a, Stream s) {
  const std::string f = "rope_kv_store: ";
  if (a.m < 0 || a.n_heads < 0)
    return bad_arg(f + "m " + num(a.m) + " and n_heads " + num(a.n_heads) + " must be >= 0");
  if (a.n_kv_heads < 1) return bad_arg(f + "n_kv_heads " + num(a.n_kv_heads) + " must be >= 1");
  LITHE_TRY(check_rope_shape(f, a.head_dim, a.rot_dim, a.mode, a.kv));
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

// Element-wise and row kernels of the forward pass (launchers declared in cuda_ops.h):
// embedding gather, rmsnorm, add, add_bias, silu_mul, rope, f32 -> f16/bf16 and the KV-cache store.
// Each op is one launch. Contiguous data moves as float4 (4 elements of 16-bit types) when the
// pointers are aligned and the row length allows; otherwise, and for tails, one element at a time.
// Device-resident arguments (ids, positions, slots) are only read on the device.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"

namespace lithe::cuda {
namespace {

using detail::bad_arg;
using detail::ceil_div;
using detail::launched;

constexpr int kThreads = 256;           // element-wise blocks
constexpr int64_t kMaxGridY = 65535;    // rows per launch before the kernels loop over rows
constexpr int64_t kMaxGridX = 65535;    // grid-stride beyond this
using detail::kRopeMaxHalf;

using detail::aligned;
std::string num(int64_t v) { return std::to_string(v); }

// ---- 4-wide loads and stores of f32 / f16 / bf16 as float4 --------------------------------------
struct alignas(8) Half4 { __half2 a, b; };
struct alignas(8) Bf164 { __nv_bfloat162 a, b; };

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const __half* p) {
  const Half4 h = *reinterpret_cast<const Half4*>(p);
  const float2 lo = __half22float2(h.a), hi = __half22float2(h.b);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const Bf164 h = *reinterpret_cast<const Bf164*>(p);
  const float2 lo = __bfloat1622float2(h.a), hi = __bfloat1622float2(h.b);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store4(__half* p, float4 v) {  // round to nearest even
  Half4 h;
  h.a = __halves2half2(__float2half_rn(v.x), __float2half_rn(v.y));
  h.b = __halves2half2(__float2half_rn(v.z), __float2half_rn(v.w));
  *reinterpret_cast<Half4*>(p) = h;
}
__device__ __forceinline__ void store4(__nv_bfloat16* p, float4 v) {
  Bf164 h;
  h.a = __halves2bfloat162(__float2bfloat16_rn(v.x), __float2bfloat16_rn(v.y));
  h.b = __halves2bfloat162(__float2bfloat16_rn(v.z), __float2bfloat16_rn(v.w));
  *reinterpret_cast<Bf164*>(p) = h;
}
__device__ __forceinline__ void store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void store1(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// ---- launch shapes -------------------------------------------------------------------------------
// Flat ops: `units` work items (float4s, or elements on the scalar path), grid-stride.
dim3 flat_grid(int64_t units) { return dim3(static_cast<unsigned>(std::clamp<int64_t>(ceil_div(units, kThreads), 1, kMaxGridX))); }

// Row ops: x covers the `units` of one row, y the rows (kernels loop when rows > 65535).
struct RowShape {
  dim3 grid, block;
};
RowShape row_shape(int64_t rows, int64_t units) {
  const int64_t threads = std::clamp<int64_t>(ceil_div(units, 32) * 32, 32, kThreads);
  const int64_t bx = std::clamp<int64_t>(ceil_div(units, threads), 1, kMaxGridX);
  return {dim3(static_cast<unsigned>(bx), static_cast<unsigned>(std::min(rows, kMaxGridY))),
          dim3(static_cast<unsigned>(threads))};
}

__device__ __forceinline__ int64_t flat_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t flat_stride() { return int64_t(gridDim.x) * blockDim.x; }

// ---- kernels --------------------------------------------------------------------------------------
// out[i, :] = table[ids[i], :] as f32. vec: d % 4 == 0 and rows aligned for 4-wide access.
template <typename T>
__global__ void embedding_kernel(const T* __restrict__ table, int64_t d, const int32_t* __restrict__ ids,
                                 const int32_t* __restrict__ feed, int64_t n, bool vec, float* __restrict__ out) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  const int64_t d4 = vec ? d / 4 : 0;
  for (int64_t r = blockIdx.y; r < n; r += gridDim.y) {
    const int32_t id = ids[r] >= 0 || feed == nullptr ? ids[r] : feed[r];
    const T* src = table + static_cast<int64_t>(id) * d;
    float* dst = out + r * d;
    for (int64_t c = flat_index(); c < d4; c += flat_stride()) store4(dst + 4 * c, load4(src + 4 * c));
    for (int64_t c = 4 * d4 + flat_index(); c < d; c += flat_stride()) dst[c] = detail::to_float(src[c]);
  }
}

// One block per row: sum of squares (block reduction), then y = x * scale * w (the CPU's order).
// x and y may alias: each element is read and then written by the same thread. (Holding x and w
// in registers across the reduction measured slower on an H200, so x is read twice; the second
// read mostly hits L1.)
__global__ void __launch_bounds__(1024) rmsnorm_kernel(const float* x, const float* __restrict__ w, float eps,
                                                       int64_t m, int64_t n, bool vec, float* y) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 v = load4(xr + 4 * i);
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = detail::warp_sum(ss);
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    if (warp == 0) {
      ss = detail::warp_sum(lane < n_warps ? partial[lane] : 0.0f);
      if (lane == 0) total = ss;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 v = load4(xr + 4 * i), g = load4(w + 4 * i);
      store4(yr + 4 * i, make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w));
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
    __syncthreads();  // partial/total are reused by the next row
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n, bool vec) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = flat_index(); i < n4; i += flat_stride()) {
    const float4 a = load4(x + 4 * i), b = load4(y + 4 * i);
    store4(x + 4 * i, make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w));
  }
  for (int64_t i = 4 * n4 + flat_index(); i < n; i += flat_stride()) x[i] += y[i];
}

__global__ void add_bias_kernel(float* y, const float* __restrict__ b, int64_t m, int64_t n, bool vec) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    float* yr = y + r * n;
    for (int64_t c = flat_index(); c < n4; c += flat_stride()) {
      const float4 a = load4(yr + 4 * c), g = load4(b + 4 * c);
      store4(yr + 4 * c, make_float4(a.x + g.x, a.y + g.y, a.z + g.z, a.w + g.w));
    }
    for (int64_t c = 4 * n4 + flat_index(); c < n; c += flat_stride()) yr[c] += b[c];
  }
}

__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void silu_mul_kernel(float* gate, const float* up, int64_t n, bool vec) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = flat_index(); i < n4; i += flat_stride()) {
    const float4 g = load4(gate + 4 * i), u = load4(up + 4 * i);
    store4(gate + 4 * i, make_float4(silu_mul1(g.x, u.x), silu_mul1(g.y, u.y), silu_mul1(g.z, u.z), silu_mul1(g.w, u.w)));
  }
  for (int64_t i = 4 * n4 + flat_index(); i < n; i += flat_stride()) gate[i] = silu_mul1(gate[i], up[i]);
}

// Block (token t = blockIdx.x, heads [h0, h0 + heads_per_block)): the block first computes cos/sin
// of its token's rot/2 angles in double (as the CPU), then one thread per (head, pair) rotates.
__global__ void rope_kernel(float* x, int64_t n_heads, int64_t head_dim, const int32_t* __restrict__ pos,
                            const float* __restrict__ inv_freq, int half, int heads_per_block, bool interleaved) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  __shared__ float cs[kRopeMaxHalf], sn[kRopeMaxHalf];
  const int64_t t = blockIdx.x;
  detail::rope_table(pos[t], inv_freq, half, cs, sn);
  __syncthreads();
  const int64_t h0 = int64_t(blockIdx.y) * heads_per_block;
  const int items = static_cast<int>(min(int64_t(heads_per_block), n_heads - h0)) * half;
  for (int it = threadIdx.x; it < items; it += blockDim.x) {
    const int hl = it / half, i = it - hl * half;
    float* v = x + (t * n_heads + h0 + hl) * head_dim;
    const int2 e = detail::rope_pair(i, half, interleaved);
    const float2 r = detail::rope_rotate(v[e.x], v[e.y], cs[i], sn[i]);
    v[e.x] = r.x;
    v[e.y] = r.y;
  }
}

// f32 -> T (f16 or bf16), round to nearest even.
template <typename T>
__global__ void convert_kernel(const float* __restrict__ x, int64_t n, bool vec, T* __restrict__ out) {
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = flat_index(); i < n4; i += flat_stride()) store4(out + 4 * i, load4(x + 4 * i));
  for (int64_t i = 4 * n4 + flat_index(); i < n; i += flat_stride()) store1(out + i, x[i]);
}

// Row r of k and v goes to cache slot slots[r] (row pages.row(slot)); pos[r] to kv_pos[slots[r]]
// (first thread of the row).
template <typename T>
__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t m, int64_t kv_dim,
                                const int64_t* __restrict__ slots, const int32_t* __restrict__ pos,
                                T* __restrict__ k_cache, T* __restrict__ v_cache, int32_t* __restrict__ kv_pos,
                                KvPages pages, bool vec) {
  detail::pdl_wait();  // launched with launch_pdl: inputs come from the previous kernel
  detail::pdl_release();
  const int64_t d4 = vec ? kv_dim / 4 : 0;
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    const int64_t slot = slots[r];
    if (kv_pos != nullptr && flat_index() == 0) kv_pos[slot] = pos[r];
    const float* ks = k + r * kv_dim;
    const float* vs = v + r * kv_dim;
    T* kd = k_cache + pages.row(slot) * kv_dim;
    T* vd = v_cache + pages.row(slot) * kv_dim;
    for (int64_t c = flat_index(); c < d4; c += flat_stride()) {
      store4(kd + 4 * c, load4(ks + 4 * c));
      store4(vd + 4 * c, load4(vs + 4 * c));
    }
    for (int64_t c = 4 * d4 + flat_index(); c < kv_dim; c += flat_stride()) {
      store1(kd + c, ks[c]);
      store1(vd + c, vs[c]);
    }
  }
}

Status need(bool ok, const char* op, const std::string& what) {
  return ok ? Status::ok() : bad_arg(std::string(op) + ": " + what);
}

Status non_negative(const char* op, const char* name, int64_t v) {
  return need(v >= 0, op, std::string(name) + " must be >= 0, got " + num(v));
}

Status not_null(const char* op, const char* name, const void* p) {
  return need(p != nullptr, op, std::string(name) + " is null");
}

}  // namespace

Status embedding(const void* table, WeightType t, int64_t d, const int32_t* ids, int64_t n, float* out, Stream s,
                 const int32_t* feed) {
  LITHE_TRY(non_negative("embedding", "d", d));
  LITHE_TRY(non_negative("embedding", "n", n));
  if (n == 0 || d == 0) return Status::ok();
  LITHE_TRY(not_null("embedding", "table", table));
  LITHE_TRY(not_null("embedding", "ids", ids));
  LITHE_TRY(not_null("embedding", "out", out));
  const size_t esize = t == WeightType::f32 ? 4 : 2;
  const bool vec = d % 4 == 0 && aligned(table, 4 * esize) && aligned(out, 16);
  const RowShape g = row_shape(n, vec ? d / 4 : d);
  switch (t) {
    case WeightType::f32:
      detail::launch_pdl(embedding_kernel<float>, g.grid, g.block, 0, s, static_cast<const float*>(table), d, ids, feed, n, vec, out);
      break;
    case WeightType::f16:
      detail::launch_pdl(embedding_kernel<__half>, g.grid, g.block, 0, s, static_cast<const __half*>(table), d, ids, feed, n, vec, out);
      break;
    case WeightType::bf16:
      detail::launch_pdl(embedding_kernel<__nv_bfloat16>, g.grid, g.block, 0, s, static_cast<const __nv_bfloat16*>(table), d, ids, feed, n, vec, out);
      break;
    default:
      return bad_arg("embedding: unknown weight type " + num(static_cast<int>(t)));
  }
  return launched("embedding_kernel");
}

Status rmsnorm(const float* x, const float* w, float eps, int64_t m, int64_t n, float* y, Stream s) {
  LITHE_TRY(non_negative("rmsnorm", "m", m));
  LITHE_TRY(non_negative("rmsnorm", "n", n));
  LITHE_TRY(need(eps >= 0.0f, "rmsnorm", "eps must be >= 0, got " + std::to_string(eps)));
  if (m == 0 || n == 0) return Status::ok();
  LITHE_TRY(not_null("rmsnorm", "x", x));
  LITHE_TRY(not_null("rmsnorm", "w", w));
  LITHE_TRY(not_null("rmsnorm", "y", y));
  const bool vec = n % 4 == 0 && aligned(x, 16) && aligned(w, 16) && aligned(y, 16);
  // One block per row, about one float4 (or float) per thread, 32..1024 threads.
  const int64_t threads = std::clamp<int64_t>(ceil_div(vec ? n / 4 : n, 32) * 32, 32, 1024);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(m, 1 << 20));
  detail::launch_pdl(rmsnorm_kernel, dim3(blocks), dim3(static_cast<unsigned>(threads)), 0, s, x, w, eps, m, n, vec, y);
  return launched("rmsnorm_kernel");
}

Status add(float* x, const float* y, int64_t n, Stream s) {
  LITHE_TRY(non_negative("add", "n", n));
  if (n == 0) return Status::ok();
  LITHE_TRY(not_null("add", "x", x));
  LITHE_TRY(not_null("add", "y", y));
  const bool vec = aligned(x, 16) && aligned(y, 16);
  detail::launch_pdl(add_kernel, dim3(flat_grid(vec ? std::max<int64_t>(n / 4, 1) : n)), dim3(kThreads), 0, s, x, y, n, vec);
  return launched("add_kernel");
}

Status add_bias(float* y, const float* b, int64_t m, int64_t n, Stream s) {
  LITHE_TRY(non_negative("add_bias", "m", m));
  LITHE_TRY(non_negative("add_bias", "n", n));
  if (m == 0 || n == 0) return Status::ok();
  LITHE_TRY(not_null("add_bias", "y", y));
  LITHE_TRY(not_null("add_bias", "b", b));
  const bool vec = n % 4 == 0 && aligned(y, 16) && aligned(b, 16);
  const RowShape g = row_shape(m, vec ? n / 4 : n);
  detail::launch_pdl(add_bias_kernel, g.grid, g.block, 0, s, y, b, m, n, vec);
  return launched("add_bias_kernel");
}

Status silu_mul(float* gate, const float* up, int64_t n, Stream s) {
  LITHE_TRY(non_negative("silu_mul", "n", n));
  if (n == 0) return Status::ok();
  LITHE_TRY(not_null("silu_mul", "gate", gate));
  LITHE_TRY(not_null("silu_mul", "up", up));
  const bool vec = aligned(gate, 16) && aligned(up, 16);
  detail::launch_pdl(silu_mul_kernel, dim3(flat_grid(vec ? std::max<int64_t>(n / 4, 1) : n)), dim3(kThreads), 0, s, gate, up, n, vec);
  return launched("silu_mul_kernel");
}

Status rope(float* x, int64_t m, int64_t n_heads, int64_t head_dim, const int32_t* pos, const float* inv_freq,
            int64_t rot_dim, RopeMode mode, Stream s) {
  LITHE_TRY(non_negative("rope", "m", m));
  LITHE_TRY(non_negative("rope", "n_heads", n_heads));
  LITHE_TRY(non_negative("rope", "head_dim", head_dim));
  LITHE_TRY(need(rot_dim >= 0 && rot_dim % 2 == 0 && rot_dim <= head_dim && rot_dim <= 2 * kRopeMaxHalf, "rope",
                 "rot_dim " + num(rot_dim) + " must be even, >= 0, <= head_dim " + num(head_dim) + " and <= " +
                     num(2 * kRopeMaxHalf)));
  LITHE_TRY(need(m <= INT32_MAX, "rope", "m " + num(m) + " exceeds " + num(INT32_MAX)));
  LITHE_TRY(need(n_heads <= kMaxGridY, "rope", "n_heads " + num(n_heads) + " exceeds " + num(kMaxGridY)));
  LITHE_TRY(need(mode == RopeMode::interleaved || mode == RopeMode::half, "rope",
                 "unknown mode " + num(static_cast<int>(mode))));
  if (m == 0 || n_heads == 0 || rot_dim == 0) return Status::ok();
  LITHE_TRY(not_null("rope", "x", x));
  LITHE_TRY(not_null("rope", "pos", pos));
  LITHE_TRY(not_null("rope", "inv_freq", inv_freq));
  const int half = static_cast<int>(rot_dim / 2);
  const int heads_per_block = std::max(1, kThreads / half);
  const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(ceil_div(n_heads, heads_per_block)));
  detail::launch_pdl(rope_kernel, dim3(grid), dim3(kThreads), 0, s, x, n_heads, head_dim, pos, inv_freq, half, heads_per_block,
                                         mode == RopeMode::interleaved);
  return launched("rope_kernel");
}

Status to_f16(const float* x, int64_t n, void* out, Stream s) {
  LITHE_TRY(non_negative("to_f16", "n", n));
  if (n == 0) return Status::ok();
  LITHE_TRY(not_null("to_f16", "x", x));
  LITHE_TRY(not_null("to_f16", "out", out));
  const bool vec = aligned(x, 16) && aligned(out, 8);
  convert_kernel<<<flat_grid(vec ? std::max<int64_t>(n / 4, 1) : n), kThreads, 0, s>>>(x, n, vec,
                                                                                        static_cast<__half*>(out));
  return launched("to_f16 kernel");
}

Status to_bf16(const float* x, int64_t n, void* out, Stream s) {
  LITHE_TRY(non_negative("to_bf16", "n", n));
  if (n == 0) return Status::ok();
  LITHE_TRY(not_null("to_bf16", "x", x));
  LITHE_TRY(not_null("to_bf16", "out", out));
  const bool vec = aligned(x, 16) && aligned(out, 8);
  convert_kernel<<<flat_grid(vec ? std::max<int64_t>(n / 4, 1) : n), kThreads, 0, s>>>(
      x, n, vec, static_cast<__nv_bfloat16*>(out));
  return launched("to_bf16 kernel");
}

Status kv_store(const float* k, const float* v, int64_t m, int64_t kv_dim, const int64_t* slots, const int32_t* pos,
                void* k_cache, void* v_cache, KvType kv, int32_t* kv_pos, KvPages pages, Stream s) {
  LITHE_TRY(non_negative("kv_store", "m", m));
  LITHE_TRY(non_negative("kv_store", "kv_dim", kv_dim));
  LITHE_TRY(need(kv == KvType::f32 || kv == KvType::f16, "kv_store", "unknown kv type " + num(static_cast<int>(kv))));
  if (m == 0) return Status::ok();
  LITHE_TRY(not_null("kv_store", "slots", slots));
  if (kv_pos != nullptr) LITHE_TRY(not_null("kv_store", "pos (kv_pos is set)", pos));
  if (kv_dim == 0 && kv_pos == nullptr) return Status::ok();
  if (kv_dim > 0) {
    LITHE_TRY(not_null("kv_store", "k", k));
    LITHE_TRY(not_null("kv_store", "v", v));
    LITHE_TRY(not_null("kv_store", "k_cache", k_cache));
    LITHE_TRY(not_null("kv_store", "v_cache", v_cache));
  }
  const size_t cache_align = kv == KvType::f32 ? 16 : 8;
  const bool vec = kv_dim % 4 == 0 && aligned(k, 16) && aligned(v, 16) && aligned(k_cache, cache_align) &&
                   aligned(v_cache, cache_align);
  const RowShape g = row_shape(m, vec ? kv_dim / 4 : kv_dim);
  if (kv == KvType::f32)
    detail::launch_pdl(kv_store_kernel<float>, g.grid, g.block, 0, s, k, v, m, kv_dim, slots, pos, static_cast<float*>(k_cache),
                                               static_cast<float*>(v_cache), kv_pos, pages, vec);
  else
    detail::launch_pdl(kv_store_kernel<__half>, g.grid, g.block, 0, s, k, v, m, kv_dim, slots, pos, static_cast<__half*>(k_cache),
                                               static_cast<__half*>(v_cache), kv_pos, pages, vec);
  return launched("kv_store_kernel");
}

}  // namespace lithe::cuda

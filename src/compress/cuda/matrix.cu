// Element-wise and reduction kernels of the CUDA solvers (kernels.h): the f32 working copy of a
// weight, writing weights back, the Hessian's diagonal / reversed damped copy / upper factor /
// mirrored triangle, and the reconstruction error's row dots.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels.h"

namespace lithe::compress::cuda {
namespace {

constexpr int kThreads = 256;

Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::ok();
  return Status(StatusCode::internal, std::string(what) + " launch failed: " + cudaGetErrorString(e));
}

// Blocks for a grid-stride loop over `count` items.
unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>(std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 65535LL * 8));
}

__device__ __forceinline__ float load_elem(const void* p, Elem t, int64_t i) {
  switch (t) {
    case Elem::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case Elem::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__global__ void load_working_kernel(const void* w, Elem t, int64_t n_out, int64_t n, const int32_t* perm,
                                    const uint8_t* dead, float* dst) {
  const int64_t total = n_out * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, k = i % n;
    const int64_t o = perm ? perm[k] : k;
    dst[i] = (dead != nullptr && dead[o]) ? 0.0f : load_elem(w, t, r * n + o);
  }
}

__global__ void store_kernel(const float* src, int64_t count, void* dst, Elem t) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    switch (t) {
      case Elem::f16: static_cast<__half*>(dst)[i] = __float2half_rn(src[i]); break;
      case Elem::bf16: static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(src[i]); break;
      default: static_cast<float*>(dst)[i] = src[i]; break;
    }
  }
}

__global__ void diagonal_kernel(const float* h, int64_t n, float* diag, unsigned long long* n_bad) {
  unsigned long long bad = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = h[i];
    if (!isfinite(v)) ++bad;
    if (i / n == i % n) diag[i / n] = v;
  }
  if (bad != 0) atomicAdd(n_bad, bad);
}

__global__ void build_reversed_kernel(const float* h, int64_t n, const int32_t* perm, double lambda, double* m) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    if (j > i) {
      m[idx] = 0.0;
      continue;
    }
    const int64_t oi = perm ? perm[n - 1 - i] : n - 1 - i, oj = perm ? perm[n - 1 - j] : n - 1 - j;
    double v = static_cast<double>(h[oi * n + oj]);
    if (i == j) v = (v == 0.0 ? 1.0 : v) + lambda;
    m[idx] = v;
  }
}

__global__ void extract_upper_kernel(const double* m, int64_t n, float* u) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    u[idx] = j >= i ? static_cast<float>(m[(n - 1 - i) * n + (n - 1 - j)]) : 0.0f;
  }
}

__global__ void mirror_lower_kernel(float* h, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    if (i < j) h[idx] = h[j * n + i];
  }
}

__global__ void stack_diff_kernel(const void* w, Elem t, const float* w_hat, int64_t count, float* a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = load_elem(w, t, i);
    a[i] = x - w_hat[i];
    a[count + i] = x;
  }
}

// One block per row: f64 partial sums, then a shared-memory tree.
__global__ void row_dots_kernel(const float* a, const float* y, int64_t n, double* out) {
  __shared__ double part[kThreads];
  const int64_t r = blockIdx.x;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    s += static_cast<double>(a[r * n + c]) * static_cast<double>(y[r * n + c]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = part[0];
}

__global__ void count_zeros_kernel(const float* x, int64_t count, unsigned long long* out) {
  unsigned long long z = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (x[i] == 0.0f) ++z;
  if (z != 0) atomicAdd(out, z);
}

}  // namespace

Status load_working(const void* w, Elem t, int64_t n_out, int64_t n, const int32_t* perm, const uint8_t* dead,
                    float* dst, Stream s) {
  if (n_out <= 0 || n <= 0)
    return Status(StatusCode::invalid_argument,
                  "load_working: shape [" + std::to_string(n_out) + "][" + std::to_string(n) + "]");
  load_working_kernel<<<blocks_for(n_out * n), kThreads, 0, s>>>(w, t, n_out, n, perm, dead, dst);
  return launched("load_working");
}

Status store_elems(const float* src, int64_t count, void* dst, Elem t, Stream s) {
  if (count <= 0) return Status::ok();
  store_kernel<<<blocks_for(count), kThreads, 0, s>>>(src, count, dst, t);
  return launched("store_elems");
}

Status hessian_diagonal(const float* h, int64_t n, float* diag, unsigned long long* n_bad, Stream s) {
  if (n <= 0) return Status(StatusCode::invalid_argument, "hessian_diagonal: n = " + std::to_string(n));
  const cudaError_t e = cudaMemsetAsync(n_bad, 0, sizeof(unsigned long long), s);
  if (e != cudaSuccess) return Status(StatusCode::internal, std::string("cudaMemsetAsync: ") + cudaGetErrorString(e));
  diagonal_kernel<<<blocks_for(n * n), kThreads, 0, s>>>(h, n, diag, n_bad);
  return launched("hessian_diagonal");
}

Status build_reversed(const float* h, int64_t n, const int32_t* perm, double lambda, double* m, Stream s) {
  build_reversed_kernel<<<blocks_for(n * n), kThreads, 0, s>>>(h, n, perm, lambda, m);
  return launched("build_reversed");
}

Status extract_upper(const double* m, int64_t n, float* u, Stream s) {
  extract_upper_kernel<<<blocks_for(n * n), kThreads, 0, s>>>(m, n, u);
  return launched("extract_upper");
}

Status mirror_lower(float* h, int64_t n, Stream s) {
  mirror_lower_kernel<<<blocks_for(n * n), kThreads, 0, s>>>(h, n);
  return launched("mirror_lower");
}

Status stack_diff(const void* w, Elem t, const float* w_hat, int64_t count, float* a, Stream s) {
  stack_diff_kernel<<<blocks_for(count), kThreads, 0, s>>>(w, t, w_hat, count, a);
  return launched("stack_diff");
}

Status row_dots(const float* a, const float* y, int64_t rows, int64_t n, double* out, Stream s) {
  if (rows <= 0 || rows > 0x7fffffffLL)
    return Status(StatusCode::invalid_argument, "row_dots: " + std::to_string(rows) + " rows");
  row_dots_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(a, y, n, out);
  return launched("row_dots");
}

Status count_zeros(const float* x, int64_t count, unsigned long long* out, Stream s) {
  const cudaError_t e = cudaMemsetAsync(out, 0, sizeof(unsigned long long), s);
  if (e != cudaSuccess) return Status(StatusCode::internal, std::string("cudaMemsetAsync: ") + cudaGetErrorString(e));
  if (count <= 0) return Status::ok();
  count_zeros_kernel<<<blocks_for(count), kThreads, 0, s>>>(x, count, out);
  return launched("count_zeros");
}

}  // namespace lithe::compress::cuda

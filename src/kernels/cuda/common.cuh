// Shared by the CUDA kernel files: launch checking, argument errors, warp reductions and loads
// of f16/bf16/f32 values as f32. Device-side helpers only; no kernels here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "lithe/kernels/cuda_ops.h"

namespace lithe::cuda::detail {

// cudaGetLastError after a launch, as a Status naming the kernel.
inline Status launched(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::ok();
  return Status(StatusCode::internal,
                std::string(kernel) + " launch failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status bad_arg(const std::string& msg) { return Status(StatusCode::invalid_argument, msg); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

}  // namespace lithe::cuda::detail

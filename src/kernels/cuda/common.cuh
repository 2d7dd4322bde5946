// Shared by the CUDA kernel files: launch checking, argument errors, warp reductions and loads
// of f16/bf16/f32 values as f32. Device-side helpers only; no kernels here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

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

// ---- programmatic dependent launch (PDL, sm_90+) ---------------------------------------------------
// The decode-step kernels are launched with launch_pdl(): with PDL on, on Hopper such a kernel may
// be scheduled while its predecessor in the stream still runs, hiding the launch gap between the
// hundreds of small kernels of a decode step. Every kernel launched this way calls pdl_wait() before
// it reads or writes anything a predecessor touches (griddepcontrol.wait: returns once the previous
// grid has completed and its writes are visible; a no-op for normal launches), and pdl_release() at
// its start (its successor may be scheduled once every block of it runs). PDL is off unless
// LITHE_PDL=1: on the current decode step it measured slower on both an H100 and an H200
// (device_info.cu, bench/RESULTS.md); A100s never use it.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

bool pdl_enabled();  // LITHE_PDL=1 and device 0 is sm_90+ (read once)

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);  // errors surface in launched()
}

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

// Shared by the CUDA kernel files: launch checking, argument errors, pointer checks, per-device
// facts, warp reductions, streaming loads and loads of f16/bf16/f32 values as f32. No kernels here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
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

// Argument checks of the launchers: alignment, a pointer for messages, overlap of byte ranges.
inline bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }
std::string ptr_str(const void* p);
inline bool overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

// Facts of the current device, read once per device (device_info.cu): SM count, compute
// capability major, opt-in shared memory per block, peak memory bandwidth (GB/s, from the memory
// clock and bus width; 0 where the device does not say). An error when the device cannot be read.
struct DeviceFacts {
  int sms = 0, major = 0, smem_optin = 0, mem_gbs = 0;
};
Status device_facts(DeviceFacts& out);

// Makes sure `kernel` may be launched with `need` bytes of dynamic shared memory: checks `need`
// against the device's opt-in limit and, once per device (`done` remembers devices 0..63), raises
// the kernel's limit to that maximum, so that concurrent callers never lower it under each other.
template <typename Kernel>
Status allow_smem(Kernel* kernel, std::atomic<uint64_t>& done, size_t need, const char* who) {
  int dev = 0, limit = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: keep it out of later launch checks
    return Status(StatusCode::internal,
                  std::string(who) + ": cannot read the shared memory limit: " + cudaGetErrorString(e));
  }
  // The opt-in limit covers static plus dynamic shared memory of one block.
  cudaFuncAttributes attr{};
  e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::internal, std::string(who) + ": cudaFuncGetAttributes: " + cudaGetErrorString(e));
  }
  limit -= static_cast<int>(attr.sharedSizeBytes);
  if (need > static_cast<size_t>(limit))
    return bad_arg(std::string(who) + ": needs " + std::to_string(need) +
                   " bytes of dynamic shared memory, the device allows " + std::to_string(limit));
  const uint64_t bit = dev < 64 ? uint64_t{1} << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return Status::ok();
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::internal, std::string(who) + ": cudaFuncSetAttribute: " + cudaGetErrorString(e));
  }
  done.fetch_or(bit, std::memory_order_release);
  return Status::ok();
}

// ---- programmatic dependent launch (PDL, sm_90+) ---------------------------------------------------
// The decode-step kernels are launched with launch_pdl(): with PDL on, on Hopper such a kernel may
// be scheduled while its predecessor in the stream still runs, hiding the launch gap between the
// hundreds of small kernels of a decode step. Every kernel launched this way calls pdl_wait() before
// it reads or writes anything a predecessor touches (griddepcontrol.wait: returns once the previous
// grid has completed and its writes are visible; a no-op for normal launches), and pdl_release() at
// its start (its successor may be scheduled once every block of it runs). Which launches use it:
// pdl_enabled (off for most kernels: on the f16 decode step it measured slower on both an H100 and
// an H200; on for the gq GEMV); A100s never use it.
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

// A launch with PDL when `pdl` (see pdl_enabled), as clusters of `cluster` blocks along x when
// cluster > 0 (the caller checked that they fit: max_active_clusters).
template <typename... Params, typename... Args>
void launch_with(bool pdl, int cluster, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                 cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[2]{};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  if (cluster > 0) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs++].val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
  }
  if (pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);  // errors surface in launched()
}
template <typename... Params, typename... Args>
void launch_with_pdl(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                     Args&&... args) {
  launch_with(pdl, 0, kernel, grid, block, smem, s, std::forward<Args>(args)...);
}

// Whether launches use PDL on device 0 (sm_90+ only): LITHE_PDL=1 on, LITHE_PDL=0 off, unset:
// `by_default` (read once). The kernels that stream compressed weights (gq_gemv.cu) ask for it by
// default: they issue their first weight loads before griddepcontrol.wait, and with PDL a Llama-2-7B
// int4 decode ran 9% faster on an H100 (bench/RESULTS.md); the others do not.
bool pdl_enabled(bool by_default = false);

// Benchmark knobs from the environment (each caller reads its knob once): whether `name` is set to
// "0" (the knobs that turn a path off); the integer >= 0 it is set to, else `fallback`.
bool env_zero(const char* name);
int env_knob(const char* name, int fallback = 0);

// The most clusters of `size` blocks of `kernel` resident at once under launch `cfg` (its block and
// dynamic shared memory; its grid and attributes are ignored), asked once per device, kernel, size,
// block and shared memory; 0 where clusters cannot run: a device before sm_90, or kernel code not
// compiled for sm_90+ (an sm_80 cubin, or its PTX compiled on the device, has the cluster
// instructions left out: ptxVersion < 90).
int max_active_clusters(const void* kernel, const cudaLaunchConfig_t& cfg, int size);

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  launch_with_pdl(pdl_enabled(), kernel, grid, block, smem, s, std::forward<Args>(args)...);
}

// Partial results of several blocks meeting in global memory (a k-split's sums, split-K attention
// partials): every thread of a block calls arrive_last after writing its block's part; it returns
// true in every thread of the block that arrives n-th (the last), which then reads the others'
// parts, and that block leaves *counter at 0 for the next launch. Thread 0 counts the block in
// with one acquire-release atomic at gpu scope after a block barrier: the release is cumulative
// (the barrier orders the block's writes before it), the acquire and the second barrier order the
// last block's reads after every counted block's writes. `fences` adds a __threadfence in every
// thread before counting in and after (the older scheme, for side-by-side timing:
// LITHE_COUNT_FENCES=1 in the launchers that read it, count_fences()).
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// A flag between launches running at once (AttentionParams::ready, GemvReady): set with release,
// polled with acquire, both at gpu scope.
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ bool arrive_last(unsigned* counter, unsigned n, bool fences) {
  __shared__ bool last;
  if (fences) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atom_add_acq_rel_gpu(counter, 1u) == n - 1;
    if (last) *counter = 0;  // every block has arrived: ready for the next launch
  }
  __syncthreads();
  const bool l = last;
  if (l && fences) __threadfence();
  return l;
}
// LITHE_COUNT_FENCES=1 (a benchmark knob, read once): arrive_last with the fences.
bool count_fences();

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 16-byte streaming load of read-only data (weights) that is not kept in L1; 8-byte likewise.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream(const uint2* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Asks L2 to fetch [p, p + bytes) from HBM (no registers, nothing to wait for): one bulk prefetch on
// sm_90+, one per 128-byte line below. p and bytes: multiples of 16.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  for (uint32_t o = 0; o < bytes; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(p) + o));
#endif
}

// Asynchronous copies global -> shared memory (sm_80+), completed in commit groups.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async(void* dst, const void* src) {  // 16 bytes; .cg: L2 only
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
// 16 bytes of which src_bytes are read: 0 reads nothing and fills the destination with zeros (src
// must still be mapped).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
// 4 bytes, same zero-fill rule as cp_async16.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // waits until at most N of this thread's committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- thread-block clusters (sm_90; launchers ask for them only where max_active_clusters > 0) -----
inline constexpr int kMaxClusterSize = 8;  // portable cluster size
// Barrier of every thread of the cluster; release / acquire: shared-memory writes before it are
// visible to the other blocks' reads after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ int cluster_rank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return static_cast<int>(r);
}
// What `p` addresses in our shared memory, read from the cluster's block `rank`: 16 bytes / 4 bytes.
__device__ __forceinline__ uint32_t dsmem_addr(const void* p, int rank) {
  uint32_t a = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(smem_u32(p)), "r"(rank));
#endif
  return a;
}
__device__ __forceinline__ float4 ld_dsmem_f4(const void* p, int rank) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(dsmem_addr(p, rank))
               : "memory");
#endif
  return v;
}
__device__ __forceinline__ float ld_dsmem_f32(const float* p, int rank) {
  float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(dsmem_addr(p, rank)) : "memory");
#endif
  return v;
}

// (a & MASK) | b in one LOP3: the dequantizers' "codes into an f16 mantissa" step.
template <uint32_t MASK>
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "n"(MASK), "r"(b));
  return r;
}

// f16x2 arithmetic on 32-bit registers (no repacking of halves); the explicit .rn keeps ptxas from
// contracting anything.
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hsub2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// 1 / rms of a row from its sum of squares over n values (as rmsnorm_kernel): the folded norms.
__device__ __forceinline__ float inv_rms_of(float ss, int n, float eps) {
  return 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
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

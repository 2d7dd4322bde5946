// The PTX the Marlin-class GEMM (marlin.cu) issues, as inline device functions: cp.async with L2
// cache hints and zero fill, ldmatrix, mma.sync m16n8k16 and mma.sp m16n8k32, sm_90a wgmma with
// its shared-memory descriptor, thread-block cluster barriers and distributed shared-memory loads.
// Each wrapper says which architectures it needs; marlin.cu's launcher only runs code that needs
// sm_90 on sm_90 (wgmma_on, cluster_ks_for).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace lithe::cuda::marlin {

// ---- cp.async, ldmatrix, mma (sm_80+; cp_async, smem_u32: common.cuh) -----------------------------
using detail::smem_u32;
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void cp_async_ef(void* dst, const void* src, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "l"(pol));
}
// Copies 16 bytes, or writes 16 zero bytes when !valid (src is not read then but must be mapped).
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, bool valid) {
  detail::cp_async16(dst, src, valid ? 16 : 0);
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// 2:4 sparse A (4 registers: the kept halves), metadata e, sparsity selector SEL.
template <int SEL>
__device__ __forceinline__ void mma_sp_16832(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             const uint32_t (&b)[4], uint32_t e) {
  asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, %13;\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e), "n"(SEL));
}
// ---- sm_90a wgmma (compiled to a trap elsewhere: the launcher only picks it on sm_90) -----------
// Order register writes (A fragments, accumulators) before the next wgmma of the warpgroup.
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed wgmma groups of the warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Shared memory written through the generic proxy (cp.async, zero fill) and read next by wgmma
// (async proxy): each writing thread fences after its writes have completed, before the barrier.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// ---- thread-block clusters (sm_90; cluster_sync, ld_dsmem_f4, cluster_rank: common.cuh) ----------
using detail::cluster_rank;
using detail::cluster_sync;
using detail::ld_dsmem_f4;
inline constexpr int kMaxClusterKs = detail::kMaxClusterSize;
// Adds float4 `q` of the cluster's ks tiles in rank order (= block order) onto `v`; the loads of up
// to four tiles are issued together.
__device__ __forceinline__ void add_cluster_f4(float4& v, const float4* q, int ks) {
#pragma unroll 1
  for (int b0 = 0; b0 < ks; b0 += 4) {
    float4 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (b0 + j < ks) w[j] = ld_dsmem_f4(q, b0 + j);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (b0 + j < ks) v.x += w[j].x, v.y += w[j].y, v.z += w[j].z, v.w += w[j].w;
  }
}
// Shared-memory matrix descriptor (PTX ISA, wgmma "matrix descriptor"): start address >> 4 in bits
// 0-13, leading byte offset >> 4 in 16-29 (unused for K-major 128-byte swizzle: 1), stride byte
// offset >> 4 in 32-45 (1024 bytes between 8-row groups), base offset 0 (bits 49-51: the x tile is
// 1 KiB aligned), swizzle mode in 62-63 (1 = 128 bytes).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}
// D[64][N] (+)= A[64][16] · B[16][N]: A (f16) from registers, 4 per thread as mma.m16n8k16's A
// fragment of the warp's 16 rows; B (f16, K-major) through `desc`; D f32, the thread's N/2
// accumulators as [J = N/16][2][4]; scale_d = 0 ignores D's old value. Inline asm lists every
// accumulator, so each N has its own statement; the macros spell the lists.
#define LITHE_WG_OP(N, D, A, DESC, SCALE)                                                         \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\nwgmma.mma_async.sync.aligned.m64n" N          \
  "k16.f32.f16.f16 {" D "}, {" A "}, " DESC ", p, 1, 1, 0;\n}\n"
#define LITHE_WG_D16 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define LITHE_WG_D32 LITHE_WG_D16 ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define LITHE_WG_D64 \
  LITHE_WG_D32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47" \
               ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define LITHE_WG_ACC8(j)                                                                          \
  "+f"(d[j][0][0]), "+f"(d[j][0][1]), "+f"(d[j][0][2]), "+f"(d[j][0][3]), "+f"(d[j][1][0]),      \
      "+f"(d[j][1][1]), "+f"(d[j][1][2]), "+f"(d[j][1][3])
#define LITHE_WG_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d)
template <int J>
__device__ __forceinline__ void wgmma_rs(float (&d)[J][2][4], const uint32_t (&a)[4], uint64_t desc, int scale_d) {
  static_assert(J == 2 || J == 4 || J == 8, "N = 32, 64 or 128");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (J == 2)
    asm volatile(LITHE_WG_OP("32", LITHE_WG_D16, "%16,%17,%18,%19", "%20", "%21")
                 : LITHE_WG_ACC8(0), LITHE_WG_ACC8(1)
                 : LITHE_WG_IN);
  else if constexpr (J == 4)
    asm volatile(LITHE_WG_OP("64", LITHE_WG_D32, "%32,%33,%34,%35", "%36", "%37")
                 : LITHE_WG_ACC8(0), LITHE_WG_ACC8(1), LITHE_WG_ACC8(2), LITHE_WG_ACC8(3)
                 : LITHE_WG_IN);
  else
    asm volatile(LITHE_WG_OP("128", LITHE_WG_D64, "%64,%65,%66,%67", "%68", "%69")
                 : LITHE_WG_ACC8(0), LITHE_WG_ACC8(1), LITHE_WG_ACC8(2), LITHE_WG_ACC8(3), LITHE_WG_ACC8(4),
                   LITHE_WG_ACC8(5), LITHE_WG_ACC8(6), LITHE_WG_ACC8(7)
                 : LITHE_WG_IN);
#else
  __trap();
#endif
}
#undef LITHE_WG_OP
#undef LITHE_WG_D16
#undef LITHE_WG_D32
#undef LITHE_WG_D64
#undef LITHE_WG_ACC8
#undef LITHE_WG_IN

}  // namespace lithe::cuda::marlin

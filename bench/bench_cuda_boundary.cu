// What a kernel boundary costs a stream of weights (issue 7): the byte sizes of one Llama-2-7B int4
// g128 decode layer's four GEMVs (qkv, o, gate/up, down), 8 layers, read with no arithmetic, three
// ways:
// - launches: one kernel per matrix, back to back with PDL (as the gq GEMV: its first loads issued
//   before griddepcontrol.wait, its reads summed into out after it);
// - barrier: one persistent launch, a grid-wide barrier between matrices (each block's first loads
//   of the next matrix issued before the barrier with --prefetch rows);
// - stream: one launch reading all of it with no dependency at all: the floor.
// Every block reads a contiguous slice of each matrix, 16 bytes per thread and load, 8 loads in
// flight per thread (a GEMV warp's two batches of 2 KiB). Grid: 2 blocks of 256 threads per SM.
// Then the access pattern of the launches with PDL: who owns a contiguous slice (a block, whose
// load instructions read 4 KiB together, or each warp, 512 bytes a load, as a GEMV warp streams
// its tile in the GEMV layout) and how many 16-byte loads each thread keeps in flight.
//   build-cuda/bin/bench_cuda_boundary [--quick]
constexpr const char* kBenchName = "bench_cuda_boundary";
#include "cuda_bench_util.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gq_gemv_layout.h"

namespace {

constexpr int kThreads = 256, kInFlight = 8, kLayers = 8;

// Packed bytes of a layer's four launches in the GEMV layout, int4 g128 (Llama-2-7B: d 4096, ff
// 11008): qkv (three d x d), o, gate/up (two ff x d), down (d x ff); 107.5 MB in all.
int64_t launch_bytes(int which) {
  constexpr int64_t d = 4096, ff = 11008;
  lithe::QuantFormat f;
  f.bits = 4;
  f.group = 128;
  auto bytes = [&](int64_t n_out, int64_t n_in) { return lithe::cuda::gemv_layout::geometry(f, n_out, n_in, false).bytes; };
  switch (which) {
    case 0: return 3 * bytes(d, d);
    case 1: return bytes(d, d);
    case 2: return 2 * bytes(ff, d);
    default: return bytes(d, ff);
  }
}

enum class Mode : int { barrier, barrier_loads_first, no_dependency };

struct Phases {
  const uint4* base[4 * kLayers];
  int64_t n16[4 * kLayers];  // 16-byte words per matrix
};

// Block b's slice of matrix p: [lo, hi) in 16-byte words.
__device__ __forceinline__ void slice_of(const Phases& ph, int p, int64_t& lo, int64_t& hi) {
  const int64_t per = (ph.n16[p] + gridDim.x - 1) / gridDim.x;
  lo = min(ph.n16[p], blockIdx.x * per);
  hi = min(ph.n16[p], lo + per);
}

// The first kInFlight loads of this thread in matrix p (zeros past the slice).
__device__ __forceinline__ void first_loads(const Phases& ph, int p, uint4 (&v)[kInFlight]) {
  int64_t lo, hi;
  slice_of(ph, p, lo, hi);
#pragma unroll
  for (int k = 0; k < kInFlight; ++k) {
    const int64_t i = lo + threadIdx.x + int64_t{k} * kThreads;
    v[k] = i < hi ? lithe::cuda::detail::ld_stream(ph.base[p] + i) : make_uint4(0, 0, 0, 0);
  }
}

// The rest of matrix p after the first loads in v, xor-folded into acc.
__device__ __forceinline__ uint32_t rest_of(const Phases& ph, int p, uint4 (&v)[kInFlight]) {
  int64_t lo, hi;
  slice_of(ph, p, lo, hi);
  uint32_t acc = 0;
  for (int64_t i0 = lo + int64_t{kInFlight} * kThreads; ; i0 += int64_t{kInFlight} * kThreads) {
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    if (i0 >= hi) break;
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int64_t i = i0 + threadIdx.x + int64_t{k} * kThreads;
      v[k] = i < hi ? lithe::cuda::detail::ld_stream(ph.base[p] + i) : make_uint4(0, 0, 0, 0);
    }
  }
  return acc;
}

__global__ void __launch_bounds__(kThreads, 2) launch_kernel(Phases ph, int p, uint32_t* out) {
  lithe::cuda::detail::pdl_release();
  uint4 v[kInFlight];
  first_loads(ph, p, v);
  lithe::cuda::detail::pdl_wait();
  const uint32_t acc = rest_of(ph, p, v);
  atomicXor(out + blockIdx.x, acc);
}

// Launches with PDL, slices owned by warps (WARP: 32 threads a slice, each warp its own) or blocks,
// K loads of 16 bytes in flight per thread; xor of what was read into out. REC (warp slices, K = 4,
// as a GEMV warp's batch of 4 int4 chunks = 2 KiB = two g128 groups of a tile): also the batch's 8
// scale-record loads (8 bytes a lane, 64 bytes a warp per group, through L1 as the GEMV's __ldg),
// from records of 1/16 of the codes' bytes laid out per warp (REC = 1: the GEMV layout, a tile's
// groups 64 bytes apart) or per block (REC = 2: a group's records of the block's 8 warps together).
struct Recs {
  const uint2* base[4 * kLayers];
};
template <int K, bool WARP, int REC>
__global__ void __launch_bounds__(kThreads, 2) pattern_kernel(Phases ph, Recs rc, int p, uint32_t* out) {
  static_assert(REC == 0 || (WARP && K == 4), "records follow a GEMV warp's batches");
  lithe::cuda::detail::pdl_release();
  constexpr int T = WARP ? 32 : kThreads;
  const int64_t owners = WARP ? int64_t{gridDim.x} * (kThreads / 32) : gridDim.x;
  const int64_t owner = WARP ? int64_t{blockIdx.x} * (kThreads / 32) + threadIdx.x / 32 : blockIdx.x;
  const int t = WARP ? static_cast<int>(threadIdx.x % 32) : static_cast<int>(threadIdx.x);
  const int64_t per0 = (ph.n16[p] + owners - 1) / owners;
  const int64_t per = REC ? (per0 + 63) / 64 * 64 : per0;  // with records: whole groups
  const int64_t lo = min(ph.n16[p], owner * per), hi = min(ph.n16[p], lo + per);
  const int64_t groups = per / 64;  // 1 KiB of codes a group
  const int w = static_cast<int>(threadIdx.x / 32);
  auto rec_at = [&](int64_t grp) -> const uint2* {
    if constexpr (REC == 1) return rc.base[p] + (owner * groups + grp) * 8 + t / 4;
    return rc.base[p] + ((int64_t{blockIdx.x} * groups + grp) * (kThreads / 32) + w) * 8 + t / 4;
  };
  uint4 v[K];
  uint2 r[REC ? 8 : 1];
  auto load = [&](int64_t i0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = i0 + t + int64_t{k} * T;
      v[k] = i < hi ? lithe::cuda::detail::ld_stream(ph.base[p] + i) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (REC != 0) {
      const int64_t g0 = (i0 - lo) / 64;
#pragma unroll
      for (int u = 0; u < 8; ++u) r[u] = i0 < hi ? __ldg(rec_at(g0 + u / 4)) : make_uint2(0, 0);
    }
  };
  load(lo);
  lithe::cuda::detail::pdl_wait();
  uint32_t acc = 0;
  for (int64_t i0 = lo + int64_t{K} * T;; i0 += int64_t{K} * T) {
#pragma unroll
    for (int k = 0; k < K; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    if constexpr (REC != 0)
#pragma unroll
      for (int u = 0; u < 8; ++u) acc += r[u].x ^ r[u].y;
    if (i0 >= hi) break;
    load(i0);
  }
  atomicXor(out + blockIdx.x, acc);
}

// Grid-wide barrier: the last block to arrive resets the count and bumps the generation.
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned* gen) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned g = atomicAdd(gen, 0u);
    __threadfence();
    if (atomicAdd(count, 1u) == gridDim.x - 1) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(gen, 1u);
    } else {
      while (atomicAdd(gen, 0u) == g) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 2) persistent_kernel(Phases ph, int n, Mode mode, uint32_t* out,
                                                                 unsigned* sync) {
  uint4 v[kInFlight];
  first_loads(ph, 0, v);
  uint32_t acc = 0;
  for (int p = 0; p < n; ++p) {
    acc ^= rest_of(ph, p, v);
    if (p + 1 == n) break;
    if (mode != Mode::barrier) first_loads(ph, p + 1, v);
    if (mode != Mode::no_dependency) grid_barrier(sync, sync + 1);
    if (mode == Mode::barrier) first_loads(ph, p + 1, v);
  }
  atomicXor(out + blockIdx.x, acc);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Bench b = bench::open_bench(argc, argv);
  const int sms = b.prop.multiProcessorCount, grid = 2 * sms, n = 4 * kLayers;
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, 0));
  if (per_sm < 2) {
    std::fprintf(stderr, "%s: persistent_kernel fits %d blocks per SM, needs 2\n", kBenchName, per_sm);
    return 1;
  }
  Phases ph{};
  std::vector<void*> bufs;
  double total_mb = 0;
  for (int p = 0; p < n; ++p) {
    const size_t bytes = static_cast<size_t>(launch_bytes(p % 4));  // a multiple of 256
    void* d = nullptr;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemsetAsync(d, p, bytes, b.s));
    bufs.push_back(d);
    ph.base[p] = static_cast<const uint4*>(d);
    ph.n16[p] = static_cast<int64_t>(bytes / 16);
    total_mb += static_cast<double>(bytes) / 1e6;
  }
  Recs rc{};
  for (int p = 0; p < n; ++p) {
    const size_t bytes = static_cast<size_t>(ph.n16[p]) + (256 << 10);  // 64 bytes per KiB of codes, rounded up per warp
    void* d = nullptr;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemsetAsync(d, p + 7, bytes, b.s));
    bufs.push_back(d);
    rc.base[p] = static_cast<const uint2*>(d);
  }
  uint32_t* out = nullptr;
  unsigned* sync = nullptr;
  CK(cudaMalloc(&out, grid * sizeof(uint32_t)));
  CK(cudaMalloc(&sync, 2 * sizeof(unsigned)));
  CK(cudaMemsetAsync(out, 0, grid * sizeof(uint32_t), b.s));
  CK(cudaMemsetAsync(sync, 0, 2 * sizeof(unsigned), b.s));
  CK(cudaStreamSynchronize(b.s));

  const int reps = b.quick ? 10 : 30;
  auto row = [&](const char* name, const bench::Timing& t) {
    const double per_layer = t.b2b_us / kLayers;
    std::printf("| %s | %.1f | %.1f | %.0f | %.1f%% |\n", name, per_layer, per_layer / 4, total_mb / t.b2b_us * 1e3,
                100.0 * total_mb / t.b2b_us * 1e3 / b.copy_gbs);
  };
  std::printf("\n%d matrices (%d layers of qkv, o, gate/up, down: %.1f MB), grid %d x %d threads\n\n", n, kLayers,
              total_mb, grid, kThreads);
  std::printf("| way | us per layer | us per matrix | GB/s | of copy |\n|---|---|---|---|---|\n");
  for (const bool pdl : {true, false}) {
    const bench::Timing t = bench::time_runs(
        [&](int) {
          for (int p = 0; p < n; ++p)
            lithe::cuda::detail::launch_with_pdl(pdl, launch_kernel, dim3(grid), dim3(kThreads), 0, b.s, ph, p, out);
          CK(cudaGetLastError());
        },
        reps, b.s);
    row(pdl ? "launches, PDL" : "launches, no PDL", t);
  }
  const std::pair<Mode, const char*> modes[] = {{Mode::barrier, "one launch, grid barriers"},
                                                 {Mode::barrier_loads_first, "one launch, grid barriers, next loads first"},
                                                 {Mode::no_dependency, "one launch, no dependency (floor)"}};
  for (const auto& [mode, name] : modes) {
    const bench::Timing t = bench::time_runs(
        [&](int) {
          persistent_kernel<<<grid, kThreads, 0, b.s>>>(ph, n, mode, out, sync);
          CK(cudaGetLastError());
        },
        reps, b.s);
    row(name, t);
  }
  std::printf("\nAccess pattern, launches with PDL:\n\n| slice owner, loads in flight per thread | us per layer | us "
              "per matrix | GB/s | of copy |\n|---|---|---|---|---|\n");
  auto pattern = [&](auto kernel, const char* name) {
    const bench::Timing t = bench::time_runs(
        [&](int) {
          for (int p = 0; p < n; ++p)
            lithe::cuda::detail::launch_with_pdl(true, kernel, dim3(grid), dim3(kThreads), 0, b.s, ph, rc, p, out);
          CK(cudaGetLastError());
        },
        reps, b.s);
    row(name, t);
  };
  pattern(pattern_kernel<4, false, 0>, "block, 4");
  pattern(pattern_kernel<8, false, 0>, "block, 8");
  pattern(pattern_kernel<16, false, 0>, "block, 16");
  pattern(pattern_kernel<4, true, 0>, "warp, 4 (a GEMV batch)");
  pattern(pattern_kernel<8, true, 0>, "warp, 8");
  pattern(pattern_kernel<16, true, 0>, "warp, 16");
  pattern(pattern_kernel<4, true, 1>, "warp, 4 + records per tile (the GEMV layout)");
  pattern(pattern_kernel<4, true, 2>, "warp, 4 + records per block");
  for (void* d : bufs) CK(cudaFree(d));
  CK(cudaFree(out));
  CK(cudaFree(sync));
  return 0;
}

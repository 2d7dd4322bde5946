// Decode matrix-vector benchmark: lithe's cuda::matvec against cuBLAS (cublasGemmEx) on the
// Llama-2-7B decode shapes and a small model's, printing a markdown table.
//
// What is measured
// - Copy bandwidth first: cudaMemcpyAsync device-to-device of 1 GiB, bytes = 2 x size (read and
//   write), median of 20. Every kernel's rate is also given as a fraction of it.
// - Each timed run reads weights from HBM, not L2: runs rotate over K copies of the weights,
//   K = max(2, ceil(3 x L2 / weight bytes)), so the bytes between two reads of one copy exceed
//   3x the L2.
// - Runs are queued behind a spin kernel (so the CPU's launch cost is hidden), 3 warm-up runs
//   first. "us": median over >= 50 runs of the time between events recorded between consecutive
//   runs (each run isolated; includes the event's own cost, see the empty-kernel line). "b2b us":
//   the same runs queued back to back with no events between them, total / runs, as when a CUDA
//   graph replays. GB/s and "of copy" count weight bytes only (x and y stay in L2).
// - cuBLAS: y = x Wᵀ as one GEMM over the matrices stacked (no epilogue), inputs in the weight
//   type (x converted), f32 output and compute. "rel diff" = max |matvec - cuBLAS| / max |cuBLAS|
//   with the store epilogue on copy 0 (x rounded to f16/bf16 for cuBLAS: ~1e-3 is expected).
// - "+ rmsnorm" rows time the same product with the RMSNorm of x folded in (decode's attn_norm ->
//   q/k/v and ffn_norm -> gate/up); their sanity check runs without it.
// Usage: bench_cuda_matvec [--quick]   (--quick: 20 runs per row, f16 only)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "lithe/kernels/cuda_ops.h"

constexpr const char* kBenchName = "bench_cuda_matvec";
#include "cuda_bench_util.cuh"

namespace {

using namespace bench;

using lithe::cuda::Epilogue;
using lithe::cuda::MatvecOut;
using lithe::cuda::WeightType;


// Deterministic pseudo-random values in [-scale, scale) written as T.
template <typename T>
__global__ void fill_kernel(T* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (static_cast<float>(h >> 8) * (1.f / 16777216.f) * 2.f - 1.f) * scale;
    if constexpr (std::is_same_v<T, float>)
      p[i] = v;
    else if constexpr (std::is_same_v<T, __half>)
      p[i] = __float2half(v);
    else
      p[i] = __float2bfloat16(v);
  }
}

template <typename T>
void fill(void* p, size_t n, uint32_t seed, float scale) {
  fill_kernel<T><<<1024, 256>>>(static_cast<T*>(p), n, seed, scale);
  CK(cudaGetLastError());
}
void fill(WeightType t, void* p, size_t n, uint32_t seed, float scale) {
  if (t == WeightType::f32) fill<float>(p, n, seed, scale);
  if (t == WeightType::f16) fill<__half>(p, n, seed, scale);
  if (t == WeightType::bf16) fill<__nv_bfloat16>(p, n, seed, scale);
}

__global__ void empty_kernel() {}

struct Shape {
  const char* name;
  std::vector<int64_t> n_outs;
  int64_t n_in;
  Epilogue e;
  bool norm = false;  // the timed runs fold an RMSNorm of x in (MatvecNorm); the sanity check does not
};

size_t type_size(WeightType t) { return t == WeightType::f32 ? 4 : 2; }
const char* type_name(WeightType t) { return t == WeightType::f32 ? "f32" : t == WeightType::f16 ? "f16" : "bf16"; }
cudaDataType cuda_type(WeightType t) {
  return t == WeightType::f32 ? CUDA_R_32F : t == WeightType::f16 ? CUDA_R_16F : CUDA_R_16BF;
}
const char* epi_name(Epilogue e) {
  return e == Epilogue::store ? "store" : e == Epilogue::accumulate ? "accumulate" : "swiglu";
}


// One table row: shape x weight type x m.
void bench_row(Bench& b, const Shape& sh, WeightType t, int m) {
  int64_t n_total = 0;
  for (int64_t n : sh.n_outs) n_total += n;
  const size_t w_elems = static_cast<size_t>(n_total * sh.n_in);
  const size_t w_bytes = w_elems * type_size(t);
  const int copies = static_cast<int>(std::max<size_t>(2, (3 * b.l2 + w_bytes - 1) / w_bytes));
  std::vector<void*> w(copies);
  for (int k = 0; k < copies; ++k) {
    CK(cudaMalloc(&w[k], w_bytes));
    fill(t, w[k], w_elems, 1234 + k, 0.05f);
  }
  const int n_mats = static_cast<int>(sh.n_outs.size());
  const size_t x_elems = static_cast<size_t>(m * sh.n_in);
  float *x, *yc;
  void* xt;
  CK(cudaMalloc(&x, x_elems * 4));
  CK(cudaMalloc(&xt, x_elems * type_size(t)));
  CK(cudaMalloc(&yc, static_cast<size_t>(m * n_total) * 4));
  fill<float>(x, x_elems, 99, 1.f);
  if (t == WeightType::f32) CK(cudaMemcpy(xt, x, x_elems * 4, cudaMemcpyDeviceToDevice));
  else fill(t, xt, x_elems, 99, 1.f);  // the same values, rounded to the weight type
  std::vector<float*> y(n_mats);
  for (int j = 0; j < n_mats; ++j) CK(cudaMalloc(&y[j], static_cast<size_t>(m * sh.n_outs[j]) * 4));
  float* norm_w = nullptr;
  lithe::cuda::MatvecNorm norm;
  if (sh.norm) {
    CK(cudaMalloc(&norm_w, static_cast<size_t>(sh.n_in) * 4));
    fill<float>(norm_w, static_cast<size_t>(sh.n_in), 7, 1.f);
    norm = {norm_w, 1e-5f};
  }
  CK(cudaDeviceSynchronize());

  auto outs_for = [&](int k) {
    std::vector<MatvecOut> o(n_mats);
    int64_t off = 0;
    for (int j = 0; j < n_mats; ++j) {
      o[j] = {static_cast<const char*>(w[k]) + off * sh.n_in * type_size(t), sh.n_outs[j], y[j]};
      off += sh.n_outs[j];
    }
    return o;
  };
  std::vector<std::vector<MatvecOut>> outs(copies);
  for (int k = 0; k < copies; ++k) outs[k] = outs_for(k);

  const Timing mine = time_runs(
      [&](int i) {
        const auto& o = outs[i % copies];
        CK(lithe::cuda::matvec(o.data(), n_mats, t, sh.n_in, x, m, sh.e, b.s, norm));
      },
      b.reps, b.s);

  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&](int k) {
    CK(cublasGemmEx(b.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_total), m, static_cast<int>(sh.n_in),
                    &alpha, w[k], cuda_type(t), static_cast<int>(sh.n_in), xt, cuda_type(t),
                    static_cast<int>(sh.n_in), &beta, yc, CUDA_R_32F, static_cast<int>(n_total),
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  const Timing blas = time_runs([&](int i) { gemm(i % copies); }, b.reps, b.s);

  // Sanity: matvec (store) and cuBLAS on copy 0.
  gemm(0);
  CK(lithe::cuda::matvec(outs[0].data(), n_mats, t, sh.n_in, x, m, Epilogue::store, b.s));
  CK(cudaStreamSynchronize(b.s));
  std::vector<float> ref(static_cast<size_t>(m * n_total));
  CK(cudaMemcpy(ref.data(), yc, ref.size() * 4, cudaMemcpyDeviceToHost));
  double max_diff = 0, max_ref = 0;
  int64_t off = 0;
  for (int j = 0; j < n_mats; ++j) {
    const int64_t n = sh.n_outs[j];
    std::vector<float> got(static_cast<size_t>(m * n));
    CK(cudaMemcpy(got.data(), y[j], got.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < m; ++i)
      for (int64_t r = 0; r < n; ++r) {
        const double want = ref[static_cast<size_t>(i * n_total + off + r)];
        max_diff = std::max(max_diff, std::fabs(got[static_cast<size_t>(i * n + r)] - want));
        max_ref = std::max(max_ref, std::fabs(want));
      }
    off += n;
  }

  const double gbs = w_bytes / (mine.median_us * 1e-6) / 1e9;
  const double blas_gbs = w_bytes / (blas.median_us * 1e-6) / 1e9;
  const double b2b_gbs = w_bytes / (mine.b2b_us * 1e-6) / 1e9;
  std::printf(
      "| %s | %s | %s | %d | %.1f | %d | %.2f | %.0f | %.1f%% | %.2f | %.1f%% | %.2f | %.0f | %.1f%% | %.2f | %.1e |\n",
      sh.name, epi_name(sh.e), type_name(t), m, w_bytes / 1e6, copies, mine.median_us, gbs, 100 * gbs / b.copy_gbs,
      mine.b2b_us, 100 * b2b_gbs / b.copy_gbs, blas.median_us, blas_gbs, 100 * blas_gbs / b.copy_gbs, blas.b2b_us,
      max_ref > 0 ? max_diff / max_ref : max_diff);
  std::fflush(stdout);

  for (void* p : w) CK(cudaFree(p));
  for (float* p : y) CK(cudaFree(p));
  if (norm_w != nullptr) CK(cudaFree(norm_w));
  CK(cudaFree(x));
  CK(cudaFree(xt));
  CK(cudaFree(yc));
}

}  // namespace

int main(int argc, char** argv) {
  Bench b = open_bench(argc, argv);
  const bool quick = b.quick;
  const Timing empty = time_runs([&](int) { empty_kernel<<<512, 128, 0, b.s>>>(); }, b.reps, b.s);
  std::printf("empty kernel (512 blocks): %.2f us per run with events between runs, %.2f us back to back\n\n",
              empty.median_us, empty.b2b_us);

  const std::vector<Shape> shapes = {
      {"o_proj 4096x4096", {4096}, 4096, Epilogue::accumulate},
      {"qkv 3x4096x4096", {4096, 4096, 4096}, 4096, Epilogue::store},
      {"qkv + rmsnorm", {4096, 4096, 4096}, 4096, Epilogue::store, true},
      {"gate+up 2x11008x4096", {11008, 11008}, 4096, Epilogue::swiglu},
      {"gate+up + rmsnorm", {11008, 11008}, 4096, Epilogue::swiglu, true},
      {"down 4096x11008", {4096}, 11008, Epilogue::accumulate},
      {"head 32000x4096", {32000}, 4096, Epilogue::store},
      {"small 576x1536", {576}, 1536, Epilogue::accumulate},
      {"small 1536x576", {1536}, 576, Epilogue::store},
  };
  std::printf(
      "| shape (n_out x n_in) | epilogue | weights | m | MB | copies | matvec us | GB/s | of copy | b2b us | b2b of "
      "copy | cuBLAS us | GB/s | of copy | cuBLAS b2b us | rel diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& sh : shapes) {
    for (int m : {1, 2, 4, 8}) bench_row(b, sh, WeightType::f16, m);
    if (!quick) {
      bench_row(b, sh, WeightType::bf16, 1);
      bench_row(b, sh, WeightType::f32, 1);
    }
  }
  CK(cublasDestroy(b.blas));
  CK(cudaStreamDestroy(b.s));
  return 0;
}

// Mixed-precision GEMM benchmark: lithe's Marlin-class int4 GEMM (cuda_gq.h: marlin_linear,
// int4 g128 sym, f32 x in and y out, x converted to f16 inside) against cuBLAS f16
// (cublasGemmEx: the same m, n, k, f16 A and B, f32 C and accumulation), on the Llama-2-7B
// linear-layer shapes, printing a markdown table.
//
// What is measured (as bench_cuda_matvec.cu)
// - Copy bandwidth first: cudaMemcpyAsync device-to-device of 1 GiB, bytes = 2 x size (read and
//   write), median of 20. Every kernel's rate is also given as a fraction of it.
// - Each timed run reads weights from HBM, not L2: runs rotate over K copies of the weights,
//   K = max(2, ceil(3 x L2 / weight bytes)).
// - Runs are queued behind a spin kernel (the CPU's launch cost is hidden), 3 warm-up runs first.
//   "us": median over the runs of the time between events recorded between consecutive runs.
//   "b2b us": the same runs back to back with no events between them, total / runs (as a replayed
//   graph). marlin_linear is two kernels (x -> f16, GEMM; the GEMM launched with programmatic
//   dependent launch on sm_90): its times include both.
// - "GB/s" counts the weight bytes only: packed int4 codes + f16 scales for Marlin, the f16 matrix
//   for cuBLAS. "speedup" = cuBLAS us / Marlin us (median), "b2b speedup" the same for b2b.
// - "rel diff" = max |marlin - cuBLAS| / max |cuBLAS| on copy 0, where cuBLAS multiplies the
//   dequantized int4 matrix (as f16) by x rounded to f16: ~1e-3 is expected.
// - "int4 MB" / GB/s: the whole packed block (codes, scales; 2:4 metadata for the sparse rows).
// Usage: bench_cuda_qgemm [--quick] [--all] [--sparse]  (--quick: 20 runs per row; --all: also the
// 14336 shapes and the small model's; --sparse: also the 2:4 sparse variant, on a random 2:4
// matrix, against the same dense cuBLAS). To time (or profile) a few rows only:
// BENCH_M=64,128 keeps those batch sizes, BENCH_SHAPE=gate keeps the layers whose name contains it.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lithe/core/half.h"
#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/group_quant.h"

constexpr const char* kBenchName = "bench_cuda_qgemm";
#include "cuda_bench_util.cuh"

namespace {

using namespace bench;


struct Shape {
  const char* name;
  int64_t n_in, n_out;
};



void bench_shape(Bench& b, const Shape& sh, const std::vector<int>& batches, bool sparse) {
  lithe::QuantFormat f;
  f.bits = 4;
  f.group = 128;
  f.sym = true;
  f.sparse24 = sparse;
  const lithe::gq::Matrix w = lithe::gq::random_matrix(f, sh.n_out, sh.n_in, 42, false);
  auto packed = lithe::cuda::pack_marlin(w);
  CK(packed.status());
  const lithe::PackedWeight& desc = packed->desc;
  // Weight bytes streamed: the packed block (sym, no act-order: codes, scales, 2:4 metadata).
  const double w_bytes = static_cast<double>(desc.bytes);
  const size_t packed_bytes = packed->bytes.size();
  const int q_copies = copies_for(packed_bytes, b.l2);
  std::vector<void*> qw(q_copies);
  for (int k = 0; k < q_copies; ++k) {
    CK(cudaMalloc(&qw[k], packed_bytes));
    CK(cudaMemcpy(qw[k], packed->bytes.data(), packed_bytes, cudaMemcpyHostToDevice));
  }
  // The dequantized matrix as f16 [n_out][n_in] for cuBLAS.
  const std::vector<float> wf = lithe::gq::dequantize(w);
  std::vector<uint16_t> wh(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wh[i] = lithe::f32_to_f16(wf[i]);
  const size_t h_bytes = wh.size() * 2;
  const int h_copies = copies_for(h_bytes, b.l2);
  std::vector<void*> hw(h_copies);
  for (int k = 0; k < h_copies; ++k) {
    CK(cudaMalloc(&hw[k], h_bytes));
    CK(cudaMemcpy(hw[k], wh.data(), h_bytes, cudaMemcpyHostToDevice));
  }
  const int max_m = *std::max_element(batches.begin(), batches.end());
  std::vector<float> xh(static_cast<size_t>(max_m * sh.n_in));
  std::vector<uint16_t> x16(xh.size());
  uint32_t st = 12345;
  for (size_t i = 0; i < xh.size(); ++i) {
    st = st * 1664525u + 1013904223u;
    xh[i] = (static_cast<float>(st >> 8) * (1.f / 16777216.f) * 2.f - 1.f);
    x16[i] = lithe::f32_to_f16(xh[i]);
  }
  float *x, *y, *yc;
  void* xt;
  CK(cudaMalloc(&x, xh.size() * 4));
  CK(cudaMalloc(&xt, x16.size() * 2));
  CK(cudaMalloc(&y, static_cast<size_t>(max_m * sh.n_out) * 4));
  CK(cudaMalloc(&yc, static_cast<size_t>(max_m * sh.n_out) * 4));
  CK(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(xt, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice));
  const int64_t scratch_bytes = lithe::cuda::marlin_scratch_bytes(desc, max_m);
  void* scratch;
  CK(cudaMalloc(&scratch, static_cast<size_t>(scratch_bytes)));
  CK(cudaMemset(scratch, 0, static_cast<size_t>(scratch_bytes)));
  CK(cudaDeviceSynchronize());

  for (int m : batches) {
    auto marlin = [&](int k) {
      CK(lithe::cuda::marlin_linear(desc, qw[k], x, m, y, false, scratch, scratch_bytes, b.s));
    };
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&](int k) {
      CK(cublasGemmEx(b.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(sh.n_out), m, static_cast<int>(sh.n_in),
                      &alpha, hw[k], CUDA_R_16F, static_cast<int>(sh.n_in), xt, CUDA_R_16F, static_cast<int>(sh.n_in),
                      &beta, yc, CUDA_R_32F, static_cast<int>(sh.n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    const Timing mine = time_runs([&](int i) { marlin(i % q_copies); }, b.reps, b.s);
    const Timing blas = time_runs([&](int i) { gemm(i % h_copies); }, b.reps, b.s);

    // Sanity: both on copy 0.
    marlin(0);
    gemm(0);
    CK(cudaStreamSynchronize(b.s));
    std::vector<float> got(static_cast<size_t>(m * sh.n_out)), ref(got.size());
    CK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ref.data(), yc, ref.size() * 4, cudaMemcpyDeviceToHost));
    const double gbs = w_bytes / (mine.median_us * 1e-6) / 1e9;
    const double b2b_gbs = w_bytes / (mine.b2b_us * 1e-6) / 1e9;
    const double blas_gbs = static_cast<double>(h_bytes) / (blas.median_us * 1e-6) / 1e9;
    std::printf("| %s | %s | %lld x %lld | %d | %.2f | %.2f | %.0f | %.1f%% | %.2f | %.1f%% | %.2f | %.0f | %.2f | "
                "%.2fx | %.2fx | %.1e |\n",
                sh.name, sparse ? "g128 sym 2:4" : "g128 sym", static_cast<long long>(sh.n_in),
                static_cast<long long>(sh.n_out), m, w_bytes / 1e6,
                mine.median_us, gbs, 100 * gbs / b.copy_gbs, mine.b2b_us, 100 * b2b_gbs / b.copy_gbs, blas.median_us,
                blas_gbs, blas.b2b_us, blas.median_us / mine.median_us, blas.b2b_us / mine.b2b_us,
                rel_diff(got.data(), ref.data(), got.size()));
    std::fflush(stdout);
  }
  for (void* p : qw) CK(cudaFree(p));
  for (void* p : hw) CK(cudaFree(p));
  CK(cudaFree(x));
  CK(cudaFree(xt));
  CK(cudaFree(y));
  CK(cudaFree(yc));
  CK(cudaFree(scratch));
}

}  // namespace

int main(int argc, char** argv) {
  bool all = false, sparse = false;
  Bench b = open_bench(argc, argv, {{"--all", &all}, {"--sparse", &sparse}});
  const cudaDeviceProp& p = b.prop;
  std::printf("marlin: int4 g128 sym; PDL between its two kernels %s (LITHE_MARLIN_PDL=0 turns it off)\n",
              p.major >= 9 && !knob_off("LITHE_MARLIN_PDL") ? "on" : "off");
  std::printf("targets (issue 7): speedup >= 3.3x at m 1..16, >= 1.0x at m 128; at m 1, gate/up under "
              "PyTorch _weight_int4pack_mm's 21 us for the 11008x4096 weight (H200)\n\n");

  std::vector<Shape> shapes = {
      {"q/k/v/o", 4096, 4096},
      {"gate/up", 4096, 11008},
      {"down", 11008, 4096},
  };
  if (all) {
    shapes.push_back({"gate/up 14336", 4096, 14336});
    shapes.push_back({"down 14336", 14336, 4096});
    shapes.push_back({"small up", 576, 1536});
    shapes.push_back({"small down", 1536, 576});
    shapes.push_back({"small k/v", 576, 192});
  }
  const std::vector<int> batches = batches_from_env({1, 2, 4, 8, 16, 32, 64, 128});
  if (const char* e = std::getenv("BENCH_SHAPE"))
    std::erase_if(shapes, [&](const Shape& sh) { return std::strstr(sh.name, e) == nullptr; });
  std::printf("| layer | int4 format | n_in x n_out | m | int4 MB | marlin us | GB/s | of copy | b2b us | b2b of copy "
              "| cuBLAS f16 us | GB/s | cuBLAS b2b us | speedup | b2b speedup | rel diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& sh : shapes) {
    bench_shape(b, sh, batches, false);
    if (sparse) bench_shape(b, sh, batches, true);
  }
  CK(cublasDestroy(b.blas));
  CK(cudaStreamDestroy(b.s));
  return 0;
}

// Group-quantized GEMV benchmark (cuda_gq.h: gemv_linear) on the Llama-2-7B decode shapes (and the
// 14336-wide MLP of Llama-3-8B / Mistral-7B), against
// lithe's f16 matvec (cuda_ops.h: matvec) and cuBLAS f16 on the same weights dequantized to f16
// (gemv_dequantize_f16), printing a markdown table.
//
// What is measured
// - Copy bandwidth first: a 1 GiB device-to-device cudaMemcpyAsync, bytes = 2 x size, median of 20.
// - Every timed run reads its weights from HBM: runs rotate over K copies, K = max(2, ceil(3 x L2 /
//   bytes)) (packed copies for the GEMV, f16 copies for matvec and cuBLAS).
// - Runs are queued behind a spin kernel so the CPU's launch cost is hidden; "us" is the median over
//   the runs of the time between events recorded between consecutive runs (3 warm-up runs).
// - GB/s counts the weight bytes (packed: codes, scale records, perm), x and y are not counted.
//   "of copy" is that rate over the copy bandwidth. "x f16" columns: the f16 time over the GEMV's.
// - cuBLAS: cublasGemmEx, W f16 [n_out][n_in] (transposed), x converted to f16, f32 output and
//   compute. "rel diff gemv" / "rel diff cuBLAS" = max |y - ref| / max |ref| against the scalar
//   reference (gq::reference_linear, double sums) on copy 0 (cuBLAS rounds x to f16: ~1e-3); a row
//   over kMaxRelDiff is marked WRONG and the program exits 1.
// - A second table times one Llama-2-7B decode layer's projections as the engine launches them:
//   q/k/v in one launch with the RMSNorm folded in, o accumulating into the residual, gate/up with
//   the norm and the SwiGLU epilogue, down accumulating (o and down through deferred residual sums
//   at m <= kGemvResidualMaxRows, cuda_gq.h: GemvResidual, unless LITHE_GEMV_DEFER=0); against
//   lithe's f16 matvec doing the same
//   (layer copies rotated as above). "tok/s bound": 32 such layers per token, nothing else. At m = 1
//   a last row gives what each launch adds: the layer's time less the layer's without that launch.
// - A third table times gemv_dequantize_f16 (reads the packed bytes, writes 2 bytes per weight).
// Usage: bench_cuda_gq_gemv [--quick]   (--quick: 20 runs per row, m = 1, 8 and 16 only)
// BENCH_M=1,4 keeps those batch sizes (<= 16), BENCH_FORMAT=int4 the formats whose name contains it.
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

#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/cuda_ops.h"
#include "lithe/kernels/group_quant.h"

constexpr const char* kBenchName = "bench_cuda_gq_gemv";
#include "cuda_bench_util.cuh"

namespace {

// A sanity bound, far above rounding (f16 x: ~1e-3) and far below a wrong result (~1).
constexpr double kMaxRelDiff = 1e-2;

using namespace lithe;
using namespace bench;


__global__ void to_half_kernel(const float* x, __half* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

// Median microseconds of run(i), i = 0..reps-1 (isolated runs).
template <typename F>
double time_us(F&& run, int reps, cudaStream_t s) {
  return time_runs(run, reps, s).median_us;
}

// K device copies of `bytes` bytes (copy 0 from host data or from a device buffer).
struct Copies {
  std::vector<void*> p;
  ~Copies() {
    for (void* q : p) cudaFree(q);
  }
};
void replicate(Copies& cp, const void* src, size_t bytes, int k, cudaMemcpyKind kind) {
  cp.p.resize(static_cast<size_t>(k));
  for (auto& q : cp.p) {
    CK(cudaMalloc(&q, bytes));
    CK(cudaMemcpy(q, src, bytes, kind));
  }
}

// A zeroed device buffer of at least `bytes` bytes (GEMV scratch).
void* zeroed(int64_t bytes) {
  void* p;
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 256));
  CK(cudaMalloc(&p, n));
  CK(cudaMemset(p, 0, n));
  return p;
}

// n values uniform in [-1, 1) (an LCG from `seed`) into device memory x; returns them.
std::vector<float> upload_uniform(float* x, int64_t n, uint32_t seed) {
  std::vector<float> hx(static_cast<size_t>(n));
  for (float& v : hx) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) * (2.f / 16777216.f) - 1.f;
  }
  CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  return hx;
}

std::string fmt2(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

struct Format {
  const char* name;
  int bits;
  int64_t group;        // 0: per channel
  bool sparse = false;  // 2:4 (random_matrix: two zero weights in every run of 4 columns)
};
QuantFormat quant_format(const Format& fm, int64_t n_in) {
  QuantFormat f;
  f.bits = fm.bits;
  f.group = fm.group > 0 ? fm.group : n_in;
  f.sym = false;
  f.sparse24 = fm.sparse;
  return f;
}

// Prints the matrix's rows; returns how many of them are over kMaxRelDiff.
int bench_matrix(Bench& c, int64_t n_in, int64_t n_out, const Format& fm, const std::vector<int>& ms,
                  std::vector<std::string>& dequant_rows) {
  const gq::Matrix mat = gq::random_matrix(quant_format(fm, n_in), n_out, n_in, 1234, false);
  auto packed = cuda::pack_gemv(mat);
  CK(packed.status());
  const cuda::PackedHost& ph = packed.value();
  const size_t pbytes = ph.bytes.size(), hbytes = static_cast<size_t>(n_out * n_in) * 2;
  Copies pw, hw;
  replicate(pw, ph.bytes.data(), pbytes, copies_for(pbytes, c.l2), cudaMemcpyHostToDevice);
  void* w16;  // the same weights as dense f16
  CK(cudaMalloc(&w16, hbytes));
  CK(cuda::gemv_dequantize_f16(ph.desc, pw.p[0], w16, c.s));
  CK(cudaStreamSynchronize(c.s));
  replicate(hw, w16, hbytes, copies_for(hbytes, c.l2), cudaMemcpyDeviceToDevice);
  CK(cudaFree(w16));

  const double dq_us =
      time_us([&](int i) { CK(cuda::gemv_dequantize_f16(ph.desc, pw.p[i % pw.p.size()], hw.p[0], c.s)); }, c.reps, c.s);
  char line[256];
  std::snprintf(line, sizeof line, "| %lld x %lld | %s | %.1f | %.2f | %.0f | %.1f%% |", static_cast<long long>(n_in),
                static_cast<long long>(n_out), fm.name, static_cast<double>(pbytes) / 1e6, dq_us,
                static_cast<double>(pbytes + hbytes) / (dq_us * 1e-6) / 1e9,
                100 * static_cast<double>(pbytes + hbytes) / (dq_us * 1e-6) / 1e9 / c.copy_gbs);
  dequant_rows.emplace_back(line);

  const int mmax = *std::max_element(ms.begin(), ms.end());
  float *x, *y, *yb;
  __half* xh;
  CK(cudaMalloc(&x, static_cast<size_t>(mmax * n_in) * 4));
  CK(cudaMalloc(&xh, static_cast<size_t>(mmax * n_in) * 2));
  CK(cudaMalloc(&y, static_cast<size_t>(mmax * n_out) * 4));
  CK(cudaMalloc(&yb, static_cast<size_t>(mmax * n_out) * 4));
  const std::vector<float> hx = upload_uniform(x, mmax * n_in, 99);
  std::vector<float> ref(static_cast<size_t>(mmax * n_out));  // the scalar reference (double sums)
  gq::reference_linear(mat, hx.data(), mmax, ref.data());
  to_half_kernel<<<256, 256, 0, c.s>>>(x, xh, mmax * n_in);
  CK(cudaGetLastError());
  const cuda::GemvOut go{&ph.desc, pw.p[0], y};
  const int64_t sbytes = cuda::gemv_scratch_bytes(&go, 1, cuda::Epilogue::store);
  void* scr = zeroed(sbytes);
  int wrong = 0;
  for (int m : ms) {
    const double gemv = time_us(
        [&](int i) { CK(cuda::gemv_linear(ph.desc, pw.p[i % pw.p.size()], x, m, y, false, scr, sbytes, c.s)); },
        c.reps, c.s);
    // lithe's f16 matvec runs m <= kMatvecMaxRows; larger m: cuBLAS only ("-" columns).
    const bool has_mv = m <= cuda::kMatvecMaxRows;
    const double mv = !has_mv ? 0.0
                              : time_us(
                                    [&](int i) {
                                      const cuda::MatvecOut o{hw.p[i % hw.p.size()], n_out, y};
                                      CK(cuda::matvec(&o, 1, cuda::WeightType::f16, n_in, x, m, cuda::Epilogue::store,
                                                      c.s));
                                    },
                                    c.reps, c.s);
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&](int i) {
      CK(cublasGemmEx(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out), m, static_cast<int>(n_in), &alpha,
                      hw.p[i % hw.p.size()], CUDA_R_16F, static_cast<int>(n_in), xh, CUDA_R_16F,
                      static_cast<int>(n_in), &beta, yb, CUDA_R_32F, static_cast<int>(n_out), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    };
    const double blas = time_us(gemm, c.reps, c.s);
    // Sanity: the GEMV and cuBLAS on copy 0 against the scalar reference.
    CK(cuda::gemv_linear(ph.desc, pw.p[0], x, m, y, false, scr, sbytes, c.s));
    gemm(0);
    CK(cudaStreamSynchronize(c.s));
    std::vector<float> a(static_cast<size_t>(m * n_out)), b(a.size());
    CK(cudaMemcpy(a.data(), y, a.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), yb, b.size() * 4, cudaMemcpyDeviceToHost));
    const double d_gemv = rel_diff(a.data(), ref.data(), a.size()), d_blas = rel_diff(b.data(), ref.data(), b.size());
    const bool ok = d_gemv <= kMaxRelDiff && d_blas <= kMaxRelDiff;
    wrong += ok ? 0 : 1;
    const double gbs = static_cast<double>(pbytes) / (gemv * 1e-6) / 1e9;
    const std::string mv_us = has_mv ? fmt2(mv) : "-", mv_x = has_mv ? fmt2(mv / gemv) + "x" : "-";
    std::printf("| %lld x %lld | %s | %d | %.1f | %.2f | %.0f | %.1f%% | %s | %.2f | %s | %.2fx | %.1e | %.1e%s |\n",
                static_cast<long long>(n_in), static_cast<long long>(n_out), fm.name, m,
                static_cast<double>(pbytes) / 1e6, gemv, gbs, 100 * gbs / c.copy_gbs, mv_us.c_str(), blas, mv_x.c_str(),
                blas / gemv, d_gemv, d_blas, ok ? "" : " WRONG");
    std::fflush(stdout);
  }
  CK(cudaFree(x));
  CK(cudaFree(xh));
  CK(cudaFree(y));
  CK(cudaFree(yb));
  CK(cudaFree(scr));
  return wrong;
}

// One decode layer's projections (Llama-2-7B: d 4096, ff 11008), gq and f16, for each m of ms.
void bench_layer(Bench& c, const Format& fm, const std::vector<int>& ms) {
  constexpr int64_t d = 4096, ff = 11008;
  const int64_t shapes[7][2] = {{d, d}, {d, d}, {d, d}, {d, d}, {ff, d}, {ff, d}, {d, ff}};  // n_out x n_in
  std::vector<cuda::PackedHost> ph;
  size_t layer_bytes = 0, layer16 = 0;
  for (int k = 0; k < 7; ++k) {
    auto p = cuda::pack_gemv(gq::random_matrix(quant_format(fm, shapes[k][1]), shapes[k][0], shapes[k][1], 50 + k, false));
    CK(p.status());
    ph.push_back(std::move(p).value());
    layer_bytes += ph.back().bytes.size();
    layer16 += static_cast<size_t>(shapes[k][0] * shapes[k][1]) * 2;
  }
  const int copies = copies_for(layer_bytes, c.l2), copies16 = copies_for(layer16, c.l2);
  std::vector<Copies> pw(7), hw(7);
  for (int k = 0; k < 7; ++k) {
    replicate(pw[k], ph[k].bytes.data(), ph[k].bytes.size(), copies, cudaMemcpyHostToDevice);
    const size_t hb = static_cast<size_t>(shapes[k][0] * shapes[k][1]) * 2;
    void* w16;
    CK(cudaMalloc(&w16, hb));
    CK(cuda::gemv_dequantize_f16(ph[k].desc, pw[k].p[0], w16, c.s));
    CK(cudaStreamSynchronize(c.s));
    replicate(hw[k], w16, hb, copies16, cudaMemcpyDeviceToDevice);
    CK(cudaFree(w16));
  }
  const int mmax = *std::max_element(ms.begin(), ms.end());
  float* buf;  // x, the norm weight, q, k, v, gate (h), up: plenty for every activation
  const size_t act = static_cast<size_t>(mmax * ff);
  CK(cudaMalloc(&buf, act * 4 * 8));
  CK(cudaMemset(buf, 0, act * 4 * 8));
  float *x = buf, *g = buf + act, *q = buf + 2 * act, *k = buf + 3 * act, *v = buf + 4 * act, *h = buf + 5 * act,
        *u = buf + 6 * act, *res = buf + 7 * act;
  {
    std::vector<float> ones(static_cast<size_t>(ff), 1.f);
    CK(cudaMemcpy(g, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    upload_uniform(x, mmax * ff, 7);
  }
  const cuda::MatvecNorm norm{g, 1e-5f};
  // The layer's 4 launches for each weight copy, built once: (matrices, input, epilogue, norm, deferred
  // residual sums). As the engine runs them (unless LITHE_GEMV_DEFER=0): o and down add their sums
  // into accumulators acc0 / acc1, each folding the other into the residual; gate/up reads res +
  // acc0, and q/k/v x + acc1 (the engine's qkv reads the residual; x stands in for it here).
  struct Launch {
    const char* name;
    std::vector<cuda::GemvOut> outs;
    const float* x;
    cuda::Epilogue e;
    bool norm;
    cuda::GemvResidual r;
  };
  const bool defer = !knob_off("LITHE_GEMV_DEFER");
  int64_t* acc;  // [2][mmax * d]
  CK(cudaMalloc(&acc, static_cast<size_t>(2 * mmax * d) * 8));
  CK(cudaMemset(acc, 0, static_cast<size_t>(2 * mmax * d) * 8));
  int64_t *acc0 = acc, *acc1 = acc + mmax * d;
  cuda::GemvResidual r_qkv, r_o, r_gu, r_down;
  if (defer) {  // (at m <= kGemvResidualMaxRows, below)
    r_qkv.in = acc1;
    r_o.add = acc0, r_o.fold = acc1;
    r_gu.in = acc0;
    r_down.add = acc1, r_down.fold = acc0;
  }
  std::vector<std::vector<Launch>> layer(static_cast<size_t>(copies));
  for (int i = 0; i < copies; ++i) {
    auto outs = [&](std::initializer_list<std::pair<int, float*>> list) {
      std::vector<cuda::GemvOut> o;
      for (const auto& [idx, y] : list) o.push_back({&ph[idx].desc, pw[idx].p[i], y});
      return o;
    };
    layer[i] = {{"qkv", outs({{0, q}, {1, k}, {2, v}}), x, cuda::Epilogue::store, true, r_qkv},
                {"o", outs({{3, res}}), q, cuda::Epilogue::accumulate, false, r_o},
                {"gate/up", outs({{4, h}, {5, u}}), res, cuda::Epilogue::swiglu, true, r_gu},
                {"down", outs({{6, res}}), h, cuda::Epilogue::accumulate, false, r_down}};
  }
  int64_t sbytes = 0;
  for (const Launch& l : layer[0])
    sbytes = std::max(sbytes, cuda::gemv_scratch_bytes(l.outs.data(), static_cast<int>(l.outs.size()), l.e));
  void* scr = zeroed(sbytes);
  // The layer's launches but `skip` (-1: all of them), timed at batch m.
  auto layer_us = [&](int m, int skip) {
    return time_us(
        [&](int i) {
          const std::vector<Launch>& ls = layer[static_cast<size_t>(i % copies)];
          for (size_t j = 0; j < ls.size(); ++j) {
            const Launch& l = ls[j];
            if (static_cast<int>(j) != skip)
              CK(cuda::gemv(l.outs.data(), static_cast<int>(l.outs.size()), l.x, m, l.e, scr, sbytes, c.s,
                            l.norm ? norm : cuda::MatvecNorm{}, nullptr,
                            m <= cuda::kGemvResidualMaxRows ? &l.r : nullptr));
          }
        },
        c.reps, c.s);
  };
  std::string parts;  // m = 1: what each launch adds to the layer (the layer less the layer without it)
  for (int m : ms) {
    const double gq_us = layer_us(m, -1);
    if (m == 1)
      for (size_t j = 0; j < layer[0].size(); ++j)
        parts += std::string(j ? ", " : "") + layer[0][j].name + " " + fmt2(gq_us - layer_us(m, static_cast<int>(j)));
    const double f16_us = m > cuda::kMatvecMaxRows ? 0.0 : time_us(  // lithe's f16 matvec: m <= 8
        [&](int i) {
          auto w = [&](int idx) { return hw[idx].p[i % copies16]; };
          const cuda::MatvecOut qkv[3] = {{w(0), d, q}, {w(1), d, k}, {w(2), d, v}}, o{w(3), d, res},
                                gu[2] = {{w(4), ff, h}, {w(5), ff, u}}, dn{w(6), d, res};
          CK(cuda::matvec(qkv, 3, cuda::WeightType::f16, d, x, m, cuda::Epilogue::store, c.s, norm));
          CK(cuda::matvec(&o, 1, cuda::WeightType::f16, d, q, m, cuda::Epilogue::accumulate, c.s));
          CK(cuda::matvec(gu, 2, cuda::WeightType::f16, d, res, m, cuda::Epilogue::swiglu, c.s, norm));
          CK(cuda::matvec(&dn, 1, cuda::WeightType::f16, ff, h, m, cuda::Epilogue::accumulate, c.s));
        },
        c.reps, c.s);
    const double gbs = static_cast<double>(layer_bytes) / (gq_us * 1e-6) / 1e9;
    const std::string f16_col = m > cuda::kMatvecMaxRows ? "- | -" : fmt2(f16_us) + " | " + fmt2(f16_us / gq_us) + "x";
    std::printf("| %s | %d | %.1f | %.1f | %.0f | %.1f%% | %s | %.0f |\n", fm.name, m,
                static_cast<double>(layer_bytes) / 1e6, gq_us, gbs, 100 * gbs / c.copy_gbs, f16_col.c_str(),
                1e6 / (32 * gq_us));
    std::fflush(stdout);
  }
  if (!parts.empty()) std::printf("| %s | 1 | us each launch adds: %s | | | | | | |\n", fm.name, parts.c_str());
  CK(cudaFree(buf));
  CK(cudaFree(scr));
  CK(cudaFree(acc));
}

}  // namespace

int main(int argc, char** argv) {
  Bench c = open_bench(argc, argv);
  const bool quick = c.quick;
  std::printf("\n");

  std::vector<Format> formats = {{"int4 g128", 4, 128},   {"int3 g128", 3, 128},         {"int2 g64", 2, 64},
                                 {"int8 per-ch", 8, 0}, {"int4 g128 2:4", 4, 128, true}};
  if (const char* e = std::getenv("BENCH_FORMAT"))
    std::erase_if(formats, [&](const Format& f) { return std::strstr(f.name, e) == nullptr; });
  const int64_t shapes[][2] = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {4096, 14336}, {14336, 4096}};  // n_in x n_out
  const std::vector<int> ms = batches_from_env(quick ? std::vector<int>{1, 8, 16} : std::vector<int>{1, 2, 4, 8, 16});
  std::vector<std::string> dequant_rows;
  int wrong_rows = 0;
  std::printf(
      "| n_in x n_out | format | m | packed MB | gemv us | GB/s | of copy | f16 matvec us | cuBLAS f16 us | x matvec | "
      "x cuBLAS | rel diff gemv | rel diff cuBLAS |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& sh : shapes)
    for (const Format& fm : formats) wrong_rows += bench_matrix(c, sh[0], sh[1], fm, ms, dequant_rows);

  std::printf("\nOne Llama-2-7B decode layer's projections (4 launches: qkv + norm, o + residual, gate/up + "
              "norm + swiglu, down + residual):\n\n");
  std::printf("| format | m | layer MB | gq us | GB/s | of copy | f16 matvec us | x f16 | tok/s bound (32 layers) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Format& fm : formats) bench_layer(c, fm, ms);

  std::printf("\ngemv_dequantize_f16 (bytes = packed read + f16 written):\n\n");
  std::printf("| n_in x n_out | format | packed MB | us | GB/s | of copy |\n|---|---|---|---|---|---|\n");
  for (const std::string& r : dequant_rows) std::printf("%s\n", r.c_str());
  CK(cublasDestroy(c.blas));
  CK(cudaStreamDestroy(c.s));
  if (wrong_rows > 0) std::fprintf(stderr, "%d rows differ from the reference by more than %.0e\n", wrong_rows, kMaxRelDiff);
  return wrong_rows > 0 ? 1 : 0;
}

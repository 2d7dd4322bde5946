// Decode attention benchmark (cuda_ops.h: attention_decode): one query per launch over n_kv cached
// slots of an f16 cache, at the head shapes of Llama-2-7B (32 heads, 32 kv heads, head_dim 128) and
// Llama-3-8B (32 / 8 / 128), printing a markdown table.
//
// What is measured
// - One launch per run, as a decode step makes it per layer: q f32 [n_heads][D], K / V f16
//   [capacity][n_kv_heads * D], positions 0..n_kv-1, the query at position n_kv - 1 (every slot
//   visible), *n_kv on the device. capacity sizes the grid (the split count); a decode step's
//   capacity is its cache's. n_kv = 0 is the launch alone (every block finds nothing to do).
// - "us": the median of isolated runs queued behind a spin kernel (events between runs); "b2b": the
//   mean of the same runs back to back (PDL lets each launch's start overlap the previous one).
//   Each run reads the same cache (it stays in L2 up to ~50 MB): the latency of a step, not HBM.
// - "KV GB/s": the K and V bytes of the n_kv slots over "us".
// - "rel diff": max |out - ref| / max |ref| against the scalar CPU reference (cpu::ref::attention)
//   over the same f16 cache; over kMaxRelDiff the row is marked WRONG and the program exits 1.
// The engine's knobs apply as in a decode (e.g. LITHE_ATTN_SINGLE=0: merge always).
// Usage: bench_cuda_attention [--quick]   (--quick: 20 runs per row instead of 100)
// BENCH_NKV=0,64,128 keeps those context lengths.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "lithe/kernels/cpu.h"
#include "lithe/kernels/cuda_ops.h"

constexpr const char* kBenchName = "bench_cuda_attention";
#include "cuda_bench_util.cuh"

namespace {

constexpr double kMaxRelDiff = 1e-3;  // f32 sums in two orders: ~1e-6; a wrong result: ~1
constexpr int kD = 128;

using namespace lithe;
using namespace bench;

struct HeadShape {
  const char* name;
  int heads, kv_heads;
};

// The scalar CPU reference (cpu::ref::attention, the oracle of the CPU kernels) over the same
// f16 cache, positions and query.
std::vector<float> reference(const std::vector<float>& q, const std::vector<__half>& k, const std::vector<__half>& v,
                             const std::vector<int32_t>& pos, int32_t qpos, const HeadShape& sh, int n_kv, float scale) {
  std::vector<float> out(q.size(), 0.f);
  cpu::AttentionArgs a{};
  a.q = q.data();
  a.n_q = 1;
  a.q_pos = &qpos;
  a.k = k.data();
  a.v = v.data();
  a.kv_dtype = DType::f16;
  a.n_kv = n_kv;
  a.kv_pos = pos.data();
  a.kv_row_stride = static_cast<int64_t>(sh.kv_heads) * kD;
  a.n_heads = sh.heads;
  a.n_kv_heads = sh.kv_heads;
  a.head_dim = kD;
  a.scale = scale;
  a.out = out.data();
  CK(cpu::ref::attention(a));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Bench b = open_bench(argc, argv);
  const std::vector<int> lengths = ints_from_env("BENCH_NKV", {0, 1, 32, 64, 65, 128, 512, 2048, 4096}, 0);
  const std::vector<int> capacities = {256, 4096};
  const HeadShape shapes[] = {{"Llama-2-7B", 32, 32}, {"Llama-3-8B", 32, 8}};
  std::printf("\n| heads / kv heads | capacity | n_kv | us | b2b us | KV GB/s | rel diff |\n|---|---|---|---|---|---|---|\n");
  bool wrong = false;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (const HeadShape& sh : shapes)
    for (const int cap : capacities) {
      const size_t rows = static_cast<size_t>(cap), stride = static_cast<size_t>(sh.kv_heads) * kD;
      std::vector<__half> hk(rows * stride), hv(rows * stride);
      for (auto& x : hk) x = __float2half(uni(rng));
      for (auto& x : hv) x = __float2half(uni(rng));
      std::vector<float> hq(static_cast<size_t>(sh.heads) * kD);
      for (auto& x : hq) x = 2.f * uni(rng);
      std::vector<int32_t> hpos(rows);
      for (size_t i = 0; i < rows; ++i) hpos[i] = static_cast<int32_t>(i);
      void *dk, *dv, *work;
      float *dq, *dout;
      int32_t *dpos, *dqpos, *dnkv;
      CK(cudaMalloc(&dk, hk.size() * 2));
      CK(cudaMalloc(&dv, hv.size() * 2));
      CK(cudaMalloc(&dq, hq.size() * 4));
      CK(cudaMalloc(&dout, hq.size() * 4));
      CK(cudaMalloc(&dpos, rows * 4));
      CK(cudaMalloc(&dqpos, 4));
      CK(cudaMalloc(&dnkv, 4));
      CK(cudaMemcpy(dk, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dv, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dpos, hpos.data(), rows * 4, cudaMemcpyHostToDevice));
      cuda::AttentionParams p;
      p.q = dq;
      p.q_pos = dqpos;
      p.n_q = 1;
      p.k = dk;
      p.v = dv;
      p.kv = cuda::KvType::f16;
      p.kv_pos = dpos;
      p.n_kv = dnkv;
      p.kv_capacity = cap;
      p.kv_stride = static_cast<int64_t>(stride);
      p.n_heads = sh.heads;
      p.n_kv_heads = sh.kv_heads;
      p.head_dim = kD;
      p.scale = 1.f / std::sqrt(static_cast<float>(kD));
      p.out = dout;
      const size_t wb = cuda::attention_decode_work_bytes(p);
      CK(cudaMalloc(&work, wb));
      CK(cudaMemset(work, 0, wb));  // the merge counters start at zero (cuda_ops.h)
      for (const int n_kv : lengths) {
        if (n_kv > cap) continue;
        const int32_t qpos = std::max(0, n_kv - 1);
        CK(cudaMemcpy(dqpos, &qpos, 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dnkv, &n_kv, 4, cudaMemcpyHostToDevice));
        auto launch = [&](int) { CK(cuda::attention_decode(p, work, b.s)); };
        launch(0);
        CK(cudaStreamSynchronize(b.s));
        std::vector<float> got(hq.size());
        CK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
        const std::vector<float> want = reference(hq, hk, hv, hpos, qpos, sh, n_kv, p.scale);
        const double rd = rel_diff(got.data(), want.data(), got.size());
        const bool bad = !(rd <= kMaxRelDiff);
        wrong = wrong || bad;
        const Timing t = time_runs(launch, b.reps, b.s);
        const double bytes = 2.0 * n_kv * static_cast<double>(stride) * 2.0;
        std::printf("| %s %d / %d | %d | %d | %.2f | %.2f | %.0f | %.1e%s |\n", sh.name, sh.heads, sh.kv_heads, cap, n_kv,
                    t.median_us, t.b2b_us, bytes / (t.median_us * 1e-6) / 1e9, rd, bad ? " WRONG" : "");
      }
      for (void* ptr : {dk, dv, work, static_cast<void*>(dq), static_cast<void*>(dout), static_cast<void*>(dpos),
                        static_cast<void*>(dqpos), static_cast<void*>(dnkv)})
        CK(cudaFree(ptr));
    }
  if (wrong) std::fprintf(stderr, "%s: a result differs from the reference beyond %.0e\n", kBenchName, kMaxRelDiff);
  return wrong ? 1 : 0;
}

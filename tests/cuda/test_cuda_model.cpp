// The CUDA backend end to end (runs on a GPU machine; skips without one):
//  - every Backend op on cuda against the CPU backend on fresh random inputs (odd sizes, both the
//    matvec and the GEMM paths, prefill and decode attention through a KV cache, top-k), and the
//    fused ops against the CPU's default compositions: rmsnorm_linear_many / rmsnorm_swiglu (norm
//    folded into the matvec) and rope_attention (one rope + cache-store launch, decode merge in the
//    split kernel) over prefill, captured and replayed decode steps;
//  - the default model on cuda vs cpu, both dequantized to f32: logits of 8 prompts (NMSE and max
//    |diff| printed and bounded) and 64 greedy tokens of 4 prompts through generate() (device
//    top-k, CUDA-graph decode steps) identical; the f16 path's logits error reported;
//  - the rolling (sink + window) cache's pre-RoPE attention through prefill, replayed steps and
//    evictions;
//  - an impossible KV cache fails with a message naming the bytes asked for and free.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "lithe/core/file_util.h"
#include "lithe/decode/generate.h"
#include "lithe/kernels/convert.h"
#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/group_quant.h"
#include "lithe/models/model.h"
#include "lithe/runtime/backend.h"

using namespace lithe;

namespace {

struct Both {
  std::unique_ptr<Backend> cpu = make_cpu_backend(), gpu;
  Both() {
    auto g = make_cuda_backend();
    if (g) gpu = std::move(*g);
  }
};

Tensor rand_host(DType dt, Shape shape, uint32_t seed, float scale = 1.0f) {
  auto f = Tensor::empty(DType::f32, shape);
  EXPECT_TRUE(f.is_ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  for (int64_t i = 0; i < f->numel(); ++i) f->data_as<float>()[i] = nd(rng);
  if (dt == DType::f32) return *f;
  auto c = convert(*f, dt);
  EXPECT_TRUE(c.is_ok());
  return *c;
}

Tensor to_gpu(const Tensor& t) {
  auto d = t.to(Device::cuda);
  EXPECT_TRUE(d.is_ok()) << d.status().to_string();
  return *d;
}

std::vector<float> host_rows(Backend& b, const Tensor& t, int64_t m) {
  std::vector<float> v(static_cast<size_t>(m * t.dim(1)));
  EXPECT_TRUE(b.to_host(t, m, v.data()).is_ok());
  return v;
}

// max |a - b| relative to max |b|.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, s = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]));
    s = std::max(s, std::abs(static_cast<double>(b[i])));
  }
  return e / s;
}

// Decode-step tensors per layer on the gpu, kept across steps (as the model's workspace is, so
// that replayed graphs see the same addresses).
// A rotary table over rot_dim dims with base 10000.
cpu::RopeTable rope_table(int rot_dim) {
  cpu::RopeTable rt;
  rt.rot_dim = rot_dim;
  for (int i = 0; i < rot_dim / 2; ++i)
    rt.inv_freq.push_back(static_cast<float>(std::pow(10000.0, -i / static_cast<double>(rot_dim / 2))));
  return rt;
}

struct StepTensors {
  std::vector<Tensor> q, k, v, o;
  StepTensors(Backend& gpu, int64_t layers, int64_t q_dim, int64_t kv_dim) {
    for (int64_t l = 0; l < layers; ++l) {
      q.push_back(*gpu.alloc(DType::f32, {1, q_dim}));
      k.push_back(*gpu.alloc(DType::f32, {1, kv_dim}));
      v.push_back(*gpu.alloc(DType::f32, {1, kv_dim}));
      o.push_back(*gpu.alloc(DType::f32, {1, q_dim}));
    }
  }
};

// One rope_attention call per layer on both backends over fresh random q/k/v of m rows at `pos`
// (cache slots sc / sg): on cuda bracketed by begin_step/end_step when m == 1 (the second such
// step is captured, later ones replay), then each layer's output and q (and k when check_k: it
// is rotated in place) compared with the cpu's; outputs within out_tol of the largest value.
void rope_attention_both(Both& b, KvCache& cc, KvCache& cg, int64_t layers, int64_t m, const std::vector<int32_t>& pos,
                         const std::vector<int64_t>& sc, const std::vector<int64_t>& sg, const cpu::RopeTable& rt,
                         cpu::RopeStyle style, const AttentionShape& sh, StepTensors& st, uint32_t& seed,
                         double out_tol, bool check_k) {
  const int64_t q_dim = sh.n_heads * sh.head_dim, kv_dim = cc.kv_dim();
  const bool step = m == 1;
  std::vector<Tensor> q(layers), k(layers), v(layers), qg(layers), kg(layers), vg(layers), og(layers), oc(layers);
  for (int64_t l = 0; l < layers; ++l) {
    q[l] = rand_host(DType::f32, {m, q_dim}, seed++);
    k[l] = rand_host(DType::f32, {m, kv_dim}, seed++);
    v[l] = rand_host(DType::f32, {m, kv_dim}, seed++);
    if (step) {
      for (auto [d, h] : {std::pair{&st.q[l], &q[l]}, std::pair{&st.k[l], &k[l]}, std::pair{&st.v[l], &v[l]}})
        ASSERT_EQ(cudaMemcpy(d->data(), h->data(), h->nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
      qg[l] = st.q[l], kg[l] = st.k[l], vg[l] = st.v[l], og[l] = st.o[l];
    } else {
      qg[l] = to_gpu(q[l]), kg[l] = to_gpu(k[l]), vg[l] = to_gpu(v[l]);
      og[l] = *b.gpu->alloc(DType::f32, {m, q_dim});
    }
    oc[l] = *b.cpu->alloc(DType::f32, {m, q_dim});
  }
  if (step) ASSERT_TRUE(b.gpu->begin_step(cg.id()).is_ok());
  for (int64_t l = 0; l < layers; ++l) {
    const Status s = b.gpu->rope_attention(cg, l, qg[l], kg[l], vg[l], m, pos.data(), sg.data(), rt, style, sh, og[l]);
    if (!s.is_ok() && step) (void)b.gpu->end_step(false);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  if (step) ASSERT_TRUE(b.gpu->end_step(true).is_ok());
  for (int64_t l = 0; l < layers; ++l) {
    const Status s = b.cpu->rope_attention(cc, l, q[l], k[l], v[l], m, pos.data(), sc.data(), rt, style, sh, oc[l]);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_LE(rel_err(host_rows(*b.gpu, og[l], m), host_rows(*b.cpu, oc[l], m)), out_tol) << "out, layer " << l;
    EXPECT_LE(rel_err(host_rows(*b.gpu, qg[l], m), host_rows(*b.cpu, q[l], m)), 1e-5) << "q, layer " << l;
    if (check_k)
      EXPECT_LE(rel_err(host_rows(*b.gpu, kg[l], m), host_rows(*b.cpu, k[l], m)), 1e-5) << "k, layer " << l;
  }
}

TEST(CudaBackend, LinearPathsMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (auto [n_out, n_in] : std::vector<std::pair<int64_t, int64_t>>{{17, 24}, {576, 1536}, {1000, 576}, {33, 12}})
      for (int64_t m : {1, 3, 8, 9, 40}) {
        Tensor w = rand_host(dt, {n_out, n_in}, seed++, 0.05f), x = rand_host(DType::f32, {m, n_in}, seed++);
        auto yc = *b.cpu->alloc(DType::f32, {m, n_out});
        auto yg = *b.gpu->alloc(DType::f32, {m, n_out});
        auto wg = b.gpu->prepare_weight(w);
        ASSERT_TRUE(wg.is_ok()) << wg.status().to_string();
        ASSERT_TRUE(b.cpu->linear(w, x, m, yc).is_ok());
        Status s = b.gpu->linear(*wg, to_gpu(x), m, yg);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        // The GEMM path (m > 8, or rows not a multiple of 8) rounds f16/bf16 activations; the
        // matvec and the f32 GEMM keep them f32.
        const bool gemm = m > 8 || n_in % 8 != 0;
        const double tol = (gemm && dt != DType::f32) ? (dt == DType::bf16 ? 2e-2 : 3e-3) : 2e-5;
        EXPECT_LE(rel_err(host_rows(*b.gpu, yg, m), host_rows(*b.cpu, yc, m)), tol)
            << dtype_name(dt) << " " << n_out << "x" << n_in << " m=" << m;
      }
}

TEST(CudaBackend, FusedProjectionsMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const int64_t d = 576, ff = 1536;
  for (int64_t m : {1, 5, 8, 33}) {
    Tensor wg = rand_host(DType::f16, {ff, d}, 11, 0.05f), wu = rand_host(DType::f16, {ff, d}, 12, 0.05f);
    Tensor wd = rand_host(DType::f16, {d, ff}, 13, 0.05f), x = rand_host(DType::f32, {m, d}, 14);
    Tensor res = rand_host(DType::f32, {m, d}, 15);
    // swiglu
    auto gc = *b.cpu->alloc(DType::f32, {m, ff}), uc = *b.cpu->alloc(DType::f32, {m, ff});
    auto gg = *b.gpu->alloc(DType::f32, {m, ff}), ug = *b.gpu->alloc(DType::f32, {m, ff});
    ASSERT_TRUE(b.cpu->swiglu(wg, wu, x, m, gc, uc).is_ok());
    Tensor dwg = *b.gpu->prepare_weight(wg), dwu = *b.gpu->prepare_weight(wu), dwd = *b.gpu->prepare_weight(wd);
    Tensor dx = to_gpu(x);
    ASSERT_TRUE(b.gpu->swiglu(dwg, dwu, dx, m, gg, ug).is_ok());
    const double tol = m > 8 ? 3e-3 : 2e-5;
    EXPECT_LE(rel_err(host_rows(*b.gpu, gg, m), host_rows(*b.cpu, gc, m)), tol) << "swiglu m=" << m;
    // residual: res += gate · wdᵀ
    Tensor rc = res, rg = to_gpu(res);
    auto sc = *b.cpu->alloc(DType::f32, {m, d}), sg = *b.gpu->alloc(DType::f32, {m, d});
    ASSERT_TRUE(b.cpu->linear_residual(wd, gc, m, rc, sc).is_ok());
    ASSERT_TRUE(b.gpu->linear_residual(dwd, gg, m, rg, sg).is_ok());
    EXPECT_LE(rel_err(host_rows(*b.gpu, rg, m), host_rows(*b.cpu, rc, m)), tol) << "residual m=" << m;
    // q/k/v in one launch
    Tensor wq = rand_host(DType::f16, {d, d}, 16, 0.05f), wk = rand_host(DType::f16, {192, d}, 17, 0.05f);
    Tensor dwq = *b.gpu->prepare_weight(wq), dwk = *b.gpu->prepare_weight(wk);
    auto qc = *b.cpu->alloc(DType::f32, {m, d}), kc = *b.cpu->alloc(DType::f32, {m, 192}),
         vc = *b.cpu->alloc(DType::f32, {m, 192});
    auto qg = *b.gpu->alloc(DType::f32, {m, d}), kg = *b.gpu->alloc(DType::f32, {m, 192}),
         vg = *b.gpu->alloc(DType::f32, {m, 192});
    const Tensor* wc[] = {&wq, &wk, &wk};
    const Tensor* wgs[] = {&dwq, &dwk, &dwk};
    Tensor* yc[] = {&qc, &kc, &vc};
    Tensor* yg[] = {&qg, &kg, &vg};
    ASSERT_TRUE(b.cpu->linear_many(wc, x, m, yc).is_ok());
    ASSERT_TRUE(b.gpu->linear_many(wgs, dx, m, yg).is_ok());
    for (int j = 0; j < 3; ++j)
      EXPECT_LE(rel_err(host_rows(*b.gpu, *yg[j], m), host_rows(*b.cpu, *yc[j], m)), tol) << "qkv " << j;
  }
}

TEST(CudaBackend, ElementwiseOpsMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const int64_t m = 7, n = 576;
  Tensor x = rand_host(DType::f32, {m, n}, 21), y = rand_host(DType::f32, {m, n}, 22);
  Tensor w = rand_host(DType::f32, {n}, 23), dw = *b.gpu->prepare_weight(w);
  auto oc = *b.cpu->alloc(DType::f32, {m, n}), og = *b.gpu->alloc(DType::f32, {m, n});
  ASSERT_TRUE(b.cpu->rmsnorm(x, m, w, 1e-5f, oc).is_ok());
  ASSERT_TRUE(b.gpu->rmsnorm(to_gpu(x), m, dw, 1e-5f, og).is_ok());
  EXPECT_LE(rel_err(host_rows(*b.gpu, og, m), host_rows(*b.cpu, oc, m)), 1e-5);
  const cpu::RopeTable rt = rope_table(64);
  const std::vector<int32_t> pos = {0, 1, 5, 100, 4095, 77777, 3};
  for (auto style : {cpu::RopeStyle::interleaved, cpu::RopeStyle::half}) {
    Tensor xc = rand_host(DType::f32, {m, n}, 24), xg = to_gpu(xc);
    ASSERT_TRUE(b.cpu->rope(xc, m, 9, 64, pos.data(), rt, style).is_ok());
    ASSERT_TRUE(b.gpu->rope(xg, m, 9, 64, pos.data(), rt, style).is_ok());
    EXPECT_LE(rel_err(host_rows(*b.gpu, xg, m), host_rows(*b.cpu, xc, m)), 1e-5);
  }
  Tensor ac = x, ag = to_gpu(x);
  ASSERT_TRUE(b.cpu->add(ac, y, m).is_ok());
  ASSERT_TRUE(b.gpu->add(ag, to_gpu(y), m).is_ok());
  EXPECT_LE(rel_err(host_rows(*b.gpu, ag, m), host_rows(*b.cpu, ac, m)), 1e-6);
  Tensor table = rand_host(DType::f16, {1000, n}, 25), dtable = *b.gpu->prepare_weight(table);
  const std::vector<int32_t> ids = {0, 999, 5, 5, 123, 7, 1};
  ASSERT_TRUE(b.cpu->embedding(table, ids.data(), m, oc).is_ok());
  ASSERT_TRUE(b.gpu->embedding(dtable, ids.data(), m, og).is_ok());
  EXPECT_EQ(host_rows(*b.gpu, og, m), host_rows(*b.cpu, oc, m));
  const int32_t bad = 1000;
  Status s = b.gpu->embedding(dtable, &bad, 1, og);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("1000"), std::string::npos) << s.message();
}

TEST(CudaBackend, AttentionThroughCacheMatchesCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const AttentionShape sh{9, 3, 64, 0.125f};
  const int64_t kv_dim = 192, q_dim = 576;
  for (DType kvt : {DType::f32, DType::f16}) {
    auto cc = KvCache::create(2, 300, kv_dim, kvt, Device::cpu);
    auto cg = KvCache::create(2, 300, kv_dim, kvt, Device::cuda);
    ASSERT_TRUE(cc.is_ok() && cg.is_ok());
    uint32_t seed = 100;
    // A 37-token prefill, then 5 decode steps, then a 20-token chunk: both kernels, both layers.
    for (int64_t m : {37, 1, 1, 1, 1, 1, 20}) {
      std::vector<int32_t> pos(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(cc->size() + i);
      auto sc = cc->append(pos.data(), m);
      auto sg = cg->append(pos.data(), m);
      ASSERT_TRUE(sc.is_ok() && sg.is_ok());
      for (int64_t layer = 0; layer < 2; ++layer) {
        Tensor q = rand_host(DType::f32, {m, q_dim}, seed++), k = rand_host(DType::f32, {m, kv_dim}, seed++),
               v = rand_host(DType::f32, {m, kv_dim}, seed++);
        auto oc = *b.cpu->alloc(DType::f32, {m, q_dim}), og = *b.gpu->alloc(DType::f32, {m, q_dim});
        ASSERT_TRUE(b.cpu->attention(*cc, layer, q, k, v, m, pos.data(), sc->data(), sh, oc).is_ok());
        Status s = b.gpu->attention(*cg, layer, to_gpu(q), to_gpu(k), to_gpu(v), m, pos.data(), sg->data(), sh, og);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        // The prefill kernel multiplies in f16 on tensor cores; decode is f32.
        const double tol = m > 8 ? 2e-2 : 1e-4;
        EXPECT_LE(rel_err(host_rows(*b.gpu, og, m), host_rows(*b.cpu, oc, m)), tol)
            << dtype_name(kvt) << " m=" << m << " layer " << layer;
      }
    }
  }
}

// rmsnorm_linear_many over q/k/v = the first 3 of wc (cpu) and wg (cuda), into yc / yg; each
// cuda output within tol of the cpu's.
void expect_norm_qkv_match(Both& b, const InputNorm& nc, const InputNorm& ng, std::vector<Tensor>& wc,
                           std::vector<Tensor>& wg, const Tensor& x, const Tensor& dx, int64_t m,
                           std::vector<Tensor>& yc, std::vector<Tensor>& yg, double tol) {
  const Tensor* wcs[] = {&wc[0], &wc[1], &wc[2]};
  const Tensor* wgs[] = {&wg[0], &wg[1], &wg[2]};
  Tensor* ycs[] = {&yc[0], &yc[1], &yc[2]};
  Tensor* ygs[] = {&yg[0], &yg[1], &yg[2]};
  ASSERT_TRUE(b.cpu->rmsnorm_linear_many(nc, wcs, x, m, ycs).is_ok());
  const Status st = b.gpu->rmsnorm_linear_many(ng, wgs, dx, m, ygs);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  for (int j = 0; j < 3; ++j)
    EXPECT_LE(rel_err(host_rows(*b.gpu, yg[j], m), host_rows(*b.cpu, yc[j], m)), tol) << "qkv " << j;
}

// rmsnorm_linear_many / rmsnorm_swiglu on cuda (norm folded into the matvec for m <= 8 and rows
// of a multiple of 8; rmsnorm + GEMM otherwise) against the cpu's default composition, every
// weight dtype; x (the residual stream) must come back unchanged.
TEST(CudaBackend, FoldedNormProjectionsMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 200;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const auto& [n_in, n_q, n_kv, ff] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
             {576, 576, 192, 1536}, {24, 40, 8, 56}, {12, 17, 5, 33}})
      for (int64_t m : {1, 3, 8, 9, 33}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " n_in " + std::to_string(n_in) + " m " + std::to_string(m));
        Tensor nw = rand_host(DType::f32, {n_in}, seed++, 0.3f);
        for (int64_t i = 0; i < n_in; ++i) nw.data_as<float>()[i] += 1.0f;
        Tensor x = rand_host(DType::f32, {m, n_in}, seed++, 3.0f);
        Tensor dnw = *b.gpu->prepare_weight(nw), dx = to_gpu(x);
        auto hc = *b.cpu->alloc(DType::f32, {m, n_in}), hg = *b.gpu->alloc(DType::f32, {m, n_in});
        const InputNorm nc{&nw, 1e-5f, &hc}, ng{&dnw, 1e-5f, &hg};
        const bool gemm = m > 8 || n_in % 8 != 0;
        const double tol = (gemm && dt != DType::f32) ? (dt == DType::bf16 ? 2e-2 : 3e-3) : 2e-5;
        // q/k/v
        const int64_t n_outs[] = {n_q, n_kv, n_kv};
        std::vector<Tensor> wc, wg, yc, yg;
        for (int j = 0; j < 3; ++j) {
          wc.push_back(rand_host(dt, {n_outs[j], n_in}, seed++, 0.05f));
          wg.push_back(*b.gpu->prepare_weight(wc.back()));
          yc.push_back(*b.cpu->alloc(DType::f32, {m, n_outs[j]}));
          yg.push_back(*b.gpu->alloc(DType::f32, {m, n_outs[j]}));
        }
        ASSERT_NO_FATAL_FAILURE(expect_norm_qkv_match(b, nc, ng, wc, wg, x, dx, m, yc, yg, tol));
        // gate/up
        Tensor wgate = rand_host(dt, {ff, n_in}, seed++, 0.05f), wup = rand_host(dt, {ff, n_in}, seed++, 0.05f);
        Tensor dgate = *b.gpu->prepare_weight(wgate), dup = *b.gpu->prepare_weight(wup);
        auto gc = *b.cpu->alloc(DType::f32, {m, ff}), uc = *b.cpu->alloc(DType::f32, {m, ff});
        auto gg = *b.gpu->alloc(DType::f32, {m, ff}), ug = *b.gpu->alloc(DType::f32, {m, ff});
        ASSERT_TRUE(b.cpu->rmsnorm_swiglu(nc, wgate, wup, x, m, gc, uc).is_ok());
        const Status st = b.gpu->rmsnorm_swiglu(ng, dgate, dup, dx, m, gg, ug);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        EXPECT_LE(rel_err(host_rows(*b.gpu, gg, m), host_rows(*b.cpu, gc, m)), tol) << "swiglu";
        // x untouched
        const std::vector<float> x_after = host_rows(*b.gpu, dx, m);
        EXPECT_TRUE(std::equal(x_after.begin(), x_after.end(), x.data_as<float>())) << "x changed";
      }
}

// The gq formats the backend tests run: int4 g128, int3 g64 sym, int4 g128 with act-order and 2:4
// sparse int4 g128 (sparse tensor cores in the GEMV; dequantized for cuBLAS past its batch).
std::vector<std::pair<QuantFormat, bool>> gq_cases() {
  QuantFormat f4;
  f4.bits = 4;
  f4.group = 128;
  QuantFormat f3 = f4;
  f3.bits = 3;
  f3.group = 64;
  f3.sym = true;
  QuantFormat f24 = f4;
  f24.sparse24 = true;
  return {{f4, false}, {f3, false}, {f4, true}, {f24, false}};
}
// A backend test case's trace: format, act-order, width (`what` n) and rows.
std::string gq_case(const QuantFormat& f, bool act, const char* what, int64_t n, int64_t m) {
  return format_name(f, n) + (act ? " act-order " : " ") + what + " " + std::to_string(n) + " m " + std::to_string(m);
}
// A random gq matrix prepared by both backends, appended to wc (cpu) and wg (gpu).
void quantized_both(Both& b, const QuantFormat& f, int64_t n_out, int64_t n_in, uint32_t seed, bool act,
                    std::vector<Tensor>& wc, std::vector<Tensor>& wg) {
  const gq::Matrix q = gq::random_matrix(f, n_out, n_in, seed, act);
  auto c = b.cpu->prepare_quantized(q);
  auto g = b.gpu->prepare_quantized(q);
  ASSERT_TRUE(c.is_ok() && g.is_ok()) << c.status().to_string() << " " << g.status().to_string();
  wc.push_back(std::move(c).value());
  wg.push_back(std::move(g).value());
}

// gq (group-quantized) weights through the fused decode ops on cuda (the GEMV kernel: q/k/v in
// one launch with the norm folded in, gate/up with norm and swiglu, residual accumulate; m = 17
// through dequantize + cuBLAS) against the cpu's gq kernels on the same matrices. n_in 4096 splits
// k over several blocks; act-order keeps gate/up in separate launches.
TEST(CudaBackend, GqProjectionsMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 500;
  for (const auto& [f, act] : gq_cases())
    for (int64_t n_in : {576, 4096})
      for (int64_t m : {1, 3, 9, 16, 17}) {
        SCOPED_TRACE(gq_case(f, act, "n_in", n_in, m));
        const int64_t n_q = n_in, n_kv = n_in / 3, ff = 2 * n_in + 64;
        Tensor nw = rand_host(DType::f32, {n_in}, seed++, 0.3f);
        for (int64_t i = 0; i < n_in; ++i) nw.data_as<float>()[i] += 1.0f;
        const uint32_t x_seed = seed++;
        Tensor x = rand_host(DType::f32, {m, n_in}, x_seed, 3.0f);
        Tensor dnw = *b.gpu->prepare_weight(nw), dx = to_gpu(x);
        auto hc = *b.cpu->alloc(DType::f32, {m, n_in}), hg = *b.gpu->alloc(DType::f32, {m, n_in});
        const InputNorm nc{&nw, 1e-5f, &hc}, ng{&dnw, 1e-5f, &hg};
        const double tol = m > cuda::kGemvMaxRows ? 3e-3 : 2e-4;  // cuBLAS on f16 activations; else ~f32 x vs the cpu's int16 x
        std::vector<Tensor> wc, wg, yc, yg;
        const int64_t n_outs[] = {n_q, n_kv, n_kv, ff, ff};
        for (int64_t n : n_outs) {
          quantized_both(b, f, n, n_in, seed++, act, wc, wg);
          if (HasFatalFailure()) return;
          yc.push_back(*b.cpu->alloc(DType::f32, {m, n}));
          yg.push_back(*b.gpu->alloc(DType::f32, {m, n}));
        }
        ASSERT_NO_FATAL_FAILURE(expect_norm_qkv_match(b, nc, ng, wc, wg, x, dx, m, yc, yg, tol));
        ASSERT_TRUE(b.cpu->rmsnorm_swiglu(nc, wc[3], wc[4], x, m, yc[3], yc[4]).is_ok());
        Status st = b.gpu->rmsnorm_swiglu(ng, wg[3], wg[4], dx, m, yg[3], yg[4]);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        EXPECT_LE(rel_err(host_rows(*b.gpu, yg[3], m), host_rows(*b.cpu, yc[3], m)), tol) << "swiglu";
        // o: accumulate into the residual (q's output as input, x as the residual)
        Tensor rc = rand_host(DType::f32, {m, n_in}, x_seed, 3.0f), rg = to_gpu(x), scratch_c = *b.cpu->alloc(DType::f32, {m, n_in}),
               scratch_g = *b.gpu->alloc(DType::f32, {m, n_in});
        ASSERT_TRUE(b.cpu->linear_residual(wc[0], yc[0], m, rc, scratch_c).is_ok());
        st = b.gpu->linear_residual(wg[0], yg[0], m, rg, scratch_g);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        EXPECT_LE(rel_err(host_rows(*b.gpu, rg, m), host_rows(*b.cpu, rc, m)), tol) << "residual";
        const std::vector<float> x_after = host_rows(*b.gpu, dx, m);
        EXPECT_TRUE(std::equal(x_after.begin(), x_after.end(), x.data_as<float>())) << "x changed";
      }
}

// Deferred residual sums (cuda_gq.h: GemvResidual) through the backend ops of two decode layers'
// worth of projections: o (linear_residual), gate/up reading the residual (rmsnorm_swiglu), down
// (linear_residual, folding o's sums), q/k/v reading it (rmsnorm_linear_many), o again (folding
// down's), gate/up, down, then to_host (settles the last sums) -- against the cpu backend doing the
// same. At kGemvResidualMaxRows rows the residual's own memory must still hold its first value
// after the first o (the sums wait in an accumulator); at more rows (3, 16: the GEMV's own sums;
// 17: no GEMV), or with LITHE_GEMV_DEFER=0, it is updated at once. Act-order runs
// gate and up apart (the ops' default composition, which settles the sums first).
TEST(CudaBackend, DeferredResidualSumsMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 900;
  for (const auto& [f, act] : gq_cases())
    for (int64_t d : {576, 4096})
      for (int64_t m : {1, 3, 16, 17}) {
        SCOPED_TRACE(gq_case(f, act, "d", d, m));
        const int64_t ff = 2 * d + 64;
        std::vector<Tensor> wc, wg;
        for (const auto& [n_out, n_in] : std::vector<std::pair<int64_t, int64_t>>{
                 {d, d}, {ff, d}, {ff, d}, {d, ff}, {d, d}, {d / 3, d}, {d / 3, d}}) {  // o gate up down q k v
          quantized_both(b, f, n_out, n_in, seed++, act, wc, wg);
          if (HasFatalFailure()) return;
        }
        Tensor nw = rand_host(DType::f32, {d}, seed++, 0.3f);
        for (int64_t i = 0; i < d; ++i) nw.data_as<float>()[i] += 1.0f;
        Tensor xc = rand_host(DType::f32, {m, d}, seed++, 3.0f), a = rand_host(DType::f32, {m, d}, seed++, 1.0f);
        Tensor dnw = *b.gpu->prepare_weight(nw), xg = to_gpu(xc), ag = to_gpu(a);
        const std::vector<float> x0(xc.data_as<float>(), xc.data_as<float>() + m * d);
        auto hc = *b.cpu->alloc(DType::f32, {m, d}), hg = *b.gpu->alloc(DType::f32, {m, d});
        const InputNorm nc{&nw, 1e-5f, &hc}, ng{&dnw, 1e-5f, &hg};
        auto gc = *b.cpu->alloc(DType::f32, {m, ff}), uc = *b.cpu->alloc(DType::f32, {m, ff});
        auto gg = *b.gpu->alloc(DType::f32, {m, ff}), ug = *b.gpu->alloc(DType::f32, {m, ff});
        std::vector<Tensor> qc, qg;
        for (int64_t n : {d, d / 3, d / 3}) {
          qc.push_back(*b.cpu->alloc(DType::f32, {m, n}));
          qg.push_back(*b.gpu->alloc(DType::f32, {m, n}));
        }
        const double tol = m > cuda::kGemvMaxRows ? 3e-3 : 2e-4;  // as GqProjectionsMatchCpu
        auto both = [&](auto&& op) {
          ASSERT_TRUE(op(*b.cpu, wc, xc, nc, gc, uc, qc).is_ok());
          const Status st = op(*b.gpu, wg, xg, ng, gg, ug, qg);
          ASSERT_TRUE(st.is_ok()) << st.to_string();
        };
        auto o = [&](Backend& be, std::vector<Tensor>& w, Tensor& x, const InputNorm&, Tensor&, Tensor&,
                     std::vector<Tensor>&) {
          const bool cpu = &be == b.cpu.get();
          return be.linear_residual(w[0], cpu ? a : ag, m, x, cpu ? hc : hg);
        };
        auto gate_up = [&](Backend& be, std::vector<Tensor>& w, Tensor& x, const InputNorm& n, Tensor& g, Tensor& u,
                           std::vector<Tensor>&) { return be.rmsnorm_swiglu(n, w[1], w[2], x, m, g, u); };
        auto down = [&](Backend& be, std::vector<Tensor>& w, Tensor& x, const InputNorm&, Tensor& g, Tensor&,
                        std::vector<Tensor>&) { return be.linear_residual(w[3], g, m, x, &be == b.cpu.get() ? hc : hg); };
        auto qkv = [&](Backend& be, std::vector<Tensor>& w, Tensor& x, const InputNorm& n, Tensor&, Tensor&,
                       std::vector<Tensor>& q) {
          const Tensor* ws[] = {&w[4], &w[5], &w[6]};
          Tensor* ys[] = {&q[0], &q[1], &q[2]};
          return be.rmsnorm_linear_many(n, ws, x, m, ys);
        };
        ASSERT_NO_FATAL_FAILURE(both(o));
        {  // the residual's memory, read past the backend
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<float> raw(static_cast<size_t>(m * d));
          ASSERT_EQ(cudaMemcpy(raw.data(), xg.data(), raw.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          if (m <= cuda::kGemvResidualMaxRows && !cuda_test::knob_off("LITHE_GEMV_DEFER"))
            EXPECT_EQ(raw, x0) << "o's sums went into the residual at once";
          else
            EXPECT_NE(raw, x0) << "the residual was not updated";
        }
        for (int layer = 0; layer < 2; ++layer) {
          SCOPED_TRACE("layer " + std::to_string(layer));
          if (layer == 1) ASSERT_NO_FATAL_FAILURE(both(o));
          ASSERT_NO_FATAL_FAILURE(both(gate_up));
          EXPECT_LE(rel_err(host_rows(*b.gpu, gg, m), host_rows(*b.cpu, gc, m)), tol) << "swiglu";
          ASSERT_NO_FATAL_FAILURE(both(down));
          if (layer == 1) break;
          ASSERT_NO_FATAL_FAILURE(both(qkv));
          for (int j = 0; j < 3; ++j)
            EXPECT_LE(rel_err(host_rows(*b.gpu, qg[j], m), host_rows(*b.cpu, qc[j], m)), tol) << "qkv " << j;
        }
        EXPECT_LE(rel_err(host_rows(*b.gpu, xg, m), host_rows(*b.cpu, xc, m)), tol) << "residual";
      }
}

// qkv_rope_attention with its output projection (OutProjection) on gq weights: on cuda the q/k/v
// GEMV with rope and the cache store, decode attention flagging each head as it lands, and o's GEMV
// (deferred sums) waiting for its heads' flags instead of the attention launch's end (GemvReady).
// Six one-token steps over 2 layers under one step key (the second captured, later ones replayed)
// against the cpu's composition (rmsnorm_linear_many, rope_attention, linear_residual): the last
// layer's attention output and the residual after each step. MHA at head_dim 128, GQA at 64;
// int4 g128 and 2:4 int4 g128.
TEST(CudaBackend, QkvAttentionAndOutProjectionMatchCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 1500;
  const auto cases = gq_cases();
  for (const AttentionShape& sh : {AttentionShape{32, 32, 128, 0.08838835f}, AttentionShape{9, 3, 64, 0.125f}})
    for (const auto& [f, act] : {cases[0], cases[3]}) {
      const int64_t d = sh.n_heads * sh.head_dim, kv_dim = sh.n_kv_heads * sh.head_dim, layers = 2;
      SCOPED_TRACE(gq_case(f, act, "d", d, 1));
      const cpu::RopeTable rt = rope_table(static_cast<int>(sh.head_dim));
      std::vector<Tensor> wc, wg, nc, ng;  // per layer: q, k, v, o; the attention norm
      for (int64_t l = 0; l < layers; ++l) {
        for (const int64_t n_out : {d, kv_dim, kv_dim, d}) {
          quantized_both(b, f, n_out, d, seed++, act, wc, wg);
          if (HasFatalFailure()) return;
        }
        nc.push_back(rand_host(DType::f32, {d}, seed++, 0.3f));
        for (int64_t i = 0; i < d; ++i) nc.back().data_as<float>()[i] += 1.0f;
        ng.push_back(*b.gpu->prepare_weight(nc.back()));
      }
      auto cc = KvCache::create(layers, 64, kv_dim, DType::f32, Device::cpu);
      auto cg = KvCache::create(layers, 64, kv_dim, DType::f32, Device::cuda);
      ASSERT_TRUE(cc.is_ok() && cg.is_ok());
      Tensor xc = rand_host(DType::f32, {1, d}, seed++, 3.0f), xg = to_gpu(xc);
      auto alloc = [](Backend& be, int64_t n) { return *be.alloc(DType::f32, {1, n}); };
      Tensor qc = alloc(*b.cpu, d), kc = alloc(*b.cpu, kv_dim), vc = alloc(*b.cpu, kv_dim), oc = alloc(*b.cpu, d),
             hc = alloc(*b.cpu, d);
      Tensor qg = alloc(*b.gpu, d), kg = alloc(*b.gpu, kv_dim), vg = alloc(*b.gpu, kv_dim), og = alloc(*b.gpu, d),
             hg = alloc(*b.gpu, d);
      // One layer on one backend.
      auto layer = [&](Backend& be, KvCache& cache, int64_t l, std::vector<Tensor>& w, Tensor& nw, Tensor& x, Tensor& q,
                       Tensor& k, Tensor& v, Tensor& o, Tensor& h, const int32_t* pos, const int64_t* slots) {
        const Tensor* ws[] = {&w[4 * l], &w[4 * l + 1], &w[4 * l + 2]};
        Tensor* ys[] = {&q, &k, &v};
        const InputNorm n{&nw, 1e-5f, &h};
        return be.qkv_rope_attention(n, ws, x, 1, ys, cache, l, pos, slots, rt, cpu::RopeStyle::half, sh, o,
                                     OutProjection{&w[4 * l + 3], &x, &h});
      };
      for (int step = 0; step < 6; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const std::vector<int32_t> pos{static_cast<int32_t>(cc->size())};
        auto sc = cc->append(pos.data(), 1);
        auto sg = cg->append(pos.data(), 1);
        ASSERT_TRUE(sc.is_ok() && sg.is_ok());
        ASSERT_TRUE(b.gpu->begin_step(cg->id()).is_ok());
        for (int64_t l = 0; l < layers; ++l) {
          const Status s = layer(*b.gpu, *cg, l, wg, ng[l], xg, qg, kg, vg, og, hg, pos.data(), sg->data());
          if (!s.is_ok()) (void)b.gpu->end_step(false);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
        }
        ASSERT_TRUE(b.gpu->end_step(true).is_ok());
        for (int64_t l = 0; l < layers; ++l) {
          const Status s = layer(*b.cpu, *cc, l, wc, nc[l], xc, qc, kc, vc, oc, hc, pos.data(), sc->data());
          ASSERT_TRUE(s.is_ok()) << s.to_string();
        }
        EXPECT_LE(rel_err(host_rows(*b.gpu, og, 1), host_rows(*b.cpu, oc, 1)), 5e-3) << "attention output";
        EXPECT_LE(rel_err(host_rows(*b.gpu, xg, 1), host_rows(*b.cpu, xc, 1)), 2e-3) << "residual";
      }
    }
}

// rope_attention on cuda (one rope + KV-store launch, then decode with its in-kernel merge or
// prefill) against the cpu's rope, rope, attention: a 37-token prefill, 5 one-token decode steps
// and a 20-token chunk over 2 layers, both rope styles and cache types. Decode steps are bracketed
// by begin_step/end_step under one key: the second is captured, the later ones are graph replays
// (device tensors per layer kept across steps, as the model's workspace is). Checks the outputs,
// q and k rotated in place, and at the end the caches' rows and positions.
TEST(CudaBackend, RopeAttentionMatchesCpuThroughStepReplays) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const AttentionShape sh{9, 3, 64, 0.125f};
  const int64_t kv_dim = 192, q_dim = 576, layers = 2;
  const cpu::RopeTable rt = rope_table(64);
  uint32_t seed = 300;
  for (auto style : {cpu::RopeStyle::interleaved, cpu::RopeStyle::half})
    for (DType kvt : {DType::f32, DType::f16}) {
      auto cc = KvCache::create(layers, 300, kv_dim, kvt, Device::cpu);
      auto cg = KvCache::create(layers, 300, kv_dim, kvt, Device::cuda);
      ASSERT_TRUE(cc.is_ok() && cg.is_ok());
      StepTensors st(*b.gpu, layers, q_dim, kv_dim);
      for (int64_t m : {37, 1, 1, 1, 1, 1, 20}) {
        SCOPED_TRACE(std::string(style == cpu::RopeStyle::half ? "half " : "interleaved ") +
                     std::string(dtype_name(kvt)) + " m=" + std::to_string(m) + " at " + std::to_string(cc->size()));
        std::vector<int32_t> pos(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(cc->size() + i);
        auto sc = cc->append(pos.data(), m);
        auto sg = cg->append(pos.data(), m);
        ASSERT_TRUE(sc.is_ok() && sg.is_ok());
        // prefill multiplies in f16 on tensor cores
        rope_attention_both(b, *cc, *cg, layers, m, pos, *sc, *sg, rt, style, sh, st, seed, m > 8 ? 2e-2 : 1e-4, true);
        if (HasFatalFailure()) return;
      }
      const int64_t n = cc->size();
      for (int64_t l = 0; l < layers; ++l)
        for (bool is_k : {true, false}) {
          auto gh = (is_k ? cg->k(l) : cg->v(l)).to(Device::cpu);
          ASSERT_TRUE(gh.is_ok());
          auto gf = convert(*gh, DType::f32), cf = convert(is_k ? cc->k(l) : cc->v(l), DType::f32);
          ASSERT_TRUE(gf.is_ok() && cf.is_ok());
          const std::vector<float> a(gf->data_as<float>(), gf->data_as<float>() + n * kv_dim);
          const std::vector<float> c(cf->data_as<float>(), cf->data_as<float>() + n * kv_dim);
          EXPECT_LE(rel_err(a, c), kvt == DType::f16 ? 2e-3 : 1e-5) << (is_k ? "k" : "v") << " cache, layer " << l;
        }
      auto pg = cg->device_positions().to(Device::cpu);
      ASSERT_TRUE(pg.is_ok());
      EXPECT_TRUE(std::equal(cc->positions(), cc->positions() + n, pg->data_as<int32_t>())) << "cache positions";
    }
}

// A batch of sequences, each over its own cache (rope_attention_batch): the one-token sequences
// share one attention_decode_batch launch, a 3-token one goes alone. Against the cpu's per
// sequence, over 6 steps of one step key (eager, captured, then replayed), 2 layers; then the
// caches. Five f16 caches of different lengths and capacities.
TEST(CudaBackend, BatchedDecodeAttentionMatchesCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const AttentionShape sh{8, 2, 64, 0.125f};
  const int64_t kv_dim = 128, q_dim = 512, layers = 2, n_seq = 5;
  const cpu::RopeTable rt = rope_table(64);
  const int64_t lens[n_seq] = {1, 1, 3, 1, 1};  // tokens per step
  const int64_t m = 7;
  std::vector<KvCache> cc, cg;
  uint32_t seed = 900;
  for (int64_t i = 0; i < n_seq; ++i) {
    auto c = KvCache::create(layers, 100 + 40 * i, kv_dim, DType::f16, Device::cpu);
    auto g = KvCache::create(layers, 100 + 40 * i, kv_dim, DType::f16, Device::cuda);
    ASSERT_TRUE(c.is_ok() && g.is_ok());
    cc.push_back(std::move(*c));
    cg.push_back(std::move(*g));
  }
  // Different lengths first: 5 + 11 i tokens of each, through the single-sequence path.
  for (int64_t i = 0; i < n_seq; ++i) {
    const int64_t n = 5 + 11 * i;
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    auto sc = cc[i].append(pos.data(), n);
    auto sg = cg[i].append(pos.data(), n);
    ASSERT_TRUE(sc.is_ok() && sg.is_ok());
    StepTensors unused(*b.gpu, 0, q_dim, kv_dim);
    rope_attention_both(b, cc[i], cg[i], layers, n, pos, *sc, *sg, rt, cpu::RopeStyle::half, sh, unused, seed, 2e-2,
                        true);
    if (HasFatalFailure()) return;
  }
  std::vector<Tensor> qg, kg, vg, og;  // the step's tensors on the gpu, kept for the replays
  for (int64_t l = 0; l < layers; ++l) {
    qg.push_back(*b.gpu->alloc(DType::f32, {m, q_dim}));
    kg.push_back(*b.gpu->alloc(DType::f32, {m, kv_dim}));
    vg.push_back(*b.gpu->alloc(DType::f32, {m, kv_dim}));
    og.push_back(*b.gpu->alloc(DType::f32, {m, q_dim}));
  }
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<int32_t> pos;
    std::vector<std::vector<int64_t>> sc(n_seq), sg(n_seq);
    std::vector<BatchSeq> bc(n_seq), bg(n_seq);
    int64_t r0 = 0;
    for (int64_t i = 0; i < n_seq; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(lens[i]));
      for (int64_t t = 0; t < lens[i]; ++t) p[t] = static_cast<int32_t>(cc[i].size() + t);
      auto a = cc[i].append(p.data(), lens[i]);
      auto g = cg[i].append(p.data(), lens[i]);
      ASSERT_TRUE(a.is_ok() && g.is_ok());
      sc[i] = *a, sg[i] = *g;
      pos.insert(pos.end(), p.begin(), p.end());
      bc[i] = BatchSeq{&cc[i], r0, lens[i], sc[i].data()};
      bg[i] = BatchSeq{&cg[i], r0, lens[i], sg[i].data()};
      r0 += lens[i];
    }
    std::vector<Tensor> q, k, v, oc;
    for (int64_t l = 0; l < layers; ++l) {
      q.push_back(rand_host(DType::f32, {m, q_dim}, seed++));
      k.push_back(rand_host(DType::f32, {m, kv_dim}, seed++));
      v.push_back(rand_host(DType::f32, {m, kv_dim}, seed++));
      oc.push_back(*b.cpu->alloc(DType::f32, {m, q_dim}));
      for (auto [d, h] : {std::pair{&qg[l], &q[l]}, std::pair{&kg[l], &k[l]}, std::pair{&vg[l], &v[l]}})
        ASSERT_EQ(cudaMemcpy(d->data(), h->data(), h->nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ASSERT_TRUE(b.gpu->begin_step(4242).is_ok());
    for (int64_t l = 0; l < layers; ++l) {
      const Status st = b.gpu->rope_attention_batch(bg, l, qg[l], kg[l], vg[l], m, pos.data(), rt,
                                                    cpu::RopeStyle::half, sh, og[l]);
      if (!st.is_ok()) (void)b.gpu->end_step(false);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    ASSERT_TRUE(b.gpu->end_step(true).is_ok());
    for (int64_t l = 0; l < layers; ++l) {
      ASSERT_TRUE(b.cpu->rope_attention_batch(bc, l, q[l], k[l], v[l], m, pos.data(), rt, cpu::RopeStyle::half, sh,
                                              oc[l]).is_ok());
      EXPECT_LE(rel_err(host_rows(*b.gpu, og[l], m), host_rows(*b.cpu, oc[l], m)), 1e-4) << "out, layer " << l;
    }
  }
  for (int64_t i = 0; i < n_seq; ++i) {
    const int64_t n = cc[i].size();
    auto pg = cg[i].device_positions().to(Device::cpu);
    ASSERT_TRUE(pg.is_ok());
    EXPECT_TRUE(std::equal(cc[i].positions(), cc[i].positions() + n, pg->data_as<int32_t>())) << "positions " << i;
    for (int64_t l = 0; l < layers; ++l) {
      auto gh = cg[i].k(l).to(Device::cpu);
      ASSERT_TRUE(gh.is_ok());
      auto gf = convert(*gh, DType::f32), cf = convert(cc[i].k(l), DType::f32);
      ASSERT_TRUE(gf.is_ok() && cf.is_ok());
      const std::vector<float> a(gf->data_as<float>(), gf->data_as<float>() + n * kv_dim);
      const std::vector<float> c(cf->data_as<float>(), cf->data_as<float>() + n * kv_dim);
      EXPECT_LE(rel_err(a, c), 2e-3) << "k cache " << i << ", layer " << l;
    }
  }
}

// The rolling (StreamingLLM sink + window) cache keeps keys before RoPE; rope_attention on cuda
// (q rotated, k and v stored as they are, every key rotated by its slot's re-indexed position into
// scratch, then decode or prefill attention) against the cpu's, over 4 sinks + a 24-token window:
// a 13-token prefill, 40 one-token steps (graph replays from the second; eviction from step 12) and
// a 10-token chunk, 2 layers, both rope styles and cache types, 0 and 4 sinks. Outputs and q
// (rotated in place at the cache's positions) are compared after every call.
TEST(CudaBackend, RollingCacheAttentionMatchesCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const AttentionShape sh{9, 3, 64, 0.125f};
  const int64_t kv_dim = 192, q_dim = 576, layers = 2, window = 24;
  const cpu::RopeTable rt = rope_table(48);  // partial rotary: the last 16 dims of each head are copied
  uint32_t seed = 900;
  for (int64_t sinks : {4, 0})
    for (auto style : {cpu::RopeStyle::interleaved, cpu::RopeStyle::half})
      for (DType kvt : {DType::f32, DType::f16}) {
        auto cc = KvCache::create_rolling(layers, sinks, window, kv_dim, kvt, Device::cpu);
        auto cg = KvCache::create_rolling(layers, sinks, window, kv_dim, kvt, Device::cuda);
        ASSERT_TRUE(cc.is_ok() && cg.is_ok()) << cg.status().to_string();
        StepTensors st(*b.gpu, layers, q_dim, kv_dim);
        std::vector<int64_t> ms{13};
        ms.insert(ms.end(), 40, 1);
        ms.push_back(10);
        for (int64_t m : ms) {
          SCOPED_TRACE(std::string(style == cpu::RopeStyle::half ? "half " : "interleaved ") +
                       std::string(dtype_name(kvt)) + " sinks " + std::to_string(sinks) + " m=" + std::to_string(m) +
                       " after " + std::to_string(cc->seen()));
          auto sc = cc->append(nullptr, m);
          auto sg = cg->append(nullptr, m);
          ASSERT_TRUE(sc.is_ok() && sg.is_ok());
          ASSERT_EQ(*sc, *sg);
          std::vector<int32_t> pos(static_cast<size_t>(m));  // the new tokens' re-indexed positions
          for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = cc->positions()[(*sc)[static_cast<size_t>(i)]];
          // prefill multiplies in f16 on tensor cores; an f16 cache's rotated keys are rounded to
          // f16 once more on cuda (the cpu rotates the stored f16 values in f32)
          const double tol = m > 8 ? 2e-2 : kvt == DType::f16 ? 3e-3 : 1e-4;
          rope_attention_both(b, *cc, *cg, layers, m, pos, *sc, *sg, rt, style, sh, st, seed, tol, true);
          if (HasFatalFailure()) return;
        }
      }
}

TEST(CudaBackend, TopKMatchesCpu) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  const int64_t rows = 3, vocab = 49152;
  Tensor l = rand_host(DType::f32, {rows, vocab}, 31);
  l.data_as<float>()[10] = l.data_as<float>()[20] = 9.0f;  // a tie at the top: smaller id first
  for (int k : {1, 40, 256}) {
    std::vector<float> vc(static_cast<size_t>(rows * k)), vg(vc.size());
    std::vector<int32_t> ic(vc.size()), ig(vc.size());
    ASSERT_TRUE(b.cpu->top_k(l, rows, k, vc.data(), ic.data()).is_ok());
    ASSERT_TRUE(b.gpu->top_k(to_gpu(l), rows, k, vg.data(), ig.data()).is_ok());
    EXPECT_EQ(ic, ig) << "k=" << k;
    EXPECT_EQ(vc, vg) << "k=" << k;
  }
}

TEST(CudaBackend, KvCacheOutOfMemorySaysAskedAndFree) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto c = KvCache::create(80, 1 << 22, 8192, DType::f16, Device::cuda);  // 10 TiB
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::out_of_memory);
  EXPECT_NE(c.status().message().find("free"), std::string::npos) << c.status().message();
  std::printf("%s\n", c.status().message().c_str());
}

// Decoding ahead (Model::launch_top_k with kArgmaxToken, as lithe bench and greedy generate() run):
// a step queued before the previous step's result is fetched reads that argmax on the device,
// through eager, captured and replayed steps (the replays alternating two staging buffers), and
// gives the same tokens as one synchronous forward_top_k per token. Twice, on two caches (new step
// keys: eager, capture and replay again).
TEST(CudaModel, DecodingAheadEqualsOneStepAtATime) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 3, c.d_model = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.d_ff = 512;
  c.vocab_size = 1000, c.rope_dim = 64;
  auto m = Model::synthetic(c, DType::f16, Device::cuda, 5);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const std::vector<int32_t> prompt = {5, 77, 301, 9, 640, 2, 999};
  constexpr int kSteps = 40;
  std::vector<float> vals;
  std::vector<int32_t> ids;
  for (int round = 0; round < 2; ++round) {
    auto c1 = (*m)->new_cache(128, DType::f16), c2 = (*m)->new_cache(128, DType::f16);
    ASSERT_TRUE(c1.is_ok() && c2.is_ok());
    std::vector<int32_t> want, got;
    ASSERT_TRUE((*m)->forward_top_k(*c1, prompt, 1, vals, ids).is_ok());
    for (int i = 0; i < kSteps; ++i) {
      want.push_back(ids[0]);
      ASSERT_TRUE((*m)->forward_top_k(*c1, std::span<const int32_t>(&want.back(), 1), 1, vals, ids).is_ok());
    }
    ASSERT_TRUE((*m)->launch_top_k(*c2, prompt, 1).is_ok());
    const int32_t next = kArgmaxToken;
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_TRUE((*m)->launch_top_k(*c2, std::span<const int32_t>(&next, 1), 1).is_ok());
      ASSERT_TRUE((*m)->fetch_top_k(vals, ids).is_ok());
      got.push_back(ids[0]);
    }
    ASSERT_TRUE((*m)->fetch_top_k(vals, ids).is_ok());
    EXPECT_EQ(got, want) << "round " << round;
    EXPECT_EQ(c2->size(), c1->size());
    std::set<int32_t> distinct(want.begin(), want.end());
    EXPECT_GT(distinct.size(), 1u);  // the stream is not stuck on one token
  }
}

// Without a top_k before it, a kArgmaxToken has nothing to read.
TEST(CudaBackend, ArgmaxTokenNeedsATopK) {
  Both b;
  if (!b.gpu) GTEST_SKIP() << "no CUDA device";
  auto table = b.gpu->alloc(DType::f16, {10, 8});
  auto out = b.gpu->alloc(DType::f32, {1, 8});
  ASSERT_TRUE(table.is_ok() && out.is_ok());
  const int32_t id = kArgmaxToken;
  Status st = b.gpu->embedding(*table, &id, 1, *out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("argmax"), std::string::npos) << st.message();
}

// ---- the default model ----------------------------------------------------------------------------
std::string model_path() {
  if (const char* p = std::getenv("LITHE_TEST_MODEL")) return p;
  return std::string(LITHE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::unique_ptr<Model> load(Device d, bool dequantize) {
  LoadOptions o;
  o.device = d;
  o.dequantize = dequantize;
  auto m = Model::load(model_path(), o);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m ? std::move(*m) : nullptr;
}

std::vector<std::vector<int32_t>> golden_prompts() {
  auto t = read_text_file(std::string(LITHE_TEST_DATA) + "/model/hf_f32.json");
  EXPECT_TRUE(t.is_ok());
  const auto golden = nlohmann::json::parse(*t);
  std::vector<std::vector<int32_t>> out;
  for (const auto& g : golden["logits"]) out.push_back(g["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(out.size(), 8u);
  return out;
}

// NMSE and max |diff| of the GPU's last-position logits against the CPU's over the 8 prompts.
void compare_logits(Model& gpu, Model& cpu, double max_nmse, const char* label) {
  double worst_nmse = 0, worst_abs = 0;
  for (const auto& ids : golden_prompts()) {
    std::vector<float> lg, lc;
    auto cg = gpu.new_cache(256), cc = cpu.new_cache(256);
    ASSERT_TRUE(gpu.forward(*cg, ids, false, lg).is_ok());
    ASSERT_TRUE(cpu.forward(*cc, ids, false, lc).is_ok());
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < lc.size(); ++i) {
      const double d = static_cast<double>(lg[i]) - lc[i];
      num += d * d;
      den += static_cast<double>(lc[i]) * lc[i];
      mx = std::max(mx, std::abs(d));
    }
    worst_nmse = std::max(worst_nmse, num / den);
    worst_abs = std::max(worst_abs, mx);
    EXPECT_EQ(std::max_element(lg.begin(), lg.end()) - lg.begin(), std::max_element(lc.begin(), lc.end()) - lc.begin())
        << label;
  }
  std::printf("%s: logits vs cpu f32 over 8 prompts: worst NMSE %.3e, worst max|diff| %.3e\n", label, worst_nmse,
              worst_abs);
  EXPECT_LE(worst_nmse, max_nmse) << label;
}

TEST(CudaModel, DequantizedF32MatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << model_path() << " not present";
  auto gpu = load(Device::cuda, true), cpu = load(Device::cpu, true);
  ASSERT_TRUE(gpu && cpu);
  compare_logits(*gpu, *cpu, 1e-6, "cuda f32");
  // 64 greedy tokens of 4 prompts through generate(): device argmax and captured decode steps.
  const auto prompts = golden_prompts();
  ASSERT_GE(prompts.size(), 4u);
  GenerateOptions go;
  go.max_tokens = 64;
  go.sampling.temperature = 0;
  go.stop_at_eog = false;
  for (size_t i = 0; i < 4; ++i) {
    auto cg = gpu->new_cache(256), cc = cpu->new_cache(256);
    std::vector<int32_t> hg, hc;
    auto rg = generate(*gpu, *cg, hg, prompts[i], go);
    auto rc = generate(*cpu, *cc, hc, prompts[i], go);
    ASSERT_TRUE(rg.is_ok() && rc.is_ok()) << rg.status().to_string();
    EXPECT_EQ(rg->tokens, rc->tokens) << "prompt " << i;
    EXPECT_EQ(rg->tokens.size(), 64u);
  }
}

TEST(CudaModel, F16WeightsAndCacheStayClose) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << model_path() << " not present";
  auto gpu = load(Device::cuda, false), cpu = load(Device::cpu, true);  // Q4_1 -> f16 on the GPU
  ASSERT_TRUE(gpu && cpu);
  compare_logits(*gpu, *cpu, 1e-3, "cuda f16 weights");
}

}  // namespace

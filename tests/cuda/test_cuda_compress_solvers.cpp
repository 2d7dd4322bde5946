// The GPU compression solvers (compress/solver_backend.h, src/compress/cuda) against the CPU ones
// on random inputs (runs on a GPU machine; skips without one):
//  - Hessian accumulation (SSYRK running average) vs the CPU's f64 grams;
//  - GPTQ on the same W and H (odd sizes, ragged blocks, groups inside a block / spanning blocks /
//    partial last group, act-order with dynamic and static groups, sym / asym, bits 2/3/4/8, an f16
//    weight, dead inputs, dampening retries): same perm, g_idx, dead count and dampening; codes
//    equal except a few f32 rounding ties (and their knock-on effect in that row); Ŵ =
//    dequantize(q) exactly; loss and reconstruction error within 1% of the CPU's;
//  - SparseGPT (unstructured with its per-block count, 2:4, 4:8, joint quantization): n:m holds
//    exactly, pruned weights are zero, masks agree on >= 99% of entries, loss / error within 2%;
//  - reconstruction error, zero count, store_weight into f16 / bf16, and the refusals.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "lithe/compress/solver_backend.h"
#include "lithe/kernels/convert.h"

using namespace lithe;
using namespace lithe::compress;

namespace {

struct Solvers {
  std::unique_ptr<SolverBackend> cpu = make_cpu_solver_backend(), gpu;
  Solvers() {
    auto g = make_cuda_solver_backend();
    if (g) gpu = std::move(*g);
  }
};

Tensor host_f32(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t = *Tensor::empty(DType::f32, {rows, cols});
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

std::vector<float> values(const Tensor& t) {
  Tensor h = t.device() == Device::cpu ? t : *t.to(Device::cpu);
  if (h.dtype() != DType::f32) h = *convert(h, DType::f32);
  return {h.data_as<float>(), h.data_as<float>() + h.numel()};
}

Tensor on_gpu(const Tensor& t) {
  auto d = t.to(Device::cuda);
  EXPECT_TRUE(d.is_ok()) << d.status().to_string();
  return *d;
}

std::vector<float> random_values(int64_t count, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = nd(rng);
  return v;
}

// Calibration rows X [samples][n]: features 1..15 follow feature 0 closely, every 37th is scaled
// up, `dead` ones are zero (the setting where the second-order solvers matter).
std::vector<float> calib_rows(int64_t samples, int64_t n, uint32_t seed, const std::vector<int64_t>& dead = {}) {
  std::vector<float> x = random_values(samples * n, seed);
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (int64_t t = 0; t < samples; ++t) {
    float* row = x.data() + t * n;
    for (int64_t f = 1; f < std::min<int64_t>(16, n); ++f) row[f] = row[0] + noise(rng);
    for (int64_t f = 32; f < n; f += 37) row[f] *= 8.0f;
    for (int64_t f : dead) row[f] = 0.0f;
  }
  return x;
}

// H = 2/samples XᵀX rounded to f32 (host), and its f64 widening for the CPU solvers.
struct Hessian {
  Tensor f32, f64;
};
Hessian make_hessian(const std::vector<float>& x, int64_t samples, int64_t n) {
  Hessian h{*Tensor::empty(DType::f32, {n, n}), *Tensor::empty(DType::f64, {n, n})};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t t = 0; t < samples; ++t) s += static_cast<double>(x[t * n + i]) * x[t * n + j];
      const auto v = static_cast<float>(2.0 * s / static_cast<double>(samples));
      h.f32.data_as<float>()[i * n + j] = h.f32.data_as<float>()[j * n + i] = v;
    }
  for (int64_t i = 0; i < n * n; ++i) h.f64.data_as<double>()[i] = h.f32.data_as<float>()[i];
  return h;
}

size_t count_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

TEST(CudaCompress, HessianMatchesCpuGrams) {
  Solvers s;
  if (!s.gpu) GTEST_SKIP() << "no CUDA device";
  for (int64_t n : {77, 300}) {
    auto hc = s.cpu->new_hessian(n);
    auto hg = s.gpu->new_hessian(n);
    ASSERT_TRUE(hc.is_ok() && hg.is_ok()) << hg.status().to_string();
    const int64_t rows[] = {37, 64, 50};
    for (int w = 0; w < 3; ++w) {
      const int64_t m = rows[w];
      Tensor x = host_f32(calib_rows(m + 3, n, 5 + static_cast<uint32_t>(w)), m + 3, n);  // 3 extra rows ignored
      ASSERT_TRUE(s.cpu->accumulate_hessian(*hc, w, x, m).is_ok());
      Tensor xg = on_gpu(x);
      Status st = s.gpu->accumulate_hessian(*hg, w, xg, m);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    ASSERT_TRUE(s.cpu->finish_hessian(*hc).is_ok());
    ASSERT_TRUE(s.gpu->finish_hessian(*hg).is_ok());
    const std::vector<float> g = values(*hg);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n * n; ++i) {
      const double c = hc->data_as<double>()[i];
      worst = std::max(worst, std::abs(c - g[static_cast<size_t>(i)]));
      scale = std::max(scale, std::abs(c));
    }
    std::printf("H [%lld]: max |gpu - cpu| / max |H| = %.3e\n", static_cast<long long>(n), worst / scale);
    EXPECT_LE(worst / scale, 1e-5);
    for (int64_t i = 0; i < n; ++i)  // both triangles written
      for (int64_t j = 0; j < i; ++j) EXPECT_EQ(g[static_cast<size_t>(i * n + j)], g[static_cast<size_t>(j * n + i)]);
  }
}

struct GptqCase {
  int64_t n_out, n;
  QuantGrid grid;
  bool act_order = false, static_groups = false, f16_weight = false;
  std::vector<int64_t> dead = {};
};

TEST(CudaCompress, GptqMatchesCpu) {
  Solvers s;
  if (!s.gpu) GTEST_SKIP() << "no CUDA device";
  const std::vector<GptqCase> cases = {
      {67, 200, {.bits = 4}},                                            // per row, ragged last block
      {67, 200, {.bits = 4, .group = 32, .partial_groups = true}},       // groups inside blocks, partial last
      {130, 384, {.bits = 3, .sym = true, .group = 128}},                // group = block
      {130, 384, {.bits = 2, .group = 64}, true},                        // act-order, dynamic groups
      {130, 384, {.bits = 4, .sym = true, .group = 64}, true, true},     // act-order, static groups
      {96, 512, {.bits = 8, .group = 256}},                              // groups spanning two blocks
      {257, 520, {.bits = 4, .group = 48, .partial_groups = true}},      // block 96, partial last group
      {33, 300, {.bits = 3, .sym = true}, true},                         // act-order, per row
      {50, 256, {.bits = 2, .sym = true, .group = 32}, true, false, true},  // f16 weight
      {64, 192, {.bits = 4, .group = 64}, false, false, false, {3, 70, 71}},  // dead inputs
      {40, 128, {.bits = 4, .group = 32, .mse = true}, true, true},      // clipping search (grids on the host)
  };
  size_t mismatched = 0, total = 0;
  uint32_t seed = 100;
  for (const GptqCase& k : cases) {
    const int64_t samples = 4 * k.n;
    const Hessian h = make_hessian(calib_rows(samples, k.n, seed++, k.dead), samples, k.n);
    std::vector<float> wv = random_values(k.n_out * k.n, seed++, 0.05f);
    Tensor w = host_f32(wv, k.n_out, k.n), wg;
    if (k.f16_weight) {
      Tensor w16 = *convert(w, DType::f16);
      w = *convert(w16, DType::f32);  // the CPU sees the f16 values
      wg = on_gpu(w16);
    } else {
      wg = on_gpu(w);
    }
    GptqOptions o;
    o.grid = k.grid;
    o.act_order = k.act_order;
    o.static_groups = k.static_groups;
    auto c = s.cpu->gptq(w, h.f64, o);
    auto g = s.gpu->gptq(wg, on_gpu(h.f32), o);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    const std::string what = fmt::format("gptq {}x{} bits {} sym {} group {} act {} static {}", k.n_out, k.n,
                                         k.grid.bits, k.grid.sym, k.grid.group, k.act_order, k.static_groups);
    EXPECT_EQ(g->perm, c->perm) << what;
    EXPECT_EQ(g->q->g_idx, c->q->g_idx) << what;
    EXPECT_EQ(g->n_dead, c->n_dead) << what;
    EXPECT_EQ(g->damp_retries, c->damp_retries) << what;
    EXPECT_DOUBLE_EQ(g->percdamp_used, c->percdamp_used) << what;
    const size_t diff = count_diff(g->q->codes, c->q->codes);
    mismatched += diff;
    total += c->q->codes.size();
    EXPECT_LE(diff, c->q->codes.size() / 100) << what;
    EXPECT_EQ(values(g->w_hat), dequantize(*g->q)) << what;
    for (int64_t col : k.dead)
      for (int64_t r = 0; r < k.n_out; ++r) EXPECT_EQ(values(g->w_hat)[static_cast<size_t>(r * k.n + col)], 0.0f);
    auto ec = s.cpu->reconstruction_error(w, c->w_hat, h.f64);
    auto eg = s.gpu->reconstruction_error(wg, g->w_hat, on_gpu(h.f32));
    ASSERT_TRUE(ec.is_ok() && eg.is_ok()) << eg.status().to_string();
    std::printf("%s: codes differing %zu of %zu, loss cpu %.6g gpu %.6g, error cpu %.6g gpu %.6g\n", what.c_str(),
                diff, c->q->codes.size(), c->loss, g->loss, *ec, *eg);
    EXPECT_LE(rel(g->loss, c->loss), 0.01) << what;
    EXPECT_LE(rel(*eg, *ec), 0.01) << what;
  }
  std::printf("gptq: %zu of %zu codes differ (%.4f%%)\n", mismatched, total, 100.0 * static_cast<double>(mismatched) /
                                                                              static_cast<double>(total));
  EXPECT_LE(mismatched, total / 1000);
}

TEST(CudaCompress, GptqDampeningRetriesAsCpu) {
  Solvers s;
  if (!s.gpu) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 64, n_out = 16;
  // I with a [[1, 1.5], [1.5, 1]] block (eigenvalue -0.5): fails at 0.01 and 0.1, passes at 1.
  Tensor h32 = *Tensor::empty(DType::f32, {n, n}), h64 = *Tensor::empty(DType::f64, {n, n});
  for (int64_t i = 0; i < n; ++i) h32.data_as<float>()[i * n + i] = 1.0f;
  h32.data_as<float>()[1] = h32.data_as<float>()[n] = 1.5f;
  for (int64_t i = 0; i < n * n; ++i) h64.data_as<double>()[i] = h32.data_as<float>()[i];
  Tensor w = host_f32(random_values(n_out * n, 9), n_out, n);
  GptqOptions o;
  o.grid = {.bits = 4, .group = 32};
  auto c = s.cpu->gptq(w, h64, o);
  auto g = s.gpu->gptq(on_gpu(w), on_gpu(h32), o);
  ASSERT_TRUE(c.is_ok() && g.is_ok()) << g.status().to_string();
  EXPECT_EQ(c->damp_retries, 2);
  EXPECT_EQ(g->damp_retries, c->damp_retries);
  EXPECT_DOUBLE_EQ(g->percdamp_used, c->percdamp_used);
  EXPECT_EQ(count_diff(g->q->codes, c->q->codes), 0u);
  // Beyond the limit both refuse, naming the matrix.
  o.hessian.max_percdamp = 0.1;
  auto bad = s.gpu->gptq(on_gpu(w), on_gpu(h32), o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("not positive definite"), std::string::npos) << bad.status().message();
  // A non-finite Hessian entry is refused as on the cpu.
  h32.data_as<float>()[5] = std::nanf("");
  EXPECT_FALSE(s.gpu->gptq(on_gpu(w), on_gpu(h32), GptqOptions{}).is_ok());
}

struct SparseCase {
  int64_t n_out, n;
  double sparsity = 0.5;
  int64_t prune_n = 0, prune_m = 0, block = 128;
  std::optional<QuantGrid> quant = std::nullopt;
};

TEST(CudaCompress, SparseGptMatchesCpu) {
  Solvers s;
  if (!s.gpu) GTEST_SKIP() << "no CUDA device";
  const std::vector<SparseCase> cases = {
      {90, 300, 0.5},                                         // unstructured, ragged last block
      {90, 300, 0.6, 0, 0, 64},                               // mask block 64
      {70, 256, 0, 2, 4},                                     // 2:4
      {70, 256, 0, 4, 8},                                     // 4:8
      {70, 256, 0, 2, 4, 128, QuantGrid{.bits = 4}},          // 2:4 + 4-bit per row
      {90, 384, 0.5, 0, 0, 128, QuantGrid{.bits = 4, .group = 32}},  // 50% + 4-bit g32
      {60, 192, 0, 2, 4, 128, QuantGrid{.bits = 3, .sym = true, .group = 16}},
  };
  uint32_t seed = 300;
  for (const SparseCase& k : cases) {
    const int64_t samples = 4 * k.n;
    const Hessian h = make_hessian(calib_rows(samples, k.n, seed++), samples, k.n);
    Tensor w = host_f32(random_values(k.n_out * k.n, seed++, 0.05f), k.n_out, k.n);
    SparseGptOptions o;
    o.sparsity = k.sparsity;
    o.prune_n = k.prune_n;
    o.prune_m = k.prune_m;
    o.block_size = k.block;
    o.quant = k.quant;
    auto c = s.cpu->sparsegpt(w, h.f64, o);
    auto g = s.gpu->sparsegpt(on_gpu(w), on_gpu(h.f32), o);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    const std::string what = fmt::format("sparsegpt {}x{} sparsity {} n:m {}:{} block {} quant {}", k.n_out, k.n,
                                         k.sparsity, k.prune_n, k.prune_m, k.block, k.quant ? k.quant->bits : 0);
    const std::vector<float> wg = values(g->w_hat);
    ASSERT_EQ(g->mask.size(), static_cast<size_t>(k.n_out * k.n));
    for (size_t i = 0; i < g->mask.size(); ++i)
      if (!g->mask[i]) ASSERT_EQ(wg[i], 0.0f) << what << " entry " << i;
    if (k.prune_n > 0) {
      for (int64_t r = 0; r < k.n_out; ++r)
        for (int64_t c0 = 0; c0 < k.n; c0 += k.prune_m) {
          int64_t zeros = 0;
          for (int64_t t = 0; t < k.prune_m; ++t) zeros += g->mask[static_cast<size_t>(r * k.n + c0 + t)] == 0;
          ASSERT_EQ(zeros, k.prune_n) << what << " row " << r << " group " << c0;
        }
    } else {
      for (int64_t i1 = 0; i1 < k.n; i1 += k.block) {
        const int64_t bk = std::min(k.block, k.n - i1);
        int64_t zeros = 0;
        for (int64_t r = 0; r < k.n_out; ++r)
          for (int64_t c0 = i1; c0 < i1 + bk; ++c0) zeros += g->mask[static_cast<size_t>(r * k.n + c0)] == 0;
        EXPECT_EQ(zeros, static_cast<int64_t>(k.sparsity * static_cast<double>(k.n_out * bk))) << what;
      }
    }
    if (k.quant) {
      ASSERT_TRUE(g->q.has_value());
      EXPECT_EQ(wg, dequantize(*g->q)) << what;
    }
    const size_t diff = count_diff(g->mask, c->mask);
    auto ec = s.cpu->reconstruction_error(w, c->w_hat, h.f64);
    auto eg = s.gpu->reconstruction_error(on_gpu(w), g->w_hat, on_gpu(h.f32));
    ASSERT_TRUE(ec.is_ok() && eg.is_ok());
    std::printf("%s: masks differ on %zu of %zu, loss cpu %.6g gpu %.6g, error cpu %.6g gpu %.6g\n", what.c_str(), diff,
                g->mask.size(), c->loss, g->loss, *ec, *eg);
    EXPECT_LE(diff, g->mask.size() / 100) << what;
    EXPECT_LE(rel(g->loss, c->loss), 0.02) << what;
    EXPECT_LE(rel(*eg, *ec), 0.02) << what;
  }
}

TEST(CudaCompress, ErrorZerosStoreAndRefusals) {
  Solvers s;
  if (!s.gpu) GTEST_SKIP() << "no CUDA device";
  const int64_t n_out = 45, n = 160, samples = 500;
  const Hessian h = make_hessian(calib_rows(samples, n, 7), samples, n);
  std::vector<float> wv = random_values(n_out * n, 8), wh = wv;
  for (size_t i = 0; i < wh.size(); i += 3) wh[i] = 0.0f;
  for (size_t i = 1; i < wh.size(); i += 3) wh[i] *= 1.01f;
  Tensor w = host_f32(wv, n_out, n), w_hat = host_f32(wh, n_out, n);
  auto ec = s.cpu->reconstruction_error(w, w_hat, h.f64);
  auto eg = s.gpu->reconstruction_error(on_gpu(w), on_gpu(w_hat), on_gpu(h.f32));
  ASSERT_TRUE(ec.is_ok() && eg.is_ok()) << eg.status().to_string();
  EXPECT_LE(rel(*eg, *ec), 1e-4) << *eg << " vs " << *ec;
  auto z = s.gpu->count_zeros(on_gpu(w_hat));
  ASSERT_TRUE(z.is_ok());
  EXPECT_EQ(*z, static_cast<int64_t>((wh.size() + 2) / 3));
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    Tensor dst = on_gpu(*convert(w, dt));
    ASSERT_TRUE(s.gpu->store_weight(on_gpu(w_hat), dst).is_ok());
    EXPECT_EQ(dst.dtype(), dt);
    EXPECT_EQ(values(dst), dt == DType::f32 ? wh : values(*convert(w_hat, dt))) << dtype_name(dt);
  }
  // copy moves rows; shapes are checked.
  Tensor big = on_gpu(host_f32(random_values((n_out + 5) * n, 9), n_out + 5, n));
  ASSERT_TRUE(s.gpu->copy(on_gpu(w), big).is_ok());
  EXPECT_EQ(values(big)[static_cast<size_t>(n_out * n - 1)], wv.back());
  Tensor small = on_gpu(w);
  EXPECT_FALSE(s.gpu->copy(big, small).is_ok());
  // Not on the GPU: the clipping search with dynamic groups; unstructured SparseGPT blocks over 128.
  GptqOptions clip;
  clip.grid = {.bits = 4, .group = 32, .mse = true};
  auto a = s.gpu->gptq(on_gpu(w), on_gpu(h.f32), clip);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::unsupported);
  SparseGptOptions wide;
  wide.block_size = 256;
  auto b = s.gpu->sparsegpt(on_gpu(w), on_gpu(h.f32), wide);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("128"), std::string::npos) << b.status().message();
  // Host tensors are refused with a message naming them.
  EXPECT_FALSE(s.gpu->gptq(w, on_gpu(h.f32), GptqOptions{}).is_ok());
  // RTN / magnitude go through the host and come back on the device.
  auto r = s.gpu->rtn(on_gpu(w), QuantGrid{.bits = 4, .group = 32});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->w_hat.device(), Device::cuda);
  EXPECT_EQ(values(r->w_hat), dequantize(*r->q));
}

}  // namespace

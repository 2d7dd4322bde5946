// The CPU SolverBackend (compress/solver_backend.h), the seam the pipeline goes through: H
// accumulated as the reference's running average of 2XᵀX, GPTQ / SparseGPT / RTN / magnitude
// equal to the direct solver calls, weights written back, and the pieces of hessian.h the GPU
// preparation shares (act-order from the diagonal, the dampening retry policy). Without a GPU (or
// without CUDA) the CUDA backend is refused with a message naming the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lithe/compress/hessian.h"
#include "lithe/compress/solver_backend.h"

using namespace lithe;
using namespace lithe::compress;

namespace {

Tensor random_host(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = *Tensor::empty(DType::f32, {rows, cols});
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
  return t;
}

std::span<const float> floats(const Tensor& t) { return {t.data_as<float>(), static_cast<size_t>(t.numel())}; }

TEST(CpuSolverBackend, HessianIsRunningAverageOfGrams) {
  auto s = make_cpu_solver_backend();
  const int64_t n = 19;
  const int64_t rows[] = {7, 12, 5};
  auto h = s->new_hessian(n);
  ASSERT_TRUE(h.is_ok());
  std::vector<double> want(static_cast<size_t>(n * n), 0.0);
  for (int w = 0; w < 3; ++w) {
    Tensor x = random_host(rows[w] + 2, n, 10 + static_cast<uint32_t>(w));  // extra rows are ignored
    ASSERT_TRUE(s->accumulate_hessian(*h, w, x, rows[w]).is_ok());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double g = 0;
        for (int64_t r = 0; r < rows[w]; ++r)
          g += static_cast<double>(x.data_as<float>()[r * n + i]) * x.data_as<float>()[r * n + j];
        want[static_cast<size_t>(i * n + j)] += 2.0 * g / 3.0;  // 2/N Σ over the N = 3 windows
      }
  }
  ASSERT_TRUE(s->finish_hessian(*h).is_ok());
  for (int64_t i = 0; i < n * n; ++i)
    EXPECT_NEAR(h->data_as<double>()[i], want[static_cast<size_t>(i)], 1e-4 * (1 + std::abs(want[static_cast<size_t>(i)])));
  Tensor wrong = random_host(4, n + 1, 3);
  EXPECT_FALSE(s->accumulate_hessian(*h, 3, wrong, 4).is_ok());
}

TEST(CpuSolverBackend, SolversEqualDirectCalls) {
  auto s = make_cpu_solver_backend();
  const int64_t n_out = 24, n = 64;
  Tensor w = random_host(n_out, n, 1), x = random_host(300, n, 2);
  Tensor h = *s->new_hessian(n);
  ASSERT_TRUE(s->accumulate_hessian(h, 0, x, 300).is_ok());
  const std::span<const double> hd(h.data_as<double>(), static_cast<size_t>(n * n));

  GptqOptions go;
  go.grid = {.bits = 3, .group = 16};
  go.act_order = true;
  auto a = s->gptq(w, h, go);
  auto b = gptq(floats(w), n_out, n, hd, go);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->q->codes, b->q.codes);
  EXPECT_EQ(a->perm, b->perm);
  EXPECT_EQ(a->loss, b->loss);
  ASSERT_EQ(a->w_hat.numel(), n_out * n);
  EXPECT_EQ(std::vector<float>(floats(a->w_hat).begin(), floats(a->w_hat).end()), b->w_hat);
  auto e = s->reconstruction_error(w, a->w_hat, h);
  auto e2 = reconstruction_error(floats(w), b->w_hat, hd, n_out, n);
  ASSERT_TRUE(e.is_ok() && e2.is_ok());
  EXPECT_EQ(*e, *e2);

  SparseGptOptions so;
  so.prune_n = 2;
  so.prune_m = 4;
  auto c = s->sparsegpt(w, h, so);
  auto d = sparsegpt(floats(w), n_out, n, hd, so);
  ASSERT_TRUE(c.is_ok() && d.is_ok());
  EXPECT_EQ(c->mask, d->mask);
  auto z = s->count_zeros(c->w_hat);
  ASSERT_TRUE(z.is_ok());
  EXPECT_EQ(*z, n_out * n / 2);

  auto r = s->rtn(w, QuantGrid{.bits = 4, .group = 32});
  auto r2 = rtn(floats(w), n_out, n, QuantGrid{.bits = 4, .group = 32});
  ASSERT_TRUE(r.is_ok() && r2.is_ok());
  EXPECT_EQ(r->q->codes, r2->codes);
  auto m = s->magnitude(w, MagnitudeOptions{.sparsity = 0.25});
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(*s->count_zeros(m->w_hat), n_out * n / 4);

  // store_weight overwrites a writable weight; copy moves rows.
  Tensor dst = random_host(n_out, n, 5);
  ASSERT_TRUE(s->store_weight(a->w_hat, dst).is_ok());
  EXPECT_EQ(std::vector<float>(floats(dst).begin(), floats(dst).end()), b->w_hat);
  Tensor big = random_host(n_out + 3, n, 6);
  ASSERT_TRUE(s->copy(w, big).is_ok());
  EXPECT_EQ(big.data_as<float>()[5], w.data_as<float>()[5]);
  EXPECT_FALSE(s->copy(big, w).is_ok());
}

TEST(CpuSolverBackend, SharedHessianPolicy) {
  const std::vector<double> diag = {2.0, 0.0, 5.0, 2.0, 1.5};
  EXPECT_EQ(act_order_perm_from_diag(diag), (std::vector<int32_t>{2, 0, 3, 4, 1}));
  auto d = inspect_hessian_diagonal(diag);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->n_dead, 1);
  EXPECT_DOUBLE_EQ(d->mean_diag, (2.0 + 1.0 + 5.0 + 2.0 + 1.5) / 5.0);
  EXPECT_FALSE(inspect_hessian_diagonal(std::vector<double>{1.0, -1.0}).is_ok());
  const HessianOptions o;  // 0.01, limit 1
  EXPECT_DOUBLE_EQ(*next_percdamp(0.01, 4, 1.0, o), 0.1);
  EXPECT_DOUBLE_EQ(*next_percdamp(0.0, 4, 1.0, o), 1e-6);
  auto past = next_percdamp(1.0, 4, 1.0, o);
  ASSERT_FALSE(past.is_ok());
  EXPECT_NE(past.status().message().find("not positive definite"), std::string::npos);
}

TEST(SolverBackendFactory, CudaRefusedClearlyWithoutDevice) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present (tests/cuda covers it)";
  auto s = make_solver_backend(Device::cuda);
  ASSERT_FALSE(s.is_ok());
  const std::string msg = s.status().message();
  EXPECT_TRUE(msg.find("CUDA") != std::string::npos || msg.find("cuda") != std::string::npos) << msg;
  ASSERT_TRUE(make_solver_backend(Device::cpu).is_ok());
}

}  // namespace

// Runs on a GPU machine: device buffers, host<->device copies, and the smoke kernel against a
// scalar reference on odd sizes. Skips (with a message) where no device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lithe/kernels/cuda_device.h"

using namespace lithe;

namespace {
bool have_gpu() { return cuda_available(); }
}  // namespace

TEST(CudaDevice, InfoIsReadOffTheDevice) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto d = cuda::device_info();
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_GE(d->major, 8);
  EXPECT_GT(d->multiprocessors, 0);
  EXPECT_GT(d->total_memory, d->free_memory / 2);
  std::printf("device: %s sm_%d%d, %d SMs, %.1f GiB, L2 %.1f MiB\n", d->name.c_str(), d->major, d->minor,
              d->multiprocessors, d->total_memory / 1073741824.0, d->l2_bytes / 1048576.0);
}

TEST(CudaDevice, RoundTripAndAffineMatchReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (int64_t n : {1, 3, 17, 118, 4097, 1 << 20}) {
    auto h = Tensor::empty(DType::f32, {n});
    ASSERT_TRUE(h.is_ok());
    for (int64_t i = 0; i < n; ++i) h->data_as<float>()[i] = nd(rng);
    auto d = h->to(Device::cuda);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    auto out = Tensor::empty(DType::f32, {n}, Device::cuda);
    ASSERT_TRUE(out.is_ok());
    ASSERT_TRUE(cuda::affine_f32(*d, 1.5f, -0.25f, *out).is_ok());
    auto back = out->to(Device::cpu);
    ASSERT_TRUE(back.is_ok());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(back->data_as<float>()[i], std::fma(1.5f, h->data_as<float>()[i], -0.25f)) << "n=" << n << " i=" << i;
  }
}

TEST(CudaDevice, OutOfMemoryIsAStatusNamingTheSize) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto r = alloc_device(size_t{1} << 50);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::out_of_memory);
  EXPECT_NE(r.status().message().find("1125899906842624"), std::string::npos) << r.status().message();
}

// Helpers shared by the CUDA kernel tests: device copies of host vectors, random inputs, and
// comparisons of float results and KV-cache bytes that report the first mismatch.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/core/buffer.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cuda_ops.h"

namespace lithe::cuda_test {

// Device copy of a host vector (one spare element so callers may offset by one).
template <typename T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) {
    EXPECT_EQ(cudaMalloc(&p_, (h.size() + 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    n_ = h.size();
  }
  // The same data starting one element into the allocation (misaligned for float4).
  static Dev offset(const std::vector<T>& h) {
    std::vector<T> shifted(h.size() + 1);
    std::copy(h.begin(), h.end(), shifted.begin() + 1);
    Dev d(shifted);
    d.off_ = 1;
    d.n_ = h.size();
    return d;
  }
  Dev(Dev&& o) noexcept : p_(o.p_), n_(o.n_), off_(o.off_) { o.p_ = nullptr; }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p_); }
  T* get() const { return p_ + off_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0, off_ = 0;
};

template <typename T>
Dev<T> upload(const std::vector<T>& h, bool misalign) {
  return misalign ? Dev<T>::offset(h) : Dev<T>(h);
}

inline std::vector<float> randn(size_t n, std::mt19937& rng, float mean = 0.0f, float sd = 1.0f) {
  std::normal_distribution<float> nd(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// |got - want| <= rel * |want| + abs, reporting the first failure.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, float abs,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), rel * std::fabs(want[i]) + abs)
        << what << " i=" << i << " got " << got[i] << " want " << want[i];
}

inline void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(bits(got[i]), bits(want[i])) << what << " i=" << i << " got " << got[i] << " want " << want[i];
}

// Cache contents as floats (f32 or f16 bytes): equal bits, or within rel * |want| + 1e-6.
inline void expect_cache_close(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, cuda::KvType kv,
                               float rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const size_t es = kv == cuda::KvType::f32 ? 4 : 2;
  for (size_t i = 0; i < got.size() / es; ++i) {
    if (std::memcmp(&got[i * es], &want[i * es], es) == 0) continue;
    float a, b;
    if (es == 4) {
      std::memcpy(&a, &got[i * 4], 4);
      std::memcpy(&b, &want[i * 4], 4);
    } else {
      uint16_t ha, hb;
      std::memcpy(&ha, &got[i * 2], 2);
      std::memcpy(&hb, &want[i * 2], 2);
      a = f16_to_f32(ha);
      b = f16_to_f32(hb);
    }
    ASSERT_LE(std::fabs(a - b), rel * std::fabs(b) + 1e-6f)
        << what << " element " << i << " got " << a << " want " << b;
  }
}

// A test with its own CUDA stream; skipped where no device is visible.
class CudaStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }
  cudaStream_t stream_ = nullptr;
};

// Heads of a rotary-embedding test case, its inverse frequencies (base 10000, rot_dim / 2 values),
// and the rope_kv_store() arguments over device buffers (pos, slots, inv_freq: device arrays).
struct HeadShape {
  int64_t head_dim, rot_dim, n_heads, n_kv_heads;
};
inline std::vector<float> rope_inv_freq(const HeadShape& sh) {
  std::vector<float> f;
  for (int64_t i = 0; i < sh.rot_dim / 2; ++i)
    f.push_back(static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(sh.rot_dim))));
  return f;
}
struct RopeKvBuffers {
  float* q;
  float* k;
  const float* v;
  void* k_cache;
  void* v_cache;
  int32_t* kv_pos;  // may be null
};
inline cuda::RopeKvArgs rope_kv_args(const HeadShape& sh, int64_t m, cuda::RopeMode mode, cuda::KvType kv,
                                     const int32_t* pos, const float* inv_freq, const int64_t* slots,
                                     const RopeKvBuffers& b) {
  cuda::RopeKvArgs a;
  a.q = b.q;
  a.k = b.k;
  a.v = b.v;
  a.m = m;
  a.n_heads = sh.n_heads;
  a.n_kv_heads = sh.n_kv_heads;
  a.head_dim = sh.head_dim;
  a.pos = pos;
  a.inv_freq = inv_freq;
  a.rot_dim = sh.rot_dim;
  a.mode = mode;
  a.slots = slots;
  a.k_cache = b.k_cache;
  a.v_cache = b.v_cache;
  a.kv = kv;
  a.kv_pos = b.kv_pos;
  return a;
}

// Whether the environment sets the benchmark knob `name` to "0" (the kernels then take the other
// path: the tests that check which path runs expect it).
inline bool knob_off(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string_view(e) == "0";
}
// The integer the environment sets the benchmark knob `name` to, else `fallback`.
inline int knob_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e != nullptr ? std::atoi(e) : fallback;
}

// With the environment variable `env` set, prints an FNV-1a hash of the bytes of y as
// "[ TAG ] what m=M HASH", so that two builds or settings can be compared bit for bit
// (bench/gq_device_run.sh compares them).
inline void print_hash_if(const char* env, const char* tag, const std::string& what, int64_t m,
                          const std::vector<float>& y) {
  if (std::getenv(env) == nullptr) return;
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char b : std::string_view(reinterpret_cast<const char*>(y.data()), y.size() * 4))
    h = (h ^ b) * 1099511628211ull;
  std::printf("[ %s ] %s m=%lld %016llx\n", tag, what.c_str(), static_cast<long long>(m),
              static_cast<unsigned long long>(h));
}

}  // namespace lithe::cuda_test

// Runs on a GPU machine: cuda::top_k (src/kernels/cuda/topk.cu) against the sampler's order
// (value descending, smaller id first on ties; std::partial_sort on the host) over vocab sizes up
// to 128256, k up to kTopKMax, with distinct values, heavy duplicates, -inf entries and -0/+0.
// Ids and value bits must match exactly. Argument checks run without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lithe/core/buffer.h"
#include "lithe/kernels/cuda_ops.h"
#include "lithe/runtime/backend.h"

using namespace lithe;

namespace {

template <typename T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) { EXPECT_EQ(cudaMalloc(&p_, (n + 1) * sizeof(T)), cudaSuccess); }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p_); }
  T* get() const { return p_; }
  void put(const std::vector<T>& h, size_t off = 0) {
    EXPECT_EQ(cudaMemcpy(p_ + off, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// increasing / decreasing: value follows the id. strided_hot and stacked put large values on the
// ids that k of the kernel's block threads read (1024 threads; float4 loads when vocab % 4 == 0),
// stacked with each such thread's values above the previous one's, so that many candidates pass
// the kernel's first filter (the k-th largest of the thread maxima) and its larger-selection and
// whole-row fallback paths run.
enum class Kind { distinct, duplicates, neg_inf, signed_zeros, increasing, decreasing, strided_hot, stacked };

int64_t kernel_thread(int64_t id, int64_t vocab) {
  const int64_t threads = vocab >= 4096 ? 1024 : 256;
  return (vocab % 4 == 0 ? id / 4 : id) % threads;
}
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::distinct: return "distinct";
    case Kind::duplicates: return "duplicates";
    case Kind::neg_inf: return "neg_inf";
    case Kind::signed_zeros: return "signed_zeros";
    case Kind::increasing: return "increasing";
    case Kind::decreasing: return "decreasing";
    case Kind::strided_hot: return "strided_hot";
    case Kind::stacked: return "stacked";
  }
  return "?";
}

// One row of logits of the given kind. neg_inf rows: ~30% -inf; row 1 of them keeps only 3
// finite values so that the top k reaches into the -inf ties.
std::vector<float> make_row(Kind kind, int64_t vocab, int64_t row, int k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (int64_t id = 0; id < vocab; ++id) {
    float& x = v[static_cast<size_t>(id)];
    switch (kind) {
      case Kind::increasing: x = static_cast<float>(id) * 0.01f; break;
      case Kind::decreasing: x = -static_cast<float>(id) * 0.01f; break;
      case Kind::strided_hot: x = kernel_thread(id, vocab) < k ? 100.0f + nd(rng) : nd(rng); break;
      case Kind::stacked: {
        const int64_t t = kernel_thread(id, vocab);
        x = t < k ? 1000.0f * static_cast<float>(t + 1) + 0.5f * static_cast<float>(id / 4096) : nd(rng);
        break;
      }
      case Kind::distinct: x = nd(rng); break;
      case Kind::duplicates: x = std::round(nd(rng) * 2.0f) / 2.0f; break;
      case Kind::neg_inf: x = rng() % 10 < 3 ? -INFINITY : std::round(nd(rng) * 4.0f) / 4.0f; break;
      case Kind::signed_zeros: {
        const uint32_t r = rng() % 4;
        x = r == 0 ? -0.0f : r == 1 ? 0.0f : r == 2 ? -1.0f : 0.5f;
        break;
      }
    }
  }
  if (kind == Kind::neg_inf && row == 1) {
    std::fill(v.begin(), v.end(), -INFINITY);
    for (int i = 0; i < 3; ++i) v[rng() % vocab] = nd(rng);
  }
  return v;
}

// The sampler's order: value descending, then id ascending.
std::vector<std::pair<float, int32_t>> reference(const float* row, int64_t vocab, int k) {
  std::vector<std::pair<float, int32_t>> c;
  c.reserve(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) c.emplace_back(row[i], i);
  std::partial_sort(c.begin(), c.begin() + k, c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  c.resize(static_cast<size_t>(k));
  return c;
}

// Runs top_k on rows x vocab logits (optionally one float past a 16-byte boundary) and compares.
void check(Kind kind, int64_t rows, int64_t vocab, int k, bool misalign, std::mt19937& rng, cudaStream_t s) {
  const std::string what = std::string(kind_name(kind)) + " rows=" + std::to_string(rows) +
                           " vocab=" + std::to_string(vocab) + " k=" + std::to_string(k) +
                           " misalign=" + std::to_string(misalign);
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row = make_row(kind, vocab, r, k, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  Dev<float> dl(logits.size() + 1), dv(static_cast<size_t>(rows * k));
  Dev<int32_t> di(static_cast<size_t>(rows * k)), db(static_cast<size_t>(rows));
  dl.put(logits, misalign ? 1 : 0);
  ASSERT_TRUE(cuda::top_k(dl.get() + (misalign ? 1 : 0), rows, vocab, k, dv.get(), di.get(), s, db.get()).is_ok())
      << what;
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << what;
  const std::vector<float> vals = dv.host();
  const std::vector<int32_t> ids = di.host(), best = db.host();
  for (int64_t r = 0; r < rows; ++r) {
    const auto want = reference(logits.data() + r * vocab, vocab, k);
    ASSERT_EQ(best[r], want[0].second) << what << " row " << r << " (best)";
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[r * k + j], want[j].second) << what << " row " << r << " rank " << j;
      ASSERT_EQ(bits(vals[r * k + j]), bits(want[j].first)) << what << " row " << r << " rank " << j;
    }
  }
}

}  // namespace

TEST(CudaTopK, MatchesSamplerOrderExactly) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::mt19937 rng(21);
  for (int64_t vocab : {1, 5, 1000, 49152, 128256, 50001}) {
    for (int k : {1, 5, 40, 256}) {
      if (k > vocab) continue;
      for (int64_t rows : {1, 3})
        for (Kind kind : {Kind::distinct, Kind::duplicates, Kind::neg_inf, Kind::signed_zeros})
          check(kind, rows, vocab, k, false, rng, s);
    }
  }
  cudaStreamDestroy(s);
}

// vocab % 4 == 0 but the row is not 16-byte aligned: the scalar path.
TEST(CudaTopK, MisalignedRowsMatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::mt19937 rng(22);
  for (int k : {1, 40, 256})
    for (Kind kind : {Kind::distinct, Kind::neg_inf}) check(kind, 3, 32000, k, true, rng, s);
  cudaStreamDestroy(s);
}

// Layouts that defeat the kernel's first filter; vocab % 4 != 0 covers the scalar loads.
TEST(CudaTopK, AdversarialLayoutsMatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::mt19937 rng(23);
  for (int64_t vocab : {128256, 128257, 4095})
    for (int k : {2, 5, 16, 40, 256})
      for (Kind kind : {Kind::increasing, Kind::decreasing, Kind::strided_hot, Kind::stacked})
        check(kind, 2, vocab, k, false, rng, s);
  cudaStreamDestroy(s);
}

// All values equal: the whole selection is decided by the ids (k smallest ids, in order).
TEST(CudaTopK, AllTiedPicksSmallestIds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (float value : {0.0f, -INFINITY, 2.5f}) {
    const int64_t vocab = 128256;
    const int k = 256;
    Dev<float> dl(vocab), dv(k);
    Dev<int32_t> di(k);
    dl.put(std::vector<float>(vocab, value));
    ASSERT_TRUE(cuda::top_k(dl.get(), 1, vocab, k, dv.get(), di.get(), nullptr).is_ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> ids = di.host();
    const std::vector<float> vals = dv.host();
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[j], j) << "value " << value;
      ASSERT_EQ(bits(vals[j]), bits(value)) << "value " << value;
    }
  }
}

TEST(CudaTopKArgs, BadArgumentsAreStatusesNamingTheValue) {
  float* const p = reinterpret_cast<float*>(uintptr_t{256});  // never dereferenced
  int32_t* const ip = reinterpret_cast<int32_t*>(uintptr_t{256});
  auto expect_bad = [](const Status& s, const std::string& needle) {
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message() << " should mention " << needle;
  };
  expect_bad(cuda::top_k(p, 1, 1000, 0, p, ip, nullptr), "0");
  expect_bad(cuda::top_k(p, 1, 1000, cuda::kTopKMax + 1, p, ip, nullptr), std::to_string(cuda::kTopKMax + 1));
  expect_bad(cuda::top_k(p, 1, 1000, -3, p, ip, nullptr), "-3");
  expect_bad(cuda::top_k(p, 1, 4, 5, p, ip, nullptr), "5");
  expect_bad(cuda::top_k(p, -2, 1000, 5, p, ip, nullptr), "-2");
  expect_bad(cuda::top_k(p, 1, -7, 5, p, ip, nullptr), "-7");
  expect_bad(cuda::top_k(nullptr, 1, 1000, 5, p, ip, nullptr), "null");
  EXPECT_TRUE(cuda::top_k(nullptr, 0, 1000, 5, nullptr, nullptr, nullptr).is_ok());
}

// cuda::token_logprobs (logprob.cu) against the host reference target_logprob (backend.h) on rows
// of realistic logits (and one with a huge spread), negative targets giving 0.
TEST(CudaLogprob, MatchesHostReference) {
  std::mt19937 rng(5);
  for (int64_t vocab : {int64_t{1001}, int64_t{49152}, int64_t{128256}}) {
    const int64_t rows = 37;
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    for (auto& x : logits) x = nd(rng);
    for (int64_t i = 0; i < vocab; i += 97) logits[static_cast<size_t>(vocab + i)] = 80.0f;  // row 1: spread
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (auto& t : targets) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    targets[3] = -1;
    Dev<float> dl(logits.size()), dout(static_cast<size_t>(rows));
    Dev<int32_t> dt(targets.size());
    dl.put(logits);
    dt.put(targets);
    ASSERT_TRUE(cuda::token_logprobs(dl.get(), rows, vocab, dt.get(), dout.get(), nullptr).is_ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = dout.host();
    for (int64_t r = 0; r < rows; ++r) {
      const float want = targets[static_cast<size_t>(r)] < 0
                             ? 0.0f
                             : target_logprob(logits.data() + r * vocab, vocab, targets[static_cast<size_t>(r)]);
      EXPECT_NEAR(got[static_cast<size_t>(r)], want, 1e-4f * std::max(1.0f, std::fabs(want)))
          << "vocab " << vocab << " row " << r;
    }
  }
  EXPECT_FALSE(cuda::token_logprobs(nullptr, 1, 10, nullptr, nullptr, nullptr).is_ok());
  EXPECT_FALSE(cuda::token_logprobs(nullptr, 1, 0, nullptr, nullptr, nullptr).is_ok());
}

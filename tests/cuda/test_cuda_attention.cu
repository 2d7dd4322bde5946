// Runs on a GPU machine: attention_prefill and attention_decode (src/kernels/cuda/attention_*.cu)
// against the scalar CPU oracle cpu::ref::attention on fresh random inputs (q, k, v ~ N(0, 1)).
// Covers head_dim 64/128, GQA groupings (9,3) (32,32) (32,8) (4,1), f16 and f32 caches, odd
// query / slot counts, capacity > n_kv, a padded row stride, scrambled and gapped positions with a
// query that sees nothing (expects exact zeros), and CUDA-graph replay of decode after *n_kv grows.
// Unfilled cache slots and row padding hold NaN, so reading them shows up as a failure. Decode's
// scratch is NaN except its merge counters (zeroed once, as the API asks); the counters must be
// back at zero after every call, replayed or not, whatever the shape that used the scratch before.
// Tolerances: prefill runs S and P V on f16 tensor cores (q and p rounded to f16), decode is f32.
// DISABLED_Perf* print timings taken through CUDA graphs (run with --gtest_also_run_disabled_tests).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/cuda_ops.h"

using namespace lithe;

namespace {

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Device allocation freed on scope exit.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p != nullptr) cudaFree(p);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Allocates `bytes` (at least 16) and copies src there; returns false (with a failure) on error.
[[nodiscard]] bool upload(DevBuf& b, const void* src, size_t bytes) {
  cudaError_t e = cudaMalloc(&b.p, std::max<size_t>(bytes, 16));
  if (e == cudaSuccess && bytes > 0) e = cudaMemcpy(b.p, src, bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) ADD_FAILURE() << "upload of " << bytes << " bytes: " << cudaGetErrorString(e);
  return e == cudaSuccess;
}
template <typename T>
[[nodiscard]] bool upload(DevBuf& b, const std::vector<T>& v) {
  return upload(b, v.data(), v.size() * sizeof(T));
}
// Allocates `bytes` filled with 0xff (NaN as f32): output the kernel fails to write shows up.
[[nodiscard]] bool alloc_nan(DevBuf& b, size_t bytes) {
  cudaError_t e = cudaMalloc(&b.p, std::max<size_t>(bytes, 16));
  if (e == cudaSuccess) e = cudaMemset(b.p, 0xff, std::max<size_t>(bytes, 16));
  if (e != cudaSuccess) ADD_FAILURE() << "alloc of " << bytes << " bytes: " << cudaGetErrorString(e);
  return e == cudaSuccess;
}
// attention_decode's scratch: NaN (no initialization assumed) but for the merge counters, which
// must start at zero.
[[nodiscard]] bool alloc_work(DevBuf& b, size_t bytes) {
  if (!alloc_nan(b, bytes)) return false;
  const cudaError_t e = cudaMemset(b.p, 0, cuda::kDecodeCounterBytes);
  if (e != cudaSuccess) ADD_FAILURE() << "zeroing the counters: " << cudaGetErrorString(e);
  return e == cudaSuccess;
}
// Every merge counter is back at zero (after a completed call).
void expect_counters_zero(const DevBuf& work, const char* what) {
  std::vector<uint32_t> c(cuda::kDecodeCounterBytes / 4);
  ASSERT_EQ(cudaMemcpy(c.data(), work.p, cuda::kDecodeCounterBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], 0u) << what << ": merge counter " << i << " not reset";
}

enum class Positions { sequential, scrambled };

struct Case {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, n_q = 0, n_kv = 0;
  cuda::KvType kv = cuda::KvType::f16;
  int64_t extra_stride = 0;     // kv_stride = n_kv_heads * head_dim + extra_stride
  int64_t extra_capacity = 37;  // kv_capacity = n_kv + extra_capacity
  Positions pos = Positions::sequential;
  uint32_t seed = 1;

  int64_t stride() const { return n_kv_heads * head_dim + extra_stride; }
  int64_t capacity() const { return n_kv + extra_capacity; }
  std::string name() const {
    return "heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) + " D " + std::to_string(head_dim) +
           " n_q " + std::to_string(n_q) + " n_kv " + std::to_string(n_kv) + " kv " +
           (kv == cuda::KvType::f16 ? "f16" : "f32") + " stride " + std::to_string(stride()) + " cap " +
           std::to_string(capacity()) + (pos == Positions::scrambled ? " scrambled" : " sequential") + " seed " +
           std::to_string(seed);
  }
};

// Host inputs of one case. The cache holds capacity rows of `stride` elements in the cache type;
// only slots < n_kv and columns < n_kv_heads * head_dim are real (the rest is NaN).
struct Inputs {
  std::vector<float> q;
  std::vector<int32_t> q_pos, kv_pos;
  std::vector<float> k32, v32;     // f32 cache
  std::vector<uint16_t> k16, v16;  // f16 cache (bits)
  std::vector<int> visible;        // slots each query sees (0: expects zeros)

  const void* k() const { return k16.empty() ? static_cast<const void*>(k32.data()) : k16.data(); }
  const void* v() const { return v16.empty() ? static_cast<const void*>(v32.data()) : v16.data(); }
  size_t cache_bytes() const { return k16.empty() ? k32.size() * 4 : k16.size() * 2; }
};

// Fills cache rows [s0, s1) with N(0, 1) values.
void fill_rows(const Case& c, std::mt19937& rng, Inputs& in, int64_t s0, int64_t s1) {
  std::normal_distribution<float> nd;
  const int64_t kv_dim = c.n_kv_heads * c.head_dim;
  for (int64_t s = s0; s < s1; ++s)
    for (int64_t i = 0; i < kv_dim; ++i) {
      const size_t idx = static_cast<size_t>(s * c.stride() + i);
      const float kx = nd(rng), vx = nd(rng);
      if (c.kv == cuda::KvType::f16) {
        in.k16[idx] = f32_to_f16(kx);
        in.v16[idx] = f32_to_f16(vx);
      } else {
        in.k32[idx] = kx;
        in.v32[idx] = vx;
      }
    }
}

void count_visible(const Case& c, Inputs& in) {
  in.visible.assign(static_cast<size_t>(c.n_q), 0);
  for (int64_t t = 0; t < c.n_q; ++t)
    for (int64_t s = 0; s < c.n_kv; ++s) in.visible[t] += in.kv_pos[s] <= in.q_pos[t] ? 1 : 0;
}

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> nd;
  Inputs in;
  in.q.resize(static_cast<size_t>(c.n_q * c.n_heads * c.head_dim));
  for (float& x : in.q) x = nd(rng);
  const size_t cache_elems = static_cast<size_t>(c.capacity() * c.stride());
  if (c.kv == cuda::KvType::f16) {
    in.k16.assign(cache_elems, 0x7e00);  // f16 NaN
    in.v16.assign(cache_elems, 0x7e00);
  } else {
    in.k32.assign(cache_elems, NAN);
    in.v32.assign(cache_elems, NAN);
  }
  fill_rows(c, rng, in, 0, c.n_kv);
  in.kv_pos.assign(static_cast<size_t>(c.capacity()), 0);  // unfilled slots: position 0 (visible if read)
  in.q_pos.resize(static_cast<size_t>(c.n_q));
  if (c.pos == Positions::sequential) {
    for (int64_t s = 0; s < c.n_kv; ++s) in.kv_pos[s] = static_cast<int32_t>(s);
    for (int64_t t = 0; t < c.n_q; ++t) in.q_pos[t] = static_cast<int32_t>(c.n_kv - c.n_q + t);
  } else {
    // Positions 10, 13, 16, ... in shuffled slots; slots [64, 128) in the far future (a tile no
    // query sees); query 0 at position 5 sees nothing, the others anywhere (duplicates allowed).
    for (int64_t s = 0; s < c.n_kv; ++s) in.kv_pos[s] = static_cast<int32_t>(10 + 3 * s);
    std::shuffle(in.kv_pos.begin(), in.kv_pos.begin() + c.n_kv, rng);
    for (int64_t s = 64; s < std::min<int64_t>(128, c.n_kv); ++s) in.kv_pos[s] = static_cast<int32_t>(1000000 + s);
    std::uniform_int_distribution<int32_t> qd(0, static_cast<int32_t>(10 + 3 * c.n_kv));
    for (int64_t t = 0; t < c.n_q; ++t) in.q_pos[t] = t == 0 ? 5 : qd(rng);
  }
  count_visible(c, in);
  return in;
}

[[nodiscard]] bool reference(const Case& c, const Inputs& in, std::vector<float>& ref) {
  ref.assign(static_cast<size_t>(c.n_q * c.n_heads * c.head_dim), 0.f);
  cpu::AttentionArgs a{};
  a.q = in.q.data();
  a.n_q = c.n_q;
  a.q_pos = in.q_pos.data();
  a.k = in.k();
  a.v = in.v();
  a.kv_dtype = c.kv == cuda::KvType::f16 ? DType::f16 : DType::f32;
  a.n_kv = c.n_kv;
  a.kv_pos = in.kv_pos.data();
  a.kv_row_stride = c.stride();
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.out = ref.data();
  const Status st = cpu::ref::attention(a);
  if (!st.is_ok()) ADD_FAILURE() << "reference: " << st.to_string();
  return st.is_ok();
}

// Device copies of one case's inputs, and the params that point at them.
struct DevInputs {
  DevBuf q, q_pos, k, v, kv_pos, n_kv, out;
  cuda::AttentionParams p;
};

[[nodiscard]] bool to_device(const Case& c, const Inputs& in, DevInputs& d) {
  const int32_t n_kv = static_cast<int32_t>(c.n_kv);
  if (!upload(d.q, in.q) || !upload(d.q_pos, in.q_pos) || !upload(d.k, in.k(), in.cache_bytes()) ||
      !upload(d.v, in.v(), in.cache_bytes()) || !upload(d.kv_pos, in.kv_pos) || !upload(d.n_kv, &n_kv, 4) ||
      !alloc_nan(d.out, static_cast<size_t>(c.n_q * c.n_heads * c.head_dim) * 4))
    return false;
  cuda::AttentionParams& p = d.p;
  p.q = d.q.as<float>();
  p.q_pos = d.q_pos.as<int32_t>();
  p.n_q = c.n_q;
  p.k = d.k.p;
  p.v = d.v.p;
  p.kv = c.kv;
  p.kv_pos = d.kv_pos.as<int32_t>();
  p.n_kv = d.n_kv.as<int32_t>();
  p.kv_capacity = c.capacity();
  p.kv_stride = c.stride();
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.out = d.out.as<float>();
  return true;
}

// Checks out against ref: finite everywhere, exact zeros for queries that see nothing, max abs
// error <= rel_tol * max|ref| + abs_tol, NMSE <= nmse_tol. Prints the error figures.
void compare(const Case& c, const Inputs& in, const std::vector<float>& out, const std::vector<float>& ref,
             double rel_tol, double abs_tol, double nmse_tol, const char* what) {
  const int64_t row = c.n_heads * c.head_dim;
  double max_err = 0, max_ref = 0, se = 0, sr = 0;
  int64_t bad_zero = 0, non_finite = 0;
  for (int64_t t = 0; t < c.n_q; ++t)
    for (int64_t i = 0; i < row; ++i) {
      const size_t idx = static_cast<size_t>(t * row + i);
      const double o = out[idx], r = ref[idx];
      if (!std::isfinite(o)) {
        ++non_finite;
        continue;
      }
      if (in.visible[t] == 0 && o != 0.0) ++bad_zero;
      max_err = std::max(max_err, std::fabs(o - r));
      max_ref = std::max(max_ref, std::fabs(r));
      se += (o - r) * (o - r);
      sr += r * r;
    }
  const double nmse = sr > 0 ? se / sr : se;
  const double tol = rel_tol * max_ref + abs_tol;
  std::printf("  %-7s %-100s max_err %.3g (tol %.3g) max|ref| %.3g nmse %.3g\n", what, c.name().c_str(), max_err, tol,
              max_ref, nmse);
  EXPECT_EQ(non_finite, 0) << what << " " << c.name() << ": non-finite outputs (unwritten or NaN read)";
  EXPECT_EQ(bad_zero, 0) << what << " " << c.name() << ": queries that see no slot must get exact zeros";
  EXPECT_LE(max_err, tol) << what << " " << c.name();
  EXPECT_LE(nmse, nmse_tol) << what << " " << c.name();
}

[[nodiscard]] bool download(std::vector<float>& out, const DevBuf& b, size_t n) {
  out.resize(n);
  const cudaError_t e = cudaMemcpy(out.data(), b.p, n * 4, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) ADD_FAILURE() << "download: " << cudaGetErrorString(e);
  return e == cudaSuccess;
}

constexpr double kPrefillRel = 2e-2, kPrefillAbs = 1e-3, kPrefillNmse = 1e-4;
constexpr double kDecodeRel = 1e-3, kDecodeAbs = 1e-4, kDecodeNmse = 1e-8;

void run_prefill(const Case& c) {
  const Inputs in = make_inputs(c);
  std::vector<float> ref, out;
  ASSERT_TRUE(reference(c, in, ref));
  DevInputs d;
  ASSERT_TRUE(to_device(c, in, d));
  const Status st = cuda::attention_prefill(d.p, c.n_kv, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(download(out, d.out, ref.size()));
  compare(c, in, out, ref, kPrefillRel, kPrefillAbs, kPrefillNmse, "prefill");
}

// One attention_decode of c against the reference (outputs hashed with LITHE_TEST_ATTN_HASH set);
// `merged` (if given): whether any partial was written to the scratch past the counters. A single
// query also asks for the per-head ready flags (AttentionParams::ready, left at 7 before): every
// head's must read 1 after.
void run_decode(const Case& c, bool* merged) {
  const Inputs in = make_inputs(c);
  std::vector<float> ref, out;
  ASSERT_TRUE(reference(c, in, ref));
  DevInputs d;
  ASSERT_TRUE(to_device(c, in, d));
  DevBuf work, ready;
  const size_t work_bytes = cuda::attention_decode_work_bytes(d.p);
  ASSERT_TRUE(alloc_work(work, work_bytes));
  std::vector<unsigned> flags(static_cast<size_t>(c.n_heads), 7u);
  if (c.n_q == 1) {
    CUDA_OK(cudaMalloc(&ready.p, flags.size() * 4));
    CUDA_OK(cudaMemcpy(ready.p, flags.data(), flags.size() * 4, cudaMemcpyHostToDevice));
    d.p.ready = ready.as<unsigned>();
  }
  const Status st = cuda::attention_decode(d.p, work.p, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(download(out, d.out, ref.size()));
  if (c.n_q == 1) {
    CUDA_OK(cudaMemcpy(flags.data(), ready.p, flags.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::count(flags.begin(), flags.end(), 1u), c.n_heads) << "ready flags not all set";
  }
  compare(c, in, out, ref, kDecodeRel, kDecodeAbs, kDecodeNmse, "decode");
  expect_counters_zero(work, "decode");
  cuda_test::print_hash_if("LITHE_TEST_ATTN_HASH", "attn hash", c.name(), c.n_q, out);
  if (merged != nullptr) {
    std::vector<unsigned char> parts(work_bytes - cuda::kDecodeCounterBytes);
    CUDA_OK(cudaMemcpy(parts.data(), work.as<char>() + cuda::kDecodeCounterBytes, parts.size(), cudaMemcpyDeviceToHost));
    *merged = std::any_of(parts.begin(), parts.end(), [](unsigned char b) { return b != 0xff; });
  }
}
void run_decode(const Case& c) { run_decode(c, nullptr); }

constexpr std::pair<int64_t, int64_t> kHeads[] = {{9, 3}, {32, 32}, {32, 8}, {4, 1}};

// Every (head_dim, cache type, grouping) gets 3 (n_q, n_kv) pairs, rotating through `sizes` so that
// each size meets several groupings; one in four combinations pads the cache rows.
template <size_t N>
void sweep(const std::pair<int64_t, int64_t> (&sizes)[N], void (*run)(const Case&), uint32_t seed0) {
  int combo = 0;
  for (int64_t dim : {64, 128})
    for (cuda::KvType kv : {cuda::KvType::f16, cuda::KvType::f32})
      for (const auto& [nh, nkv] : kHeads) {
        for (int k = 0; k < 3; ++k) {
          const auto [n_q, n_kv] = sizes[(3 * combo + k + combo / 4) % N];
          Case c;
          c.n_heads = nh;
          c.n_kv_heads = nkv;
          c.head_dim = dim;
          c.n_q = n_q;
          c.n_kv = n_kv;
          c.kv = kv;
          c.extra_stride = (combo % 4 == 1 && k == 0) ? 24 : 0;
          c.seed = seed0 + static_cast<uint32_t>(10 * combo + k);
          SCOPED_TRACE(c.name());
          run(c);
          if (::testing::Test::HasFatalFailure()) return;
        }
        ++combo;
      }
}

}  // namespace

TEST(CudaAttention, PrefillMatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // n_q in {9, 17, 64, 65, 130, 300}, n_kv in {1, 7, 63, 64, 65, 129, 513, 1000}; sequential
  // positions q_pos = n_kv - n_q + t (where n_q > n_kv the first queries see nothing).
  constexpr std::pair<int64_t, int64_t> sizes[] = {{9, 63}, {17, 1000}, {64, 64},  {65, 129}, {130, 513},  {300, 300},
                                                   {9, 1},  {17, 7},    {64, 513}, {65, 65},  {130, 1000}, {300, 1000}};
  sweep(sizes, run_prefill, 1000);
}

TEST(CudaAttention, DecodeMatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // n_q in {1, 2, 3, 5, 8}, n_kv in {1, 7, 63, 64, 65, 129, 513, 1000, 2049}.
  constexpr std::pair<int64_t, int64_t> sizes[] = {{1, 1},    {2, 7},    {3, 63},   {5, 64},   {8, 65},
                                                   {1, 129},  {2, 513},  {3, 1000}, {5, 2049}, {8, 1},
                                                   {1, 2049}, {8, 1000}, {3, 7},    {5, 513},  {2, 64}};
  sweep(sizes, run_decode, 2000);
}

TEST(CudaAttention, ScrambledPositionsAndBlindQueries) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct S {
    int64_t nh, nkv, dim, n_q_prefill, n_q_decode, n_kv;
    cuda::KvType kv;
  };
  const S cases[] = {{9, 3, 64, 70, 5, 300, cuda::KvType::f16},
                     {32, 8, 128, 130, 8, 1000, cuda::KvType::f32},
                     {4, 1, 128, 9, 1, 129, cuda::KvType::f16},
                     {32, 32, 64, 65, 3, 513, cuda::KvType::f32}};
  uint32_t seed = 3000;
  for (const S& s : cases)
    for (bool prefill : {true, false}) {
      Case c;
      c.n_heads = s.nh;
      c.n_kv_heads = s.nkv;
      c.head_dim = s.dim;
      c.n_q = prefill ? s.n_q_prefill : s.n_q_decode;
      c.n_kv = s.n_kv;
      c.kv = s.kv;
      c.pos = Positions::scrambled;
      c.seed = seed++;
      SCOPED_TRACE(c.name());
      if (prefill)
        run_prefill(c);
      else
        run_decode(c);
      if (HasFatalFailure()) return;
    }
}

// A context of up to two tiles (a tile: 64 slots of f16 at D = 128, 128 at D = 64;
// LITHE_ATTN_SINGLE_TILES sets the count) is finished by split 0's block alone, without partials or
// merge; one slot more takes the split and the merge. Both match the reference (and give the bits of
// LITHE_ATTN_SINGLE=0, which merges always: checked by hashes, bench/gq_device_run.sh attn_single).
TEST(CudaAttention, DecodeOfAShortContextSkipsTheMerge) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const bool single_on = !cuda_test::knob_off("LITHE_ATTN_SINGLE");
  const int64_t tiles = cuda_test::knob_int("LITHE_ATTN_SINGLE_TILES", 2);  // (attention_decode.cu: kSingleTiles)
  struct S {
    int64_t nh, nkv, dim, n_q, tile;
  };
  for (const S s : {S{32, 32, 128, 1, 64}, S{9, 3, 64, 2, 128}, S{32, 8, 128, 8, 64}})
    for (const int64_t n_kv : {int64_t{1}, s.tile, s.tile + 1, 2 * s.tile, 2 * s.tile + 1}) {
      Case c;
      c.n_heads = s.nh;
      c.n_kv_heads = s.nkv;
      c.head_dim = s.dim;
      c.n_q = s.n_q;
      c.n_kv = n_kv;
      c.extra_capacity = 4000;  // the split count follows the capacity: many splits
      c.seed = static_cast<uint32_t>(5000 + n_kv);
      SCOPED_TRACE(c.name());
      bool merged = false;
      run_decode(c, &merged);
      if (HasFatalFailure()) return;
      EXPECT_EQ(merged, n_kv > tiles * s.tile || !single_on) << "partials written to the scratch";
    }
}

// Capture attention_decode once with *n_kv = 100, replay, then grow the cache to 300 slots (new
// K/V rows, positions, query) by writing device memory only, replay, and check both results.
TEST(CudaAttention, DecodeReplaysFromAGraphAsTheCacheGrows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Case c;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.n_q = 2;
  c.n_kv = 300;  // allocation: every slot of the final state; capacity 512
  c.extra_capacity = 212;
  c.kv = cuda::KvType::f16;
  c.seed = 4000;
  Inputs full = make_inputs(c);  // sequential positions, q_pos = 298, 299
  DevInputs d;
  ASSERT_TRUE(to_device(c, full, d));

  // First state: 100 slots, queries at 98 and 99; slots >= 100 are NaN on the device.
  Case c1 = c;
  c1.n_kv = 100;
  c1.extra_capacity = 412;
  Inputs first = full;
  for (int64_t t = 0; t < c.n_q; ++t) first.q_pos[t] = static_cast<int32_t>(c1.n_kv - c.n_q + t);
  count_visible(c1, first);
  {
    const size_t row_bytes = static_cast<size_t>(c.stride()) * 2, kept = 100 * row_bytes;
    std::vector<uint16_t> nan(static_cast<size_t>((c.capacity() - 100) * c.stride()), 0x7e00);
    CUDA_OK(cudaMemcpy(d.k.as<char>() + kept, nan.data(), nan.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.v.as<char>() + kept, nan.data(), nan.size() * 2, cudaMemcpyHostToDevice));
  }
  const int32_t n_kv1 = 100;
  CUDA_OK(cudaMemcpy(d.n_kv.p, &n_kv1, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.q_pos.p, first.q_pos.data(), first.q_pos.size() * 4, cudaMemcpyHostToDevice));

  DevBuf work;
  ASSERT_TRUE(alloc_work(work, cuda::attention_decode_work_bytes(d.p)));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status st = cuda::attention_decode(d.p, work.p, stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  CUDA_OK(end);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<float> ref, out;
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  ASSERT_TRUE(reference(c1, first, ref));
  ASSERT_TRUE(download(out, d.out, ref.size()));
  compare(c1, first, out, ref, kDecodeRel, kDecodeAbs, kDecodeNmse, "graph1");

  // Grow: rows 100..299 (the rest of `full`), *n_kv = 300, queries at 298 and 299.
  {
    const size_t row_bytes = static_cast<size_t>(c.stride()) * 2, off = 100 * row_bytes, n = 200 * row_bytes;
    CUDA_OK(cudaMemcpy(d.k.as<char>() + off, reinterpret_cast<const char*>(full.k16.data()) + off, n,
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.v.as<char>() + off, reinterpret_cast<const char*>(full.v16.data()) + off, n,
                       cudaMemcpyHostToDevice));
  }
  const int32_t n_kv2 = 300;
  CUDA_OK(cudaMemcpy(d.n_kv.p, &n_kv2, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.q_pos.p, full.q_pos.data(), full.q_pos.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d.out.p, 0xff, ref.size() * 4));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  ASSERT_TRUE(reference(c, full, ref));
  ASSERT_TRUE(download(out, d.out, ref.size()));
  compare(c, full, out, ref, kDecodeRel, kDecodeAbs, kDecodeNmse, "graph2");
  expect_counters_zero(work, "graph2");

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The in-kernel merge's counters across launches: one scratch buffer serves a captured decode
// (32/8 heads, n_q 8: 2 row groups per kv head, many splits) replayed 6 times back to back, then
// eager calls of other shapes (one split; 9/3 heads, n_q 5), then the graph again. Every result
// is checked and the counters must be zero after each phase.
TEST(CudaAttention, DecodeMergeCountersResetAcrossReplaysAndShapes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Case a;
  a.n_heads = 32;
  a.n_kv_heads = 8;
  a.head_dim = 128;
  a.n_q = 8;
  a.n_kv = 700;
  a.kv = cuda::KvType::f16;
  a.seed = 4100;
  Case b = a;  // capacity 38: a single split
  b.n_kv = 1;
  b.extra_capacity = 37;
  b.n_q = 1;
  b.seed = 4101;
  Case c = a;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.n_q = 5;
  c.n_kv = 129;
  c.kv = cuda::KvType::f32;
  c.seed = 4102;
  const Inputs ia = make_inputs(a), ib = make_inputs(b), ic = make_inputs(c);
  std::vector<float> ra, rb, rc, out;
  ASSERT_TRUE(reference(a, ia, ra) && reference(b, ib, rb) && reference(c, ic, rc));
  DevInputs da, db, dc;
  ASSERT_TRUE(to_device(a, ia, da) && to_device(b, ib, db) && to_device(c, ic, dc));
  const size_t bytes = std::max({cuda::attention_decode_work_bytes(da.p), cuda::attention_decode_work_bytes(db.p),
                                 cuda::attention_decode_work_bytes(dc.p)});
  DevBuf work;
  ASSERT_TRUE(alloc_work(work, bytes));

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status st = cuda::attention_decode(da.p, work.p, stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  CUDA_OK(end);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  auto replay = [&](int times, const char* what) {
    CUDA_OK(cudaMemset(da.out.p, 0xff, ra.size() * 4));
    for (int i = 0; i < times; ++i) CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_TRUE(download(out, da.out, ra.size()));
    compare(a, ia, out, ra, kDecodeRel, kDecodeAbs, kDecodeNmse, what);
    expect_counters_zero(work, what);
  };
  replay(6, "replays");
  for (auto [cs, is, ds, rs] : {std::tuple{&b, &ib, &db, &rb}, std::tuple{&c, &ic, &dc, &rc}}) {
    for (int i = 0; i < 2; ++i) {
      const Status s2 = cuda::attention_decode(ds->p, work.p, stream);
      ASSERT_TRUE(s2.is_ok()) << s2.to_string();
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_TRUE(download(out, ds->out, rs->size()));
    compare(*cs, *is, out, *rs, kDecodeRel, kDecodeAbs, kDecodeNmse, "other shape");
    expect_counters_zero(work, "other shape");
  }
  replay(2, "replays after");

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(CudaAttention, RejectsBadArguments) {
  cuda::AttentionParams p;
  alignas(16) static float dummy[64];
  alignas(16) static int32_t idummy[4];
  p.q = dummy;
  p.out = dummy;
  p.q_pos = idummy;
  p.n_kv = idummy;
  p.k = dummy;
  p.v = dummy;
  p.kv_pos = idummy;
  p.n_q = 1;
  p.kv_capacity = 1;
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 96;
  p.kv_stride = 2 * 96;
  p.scale = 0.1f;
  EXPECT_EQ(cuda::attention_decode(p, dummy, nullptr).code(), StatusCode::invalid_argument);  // head_dim
  EXPECT_EQ(cuda::attention_prefill(p, 1, nullptr).code(), StatusCode::invalid_argument);
  p.head_dim = 64;
  p.kv_stride = 2 * 64 + 1;  // not 16-byte rows
  EXPECT_EQ(cuda::attention_decode(p, dummy, nullptr).code(), StatusCode::invalid_argument);
  p.kv_stride = 2 * 64;
  p.n_q = cuda::kDecodeMaxQueries + 1;
  EXPECT_EQ(cuda::attention_decode(p, dummy, nullptr).code(), StatusCode::invalid_argument);
  p.n_q = 2;
  p.ready = reinterpret_cast<unsigned*>(idummy);  // ready flags need n_q = 1
  EXPECT_EQ(cuda::attention_decode(p, dummy, nullptr).code(), StatusCode::invalid_argument);
  p.ready = nullptr;
  p.n_q = 1;
  p.n_kv_heads = 3;  // 4 % 3 != 0
  EXPECT_EQ(cuda::attention_prefill(p, 1, nullptr).code(), StatusCode::invalid_argument);
  p.n_kv_heads = 2;
  EXPECT_EQ(cuda::attention_prefill(p, 2, nullptr).code(), StatusCode::invalid_argument);  // n_kv > capacity
}

// ---- timings (not run by default) ---------------------------------------------------------------

namespace {
// Mean milliseconds per call of f(i, stream), measured on `iters` calls captured in one CUDA graph
// (no host launch overhead in the figure), after 3 eager warm-up calls. Empty `err` on success.
template <typename F>
float time_graph_ms(int iters, std::string& err, F&& f) {
  cudaStream_t s = nullptr;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  float ms = 0;
  auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && err.empty()) err = std::string(what) + ": " + cudaGetErrorString(e);
    return e == cudaSuccess;
  };
  if (check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") && check(cudaEventCreate(&a), "event") &&
      check(cudaEventCreate(&b), "event")) {
    for (int i = 0; i < 3; ++i) f(i, s);
    if (check(cudaStreamSynchronize(s), "warm-up") &&
        check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture")) {
      for (int i = 0; i < iters; ++i) f(i, s);
      if (check(cudaStreamEndCapture(s, &g), "end capture") && check(cudaGraphInstantiate(&ge, g, 0), "instantiate") &&
          check(cudaGraphLaunch(ge, s), "launch") && check(cudaEventRecord(a, s), "record") &&
          check(cudaGraphLaunch(ge, s), "launch") && check(cudaEventRecord(b, s), "record") &&
          check(cudaEventSynchronize(b), "sync"))
        check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    }
  }
  if (ge != nullptr) cudaGraphExecDestroy(ge);
  if (g != nullptr) cudaGraphDestroy(g);
  if (a != nullptr) cudaEventDestroy(a);
  if (b != nullptr) cudaEventDestroy(b);
  if (s != nullptr) cudaStreamDestroy(s);
  return ms / static_cast<float>(iters);
}
}  // namespace

TEST(CudaAttention, DISABLED_PerfPrefill) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (cuda::KvType kv : {cuda::KvType::f16, cuda::KvType::f32})
    for (int64_t dim : {128, 64})
      for (int64_t n : {512, 2048, 8192}) {
        Case c;
        c.n_heads = 32;
        c.n_kv_heads = 8;
        c.head_dim = dim;
        c.n_q = n;
        c.n_kv = n;
        c.extra_capacity = 0;
        c.kv = kv;
        const Inputs in = make_inputs(c);
        DevInputs d;
        ASSERT_TRUE(to_device(c, in, d));
        std::string err;
        const float ms = time_graph_ms(10, err, [&](int, cudaStream_t s) {
          const Status st = cuda::attention_prefill(d.p, c.n_kv, s);
          if (!st.is_ok()) err = st.to_string();
        });
        ASSERT_TRUE(err.empty()) << err;
        CUDA_OK(cudaDeviceSynchronize());
        const double flops = 4.0 * n * n * dim * c.n_heads / 2;  // causal
        std::printf("prefill %s D %3lld heads 32/8 n %5lld: %8.1f us  %6.1f TFLOP/s\n",
                    kv == cuda::KvType::f16 ? "f16" : "f32", static_cast<long long>(dim), static_cast<long long>(n),
                    ms * 1e3, flops / (ms * 1e-3) / 1e12);
      }
}

TEST(CudaAttention, DISABLED_PerfDecode) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  constexpr int kCopies = 4;  // rotate through caches larger than L2 together
  for (cuda::KvType kv : {cuda::KvType::f16, cuda::KvType::f32})
    for (const auto& [nh, nkv] : {std::pair<int64_t, int64_t>{32, 32}, {32, 8}})
      for (int64_t n_kv : {512, 4096, 16384})
        for (int64_t n_q : {1, 8}) {
          Case c;
          c.n_heads = nh;
          c.n_kv_heads = nkv;
          c.head_dim = 128;
          c.n_q = n_q;
          c.n_kv = n_kv;
          c.extra_capacity = 0;
          c.kv = kv;
          const Inputs in = make_inputs(c);
          DevInputs d[kCopies];
          DevBuf work[kCopies];
          for (int i = 0; i < kCopies; ++i) {
            ASSERT_TRUE(to_device(c, in, d[i]));
            ASSERT_TRUE(alloc_work(work[i], cuda::attention_decode_work_bytes(d[i].p)));
          }
          std::string err;
          const float ms = time_graph_ms(50, err, [&](int i, cudaStream_t s) {
            const Status st = cuda::attention_decode(d[i % kCopies].p, work[i % kCopies].p, s);
            if (!st.is_ok()) err = st.to_string();
          });
          ASSERT_TRUE(err.empty()) << err;
          CUDA_OK(cudaDeviceSynchronize());
          const double bytes = 2.0 * static_cast<double>(n_kv) * c.stride() * (kv == cuda::KvType::f16 ? 2 : 4);
          std::printf("decode %s D 128 heads %lld/%lld n_q %lld ctx %6lld: %8.2f us  %7.1f GB/s (K+V read)\n",
                      kv == cuda::KvType::f16 ? "f16" : "f32", static_cast<long long>(nh), static_cast<long long>(nkv),
                      static_cast<long long>(n_q), static_cast<long long>(n_kv), ms * 1e3, bytes / (ms * 1e-3) / 1e9);
        }
}

// Batch invariance of cpu::linear: row i of linear(w, x, m) must equal, bit for bit, the output of
// linear(w, x_i, 1), whatever m is and however the output rows are split over threads. The
// server batches sequences into one forward pass, so this is what makes a sequence's logits
// independent of the other sequences in its pass.
//
// Covered: every weight kind (f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q6_k; gq int2/3/4/8, sym and
// asym, block-mode groups (32, 64), groups of 128 / 256, per channel, with and without act-order),
// every gq activation mode (int8, int16, f32), every ISA this machine has, 1 thread and 2 threads
// with the split forced on; m in {1..12, 33} (the matrix-vector path, the register-tiled path and
// its partial tiles), with and without a batch layout; n_out odd (no multiple of any tile or batch height) and n_in with ragged
// tails of every chunk / unit size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "lithe/core/half.h"
#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/group_quant.h"

namespace lithe::cpu {
namespace {

// The kernel knobs and the pool size (the tests force 1 and 2 threads) back to their defaults.
struct Restore : KernelKnobsRestore {
  ~Restore() { set_num_threads(0); }
};

const int64_t kBatches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 33};
constexpr int64_t kRows = 33;  // activation rows: the largest batch

// N(0, 1) activations; per row some blocks of 32 scaled by 50 or 1e-3, one block zeroed, and
// row 7 all zeros (scale 0 in every activation block).
std::vector<float> random_acts(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kRows * n));
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / 32;
      float s = (r + b) % 5 == 2 ? 50.0f : (r + b) % 7 == 4 ? 1e-3f : 1.0f;
      if (b == r % (n / 32 + 1) || r == 7) s = 0.0f;
      x[static_cast<size_t>(r * n + i)] = nd(rng) * s;
    }
  return x;
}

// A GGUF-kind weight [n_out, n_in]: random block bytes with small random f16 scales / mins (every
// quant pattern), or N(0, 1) floats for the float kinds.
Tensor random_weight(DType t, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  Tensor w = Tensor::empty(t, {n_out, n_in}).value();
  auto* p = static_cast<uint8_t*>(w.data());
  const auto& tr = dtype_traits(t);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> small(-0.02f, 0.02f);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto put16 = [](uint8_t* d, uint16_t v) { std::memcpy(d, &v, 2); };
  if (tr.is_block) {
    for (size_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<uint8_t>(byte(rng));
    // f16 fields of a block: q4_0 / q8_0 d; q4_1 / q4_k d, m; q6_k d (at 208)
    std::vector<int> fields = {t == DType::q6_k ? 208 : 0};
    if (t == DType::q4_1 || t == DType::q4_k) fields.push_back(2);
    for (size_t b = 0; b < w.nbytes() / static_cast<size_t>(tr.block_bytes); ++b)
      for (int f : fields) put16(p + b * tr.block_bytes + f, f32_to_f16(small(rng)));
  } else {
    for (int64_t i = 0; i < n_out * n_in; ++i) {
      const float v = nd(rng);
      if (t == DType::f32) std::memcpy(p + 4 * i, &v, 4);
      else put16(p + 2 * i, t == DType::f16 ? f32_to_f16(v) : f32_to_bf16(v));
    }
  }
  return w;
}

// For the active ISA / gq mode: each row's solo output (m = 1, one thread), then every batch size
// on 1 and 2 threads; every row must match its solo output exactly.
void expect_invariant(const Tensor& w, const std::vector<float>& x, int64_t n_out, int64_t n_in, const std::string& what) {
  std::vector<float> solo(static_cast<size_t>(kRows * n_out));
  set_num_threads(1);
  force_split(false);
  for (int64_t r = 0; r < kRows; ++r)
    ASSERT_TRUE(linear(w, x.data() + r * n_in, 1, solo.data() + r * n_out).is_ok()) << what;
  std::vector<float> y;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    force_split(threads > 1);
    for (int64_t m : kBatches) {
      y.assign(static_cast<size_t>(m * n_out), std::nanf(""));
      ASSERT_TRUE(linear(w, x.data(), m, y.data()).is_ok()) << what;
      int64_t bad = 0, first = -1;
      for (int64_t r = 0; r < m; ++r)
        if (std::memcmp(y.data() + r * n_out, solo.data() + r * n_out, static_cast<size_t>(n_out) * 4) != 0) {
          ++bad;
          if (first < 0) first = r;
        }
      if (bad == 0) continue;
      int64_t col = 0;
      while (std::memcmp(&y[static_cast<size_t>(first * n_out + col)], &solo[static_cast<size_t>(first * n_out + col)],
                         4) == 0)
        ++col;
      ADD_FAILURE() << what << ", " << threads << " thread(s), m=" << m << ": " << bad << " of " << m
                    << " rows differ from m=1; first: row " << first << " output " << col << ": "
                    << y[static_cast<size_t>(first * n_out + col)] << " vs "
                    << solo[static_cast<size_t>(first * n_out + col)];
    }
  }
}

struct GgufCase {
  DType t;
  int64_t n_out, n_in;
};

// n_in: ragged tails of the float vectors (kVF 8 / 16), of the legacy chunks (64 / 128 values:
// 160, 576), of the AVX-512 superchunks of q4_1 (512 values: a last one of <= 8 groups, 160 and
// 576, of 9-15 groups, 800 and 416, none, 1024) and an odd number of k-quant super-blocks / units
// (768).
const GgufCase kGguf[] = {
    {DType::f32, 37, 200},   {DType::f32, 83, 576},   {DType::f16, 37, 200},   {DType::f16, 83, 100},
    {DType::bf16, 37, 200},  {DType::bf16, 83, 100},  {DType::q4_0, 37, 160},  {DType::q4_0, 83, 576},
    {DType::q4_1, 37, 160},  {DType::q4_1, 83, 576},  {DType::q4_1, 21, 800},  {DType::q4_1, 17, 416},
    {DType::q4_1, 19, 1024}, {DType::q8_0, 37, 160},  {DType::q8_0, 83, 576},
    {DType::q4_k, 37, 768},  {DType::q4_k, 83, 512},  {DType::q6_k, 37, 768},  {DType::q6_k, 83, 512},
};

TEST(CpuBatchInvariance, GgufAndFloatKinds) {
  Restore restore;
  std::mt19937 rng(2026);
  for (const GgufCase& c : kGguf) {
    const Tensor w = random_weight(c.t, c.n_out, c.n_in, rng);
    const auto x = random_acts(c.n_in, rng);
    for (Isa isa : available_isas()) {
      force_isa(isa);
      expect_invariant(w, x, c.n_out, c.n_in,
                       std::string(dtype_name(c.t)) + " [" + std::to_string(c.n_out) + ", " + std::to_string(c.n_in) +
                           "] " + std::string(isa_name(isa)));
    }
  }
}

// A weight with a batch layout (its rows decoded at load for the matrix-matrix path, m > 4) gives
// the same bits as its solo matrix-vector products (which read the GGUF blocks), on every ISA: a
// layout made by another ISA's kernels is ignored, not misread. Views of other rows drop it.
TEST(CpuBatchInvariance, BatchLayoutGivesTheSameBits) {
  Restore restore;
  std::mt19937 rng(2028);
  for (const GgufCase& c : kGguf) {
    const Tensor w = random_weight(c.t, c.n_out, c.n_in, rng);
    const auto x = random_acts(c.n_in, rng);
    const std::string shape = std::string(dtype_name(c.t)) + " [" + std::to_string(c.n_out) + ", " +
                              std::to_string(c.n_in) + "]";
    for (Isa made : available_isas()) {
      force_isa(made);
      auto wb = with_batch_layout(w);
      ASSERT_TRUE(wb.is_ok()) << wb.status().to_string();
      const BatchLayout* b = wb->batch_layout();
      ASSERT_EQ(made != Isa::scalar && dtype_traits(c.t).is_block, b != nullptr) << shape << " " << isa_name(made);
      if (b == nullptr) continue;
      if (c.t == DType::q4_1 && made == Isa::avx512) {  // 640-byte records of 512 weights: 1.25 bytes a weight
        EXPECT_EQ(b->buffer->size(), static_cast<size_t>(c.n_out * 640 * ((c.n_in + 511) / 512))) << shape;
      }
      EXPECT_EQ(nullptr, wb->slice_rows(0, 1)->batch_layout());
      EXPECT_EQ(nullptr, w.batch_layout());  // the input tensor is untouched
      for (Isa isa : available_isas()) {
        force_isa(isa);
        expect_invariant(*wb, x, c.n_out, c.n_in,
                         shape + ", layout made by " + std::string(isa_name(made)) + ", run by " +
                             std::string(isa_name(isa)));
      }
    }
  }
}

const char* acts_name(GqActs a) { return a == GqActs::f32 ? "f32" : a == GqActs::int8 ? "int8" : "int16"; }

TEST(CpuBatchInvariance, GqEveryFormatAndActivationMode) {
  Restore restore;
  std::mt19937 rng(2027);
  struct Group {
    int64_t group;  // 0: per channel
    bool act_order;
  };
  // Block mode (32, 64), one scale per unit (128), an entry over two units (256), per channel; with
  // act-order on some. n_in 576 = 4.5 units (a partial last unit), 384 = 3 whole units.
  const Group groups[] = {{32, false}, {64, true}, {128, false}, {128, true}, {256, false}, {0, true}};
  int k = 0;
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {false, true})
      for (const Group& gr : groups) {
        const int64_t n_in = (k % 2 == 0) ? 576 : 384, n_out = (k % 3 == 0) ? 83 : 37;
        ++k;
        QuantFormat f;
        f.bits = bits;
        f.sym = sym;
        f.group = gr.group == 0 ? n_in : gr.group;
        const gq::Matrix mat = gq::random_matrix(f, n_out, n_in, static_cast<uint64_t>(k), gr.act_order);
        auto packed = pack_gq(mat);
        ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
        const auto x = random_acts(n_in, rng);
        for (Isa isa : available_isas()) {
          force_isa(isa);
          for (GqActs acts : {GqActs::int8, GqActs::int16, GqActs::f32}) {
            force_gq_acts(acts);
            expect_invariant(packed.value(), x, n_out, n_in,
                             format_name(f, n_in) + (gr.act_order ? " act-order" : "") + " [" + std::to_string(n_out) +
                                 ", " + std::to_string(n_in) + "] " + std::string(isa_name(isa)) + ", " +
                                 acts_name(acts) + " acts");
          }
        }
      }
}

}  // namespace
}  // namespace lithe::cpu

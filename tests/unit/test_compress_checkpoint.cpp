// The lithe compressed checkpoint (compress/checkpoint.h): bit packing round trips, writing a
// checkpoint of the tiny llama3 model (tests/data/tiny) with RTN-quantized linears and loading it
// back (Model::load dequantizes on load), and the AutoGPTQ export checked with an independent
// plain-loop unpacker following AutoGPTQ's formula:
//   code(i, o) = (qweight[i / per][o] >> (bits * (i % per))) & maxq,  per = 32 / bits
//   zero(g, o) = ((qzeros[g][o / per] >> (bits * (o % per))) & maxq) + 1
//   W[o][i]    = scales[g_idx[i]][o] * (code(i, o) - zero(g_idx[i], o))
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <cstring>
#include <filesystem>
#include <random>

#include "lithe/models/compressed_export.h"
#include "lithe/compress/rtn.h"
#include "lithe/core/file_util.h"
#include "lithe/core/half.h"
#include "lithe/formats/safetensors.h"
#include "lithe/kernels/convert.h"
#include "lithe/models/model.h"

namespace fs = std::filesystem;
namespace lc = lithe::compress;
using namespace lithe;

namespace {

const char* kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

fs::path tmp_dir(const std::string& name) { return lithe_test::tmp_path("ckpt_" + name); }

// The tiny llama3 model with the test tokenizer, copied into a temp directory.
std::string tiny_model() {
  static const std::string dir = [] {
    const fs::path data = fs::path(LITHE_TEST_DATA) / "tiny";
    const fs::path d = tmp_dir("src");
    fs::remove_all(d);
    fs::create_directories(d);
    for (const char* sub : {"llama3", "tokenizer"})
      for (const auto& e : fs::directory_iterator(data / sub))
        if (e.path().filename() != "golden.json") fs::copy_file(e.path(), d / e.path().filename());
    return d.string();
  }();
  return dir;
}

std::vector<float> tensor_f32(const ModelFile& f, const std::string& name) {
  auto t = f.tensor(name);
  EXPECT_TRUE(t.is_ok()) << name;
  auto c = convert(*t, DType::f32);
  EXPECT_TRUE(c.is_ok());
  return std::vector<float>(c->data_as<float>(), c->data_as<float>() + c->numel());
}

template <typename T>
std::vector<T> raw(const safetensors::File& f, const std::string& name, Shape& shape) {
  auto t = f.tensor(name);
  EXPECT_TRUE(t.is_ok()) << name;
  shape = t->shape();
  std::vector<T> v(t->nbytes() / sizeof(T));
  std::memcpy(v.data(), t->data(), t->nbytes());
  return v;
}

// RTN-quantizes every linear of `m`; permute_groups makes g_idx an act-order-like permutation of groups.
std::vector<lc::CompressedLinear> quantize_all(const Model& m, const lc::QuantGrid& grid, bool permute_groups) {
  std::vector<lc::CompressedLinear> out;
  for (int64_t l = 0; l < m.config().n_layers; ++l)
    for (const char* s : kLinears) {
      lc::CompressedLinear L;
      L.hf_name = "model.layers." + std::to_string(l) + "." + s;
      auto ti = m.file().tensor(L.hf_name + ".weight");
      EXPECT_TRUE(ti.is_ok()) << L.hf_name;
      const int64_t n_out = ti->dim(0), n_in = ti->dim(1);
      auto q = lc::rtn(tensor_f32(m.file(), L.hf_name + ".weight"), n_out, n_in, grid);
      EXPECT_TRUE(q.is_ok()) << q.status().to_string();
      if (permute_groups && grid.group > 0) {  // reversed group order: codes stay, g_idx and grids move
        const int64_t G = q->n_groups();
        for (auto& g : q->g_idx) g = static_cast<int32_t>(G - 1 - g);
        for (int64_t r = 0; r < n_out; ++r) {
          std::reverse(q->scales.begin() + r * G, q->scales.begin() + (r + 1) * G);
          std::reverse(q->zeros.begin() + r * G, q->zeros.begin() + (r + 1) * G);
        }
      }
      L.q = std::move(*q);
      out.push_back(std::move(L));
    }
  return out;
}

lc::CompressionInfo info_of(const lc::QuantGrid& g) {
  lc::CompressionInfo i;
  i.method = "rtn";
  i.bits = g.bits;
  i.group = g.group;
  i.sym = g.sym;
  return i;
}

void round_scales_f16(std::vector<lc::CompressedLinear>& ls) {
  for (auto& L : ls)
    for (float& s : L.q->scales) s = f16_to_f32(f32_to_f16(s));
}

std::vector<float> logits_of(Model& m, const std::vector<int32_t>& ids) {
  auto cache = m.new_cache(32);
  EXPECT_TRUE(cache.is_ok());
  std::vector<float> logits;
  EXPECT_TRUE(m.forward(*cache, ids, true, logits).is_ok());
  return logits;
}

}  // namespace

TEST(CompressCheckpoint, PackUnpackRoundTrip) {
  std::mt19937 rng(7);
  for (int bits : {2, 3, 4, 8})
    for (int64_t cols : {1, 7, 32, 37, 96}) {
      const int64_t rows = 3;
      std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
      const auto w = lc::pack_rows(codes, rows, cols, bits);
      ASSERT_EQ(w.size(), static_cast<size_t>(rows * lc::packed_words(cols, bits)));
      EXPECT_EQ(lc::unpack_rows(w, rows, cols, bits), codes) << bits << " bits, " << cols << " cols";
      std::vector<uint8_t> mask(codes.size());
      for (auto& m : mask) m = rng() & 1u;
      EXPECT_EQ(lc::unpack_mask(lc::pack_mask(mask, rows, cols), rows, cols), mask);
    }
  // 4 bits: 8 codes per word, code c in bits 4*(c%8); 3 bits: code 10 straddles words 0 and 1.
  std::vector<uint8_t> c4 = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto w4 = lc::pack_rows(c4, 1, 9, 4);
  EXPECT_EQ(static_cast<uint32_t>(w4[0]), 0x87654321u);
  EXPECT_EQ(w4[1], 9);
  std::vector<uint8_t> c3(11, 0);
  c3[10] = 7;  // bits 30..32
  const auto w3 = lc::pack_rows(c3, 1, 11, 3);
  EXPECT_EQ(static_cast<uint32_t>(w3[0]), 0xC0000000u);
  EXPECT_EQ(w3[1], 1);
}

TEST(CompressCheckpoint, StoredMatrixRoundTripsExactly) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  for (int bits : {2, 3, 4, 8})
    for (int64_t group : {0, 8, 16, 24})  // 24: a shorter last group (--partial-groups)
      for (bool sym : {false, true}) {
        const lc::QuantGrid grid{.bits = bits, .sym = sym, .group = group, .partial_groups = group == 24};
        auto ls = quantize_all(**m, grid, /*permute_groups=*/group == 8);
        const std::string out = tmp_dir("rt").string();
        lc::CheckpointWriteOptions o;
        o.scale_dtype = DType::f32;
        o.force = true;
        ASSERT_TRUE(lc::write_lithe_checkpoint(**m, ls, info_of(grid), out, o).is_ok());
        auto f = open_model_file(out);
        ASSERT_TRUE(f.is_ok());
        EXPECT_EQ(lc::quant_method(**f), "lithe");
        for (const auto& L : ls) {
          auto q = lc::read_quantized_linear(**f, L.hf_name);
          ASSERT_TRUE(q.is_ok()) << q.status().to_string();
          const std::string what = L.hf_name + " bits " + std::to_string(bits) + " group " + std::to_string(group);
          EXPECT_EQ(q->codes, L.q->codes) << what;
          EXPECT_EQ(q->scales, L.q->scales) << what;
          EXPECT_EQ(q->zeros, L.q->zeros) << what;
          EXPECT_EQ(q->g_idx, L.q->g_idx) << what;
          auto w = lc::read_compressed_linear(**f, L.hf_name);
          ASSERT_TRUE(w.is_ok());
          const auto want = lc::dequantize(*L.q);
          ASSERT_EQ(static_cast<size_t>(w->numel()), want.size());
          EXPECT_EQ(0, std::memcmp(w->data(), want.data(), want.size() * 4)) << what;
        }
      }
}

TEST(CompressCheckpoint, LoadsAndRunsLikeDequantizedModel) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const lc::QuantGrid grid{.bits = 4, .sym = false, .group = 8};
  auto ls = quantize_all(**m, grid, false);
  round_scales_f16(ls);  // the checkpoint stores f16 scales
  // Prune a few weights of one linear to exercise the mask.
  auto& L0 = ls[0];
  L0.mask.assign(L0.q->codes.size(), 1);
  for (size_t i = 0; i < L0.mask.size(); i += 3) L0.mask[i] = 0;
  const std::string out = tmp_dir("q4").string();
  fs::remove_all(out);
  ASSERT_TRUE(lc::write_lithe_checkpoint(**m, ls, info_of(grid), out).is_ok());
  // An existing directory is refused without force.
  auto again = lc::write_lithe_checkpoint(**m, ls, info_of(grid), out);
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.code(), StatusCode::already_exists);
  EXPECT_NE(again.to_string().find("--force"), std::string::npos) << again.to_string();
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out + "/tokenizer.json"));
  auto cfg = read_text_file(out + "/config.json");
  ASSERT_TRUE(cfg.is_ok());
  const auto qc = nlohmann::json::parse(*cfg)["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "lithe");
  EXPECT_EQ(qc["bits"], 4);
  EXPECT_EQ(qc["group_size"], 8);
  EXPECT_EQ(qc["sym"], false);

  // Reference: the same model with the dequantized linears as f32 .weight tensors.
  const fs::path ref = tmp_dir("ref");
  fs::remove_all(ref);
  fs::create_directories(ref);
  for (const char* n : {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    fs::copy_file(fs::path(tiny_model()) / n, ref / n);
  {
    safetensors::Writer w;
    std::vector<std::vector<float>> keep;
    keep.reserve(ls.size());
    for (const auto& ti : (*m)->file().tensors()) {
      const lc::CompressedLinear* hit = nullptr;
      for (const auto& L : ls)
        if (L.hf_name + ".weight" == ti.name) hit = &L;
      if (hit == nullptr) {
        auto t = (*m)->file().tensor(ti.name);
        ASSERT_TRUE(w.add_tensor(ti.name, *t).is_ok());
        continue;
      }
      keep.push_back(lc::dequantize(*hit->q));
      if (!hit->mask.empty())
        for (size_t i = 0; i < keep.back().size(); ++i) keep.back()[i] = hit->mask[i] != 0 ? keep.back()[i] : 0.0f;
      ASSERT_TRUE(w.add_tensor(ti.name, DType::f32, ti.shape,
                               {reinterpret_cast<const uint8_t*>(keep.back().data()), keep.back().size() * 4})
                      .is_ok());
    }
    ASSERT_TRUE(w.write((ref / "model.safetensors").string()).is_ok());
  }
  auto qm = Model::load(out);
  ASSERT_TRUE(qm.is_ok()) << qm.status().to_string();
  auto rm = Model::load(ref.string());
  ASSERT_TRUE(rm.is_ok()) << rm.status().to_string();
  auto f = open_model_file(out);
  ASSERT_TRUE(f.is_ok());
  for (const auto& L : ls) {
    auto w = lc::read_compressed_linear(**f, L.hf_name);
    ASSERT_TRUE(w.is_ok());
    auto want = lc::dequantize(*L.q);
    if (!L.mask.empty())
      for (size_t i = 0; i < want.size(); ++i) want[i] = L.mask[i] != 0 ? want[i] : 0.0f;
    EXPECT_EQ(0, std::memcmp(w->data(), want.data(), want.size() * 4)) << L.hf_name;
  }
  const std::vector<int32_t> ids = {1, 450, 4996, 17354, 1701};
  const auto a = logits_of(**qm, ids), b = logits_of(**rm, ids), src = logits_of(**m, ids);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0, max_src = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(a[i] - b[i])));
    max_src = std::max(max_src, static_cast<double>(std::abs(a[i] - src[i])));
  }
  EXPECT_LE(max_diff, 1e-5);
  std::printf("q4 g8 checkpoint vs dequantized-in-memory: max |diff| %.3e; vs the f16 source %.3e\n", max_diff, max_src);
}

TEST(CompressCheckpoint, GptqExportLayout) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  for (const auto& grid : {lc::QuantGrid{.bits = 4, .sym = true, .group = 8}, lc::QuantGrid{.bits = 8, .sym = true, .group = 0},
                           lc::QuantGrid{.bits = 4, .sym = true, .group = 16}}) {
    auto ls = quantize_all(**m, grid, grid.group == 16);
    round_scales_f16(ls);
    const std::string src = tmp_dir("gsrc").string(), out = tmp_dir("gptq").string();
    lc::CheckpointWriteOptions wo;
    wo.force = true;
    lc::CompressionInfo info = info_of(grid);
    info.act_order = grid.group == 16;
    ASSERT_TRUE(lc::write_lithe_checkpoint(**m, ls, info, src, wo).is_ok());
    auto f = open_model_file(src);
    ASSERT_TRUE(f.is_ok());
    fs::remove_all(out);
    auto r = lc::export_gptq(**f, out, false);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->linears, static_cast<int>(ls.size()));
    EXPECT_FALSE(lc::export_gptq(**f, out, false).is_ok());  // exists, no force

    auto qcfg = read_text_file(out + "/quantize_config.json");
    ASSERT_TRUE(qcfg.is_ok());
    const auto qc = nlohmann::json::parse(*qcfg);
    EXPECT_EQ(qc["bits"], grid.bits);
    EXPECT_EQ(qc["group_size"], grid.group == 0 ? -1 : grid.group);
    EXPECT_EQ(qc["desc_act"], info.act_order);
    EXPECT_EQ(qc["checkpoint_format"], "gptq");
    EXPECT_EQ(qc["quant_method"], "gptq");

    auto st = safetensors::File::open(out + "/model.safetensors");
    ASSERT_TRUE(st.is_ok()) << st.status().to_string();
    const int bits = grid.bits, per = 32 / bits;
    const uint32_t maxq = (1u << bits) - 1;
    for (const auto& L : ls) {
      const auto& q = *L.q;
      const int64_t G = q.n_groups();
      Shape sqw, sqz, ssc, sgi;
      const auto qw = raw<uint32_t>(*st, L.hf_name + ".qweight", sqw);
      const auto qz = raw<uint32_t>(*st, L.hf_name + ".qzeros", sqz);
      const auto sc = raw<uint16_t>(*st, L.hf_name + ".scales", ssc);
      const auto gi = raw<int32_t>(*st, L.hf_name + ".g_idx", sgi);
      ASSERT_EQ(sqw, (Shape{q.n_in * bits / 32, q.n_out}));
      ASSERT_EQ(sqz, (Shape{G, q.n_out * bits / 32}));
      ASSERT_EQ(ssc, (Shape{G, q.n_out}));
      ASSERT_EQ(gi, q.g_idx);
      EXPECT_EQ(st->find_tensor(L.hf_name + ".weight"), nullptr);
      for (int64_t o = 0; o < q.n_out; ++o) {
        for (int64_t i = 0; i < q.n_in; ++i) {
          const uint32_t code = (qw[static_cast<size_t>((i / per) * q.n_out + o)] >> (bits * (i % per))) & maxq;
          ASSERT_EQ(code, q.codes[static_cast<size_t>(o * q.n_in + i)]) << L.hf_name;
        }
        for (int64_t g = 0; g < G; ++g) {
          const uint32_t zero = ((qz[static_cast<size_t>(g * (q.n_out / per) + o / per)] >> (bits * (o % per))) & maxq) + 1;
          ASSERT_EQ(static_cast<float>(zero), q.zeros[static_cast<size_t>(o * G + g)]) << L.hf_name;
          ASSERT_EQ(f16_to_f32(sc[static_cast<size_t>(g * q.n_out + o)]), q.scales[static_cast<size_t>(o * G + g)]);
        }
      }
    }
    // The gptq directory loads (same read path) and runs like the lithe checkpoint.
    auto a = Model::load(src), b = Model::load(out);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
    EXPECT_EQ(logits_of(**a, {1, 2, 3}), logits_of(**b, {1, 2, 3}));
  }
}

TEST(CompressCheckpoint, GptqExportRefusesOtherBits) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.is_ok());
  const lc::QuantGrid grid{.bits = 3, .sym = true, .group = 16};
  auto ls = quantize_all(**m, grid, false);
  const std::string src = tmp_dir("q3").string();
  lc::CheckpointWriteOptions o;
  o.force = true;
  ASSERT_TRUE(lc::write_lithe_checkpoint(**m, ls, info_of(grid), src, o).is_ok());
  auto f = open_model_file(src);
  ASSERT_TRUE(f.is_ok());
  auto r = lc::export_gptq(**f, tmp_dir("q3gptq").string(), true);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("3 bits"), std::string::npos) << r.status().to_string();
  // A 3-bit lithe checkpoint still loads.
  EXPECT_TRUE(Model::load(src).is_ok());
  // Mismatched metadata is refused.
  lc::CompressionInfo bad = info_of(grid);
  bad.bits = 4;
  EXPECT_FALSE(lc::write_lithe_checkpoint(**m, ls, bad, src, o).is_ok());
}

TEST(CompressCheckpoint, PrunedOnlyLinearIsStoredDenseWithMask) {
  auto m = Model::load(tiny_model());
  ASSERT_TRUE(m.is_ok());
  lc::CompressedLinear L;
  L.hf_name = "model.layers.1.mlp.down_proj";
  L.dense_f32 = tensor_f32((*m)->file(), L.hf_name + ".weight");
  L.n_out = 16;
  L.n_in = 48;
  L.mask.assign(L.dense_f32.size(), 1);
  for (size_t i = 0; i < L.mask.size(); i += 2) {  // 2:4-like: every other weight pruned
    L.mask[i] = 0;
    L.dense_f32[i] = 0.0f;
  }
  lc::CompressionInfo info;
  info.method = "sparsegpt";
  info.bits = 0;
  info.n = 2;
  info.m = 4;
  info.calibration = lc::CalibrationInfo{"wiki.txt", 128, 2048, 0};
  const std::string out = tmp_dir("pruned").string();
  lc::CheckpointWriteOptions o;
  o.force = true;
  o.dtype = DType::f32;
  ASSERT_TRUE(lc::write_lithe_checkpoint(**m, {L}, info, out, o).is_ok());
  auto f = open_model_file(out);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(tensor_f32(**f, L.hf_name + ".weight"), L.dense_f32);
  auto st = safetensors::File::open(out + "/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  Shape s;
  EXPECT_EQ(lc::unpack_mask(raw<uint8_t>(*st, L.hf_name + ".mask", s), 16, 48), L.mask);
  EXPECT_EQ(s, (Shape{16, 6}));
  const auto qc = (*f)->config()["quantization_config"];
  EXPECT_EQ(qc["n_m"], "2:4");
  EXPECT_EQ(qc["calibration"]["nsamples"], 128);
  EXPECT_TRUE(Model::load(out).is_ok());
}

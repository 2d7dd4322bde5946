// Writers of compressed checkpoints: the lithe checkpoint of a loaded model and its AutoGPTQ
// export (layouts in compress/checkpoint.h). Here, not in lithe_compress, because they reuse the
// models' Hugging Face export (config, tensor names, tokenizer, atomic directory).
#include "lithe/models/compressed_export.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>

#include "lithe/core/file_util.h"
#include "lithe/core/half.h"
#include "lithe/core/log.h"
#include "lithe/formats/gguf.h"
#include "lithe/formats/safetensors.h"
#include "lithe/kernels/convert.h"
#include "lithe/models/hf_export.h"
#include "lithe/models/llama_names.h"
#include "lithe/models/model.h"
#include "lithe/models/tokenizer_export.h"

namespace lithe::compress {
namespace {

// GGUF stores llama q/k rows permuted for its RoPE layout; the HF-style checkpoint wants them in
// HF order. Rows are independent in every solver (codes, per-row scales and zeros, mask rows), so
// moving whole rows is exact. The row map is the tensor permutation applied to row indices.
Status unpermute_linear_rows(CompressedLinear& L, int64_t n_heads) {
  const int64_t n_out = L.q ? L.q->n_out : L.n_out, n_in = L.q ? L.q->n_in : L.n_in;
  LITHE_ASSIGN(Tensor idx, Tensor::empty(DType::f32, {n_out, 1}));
  for (int64_t r = 0; r < n_out; ++r) idx.data_as<float>()[r] = static_cast<float>(r);
  LITHE_ASSIGN(Tensor src, unpermute_rope_rows(idx, n_heads));
  auto move_rows = [&](auto& v, int64_t width) {
    auto old = v;
    for (int64_t r = 0; r < n_out; ++r) {
      const auto from = static_cast<int64_t>(src.data_as<float>()[r]);
      std::copy_n(old.begin() + from * width, width, v.begin() + r * width);
    }
  };
  if (L.q) {
    move_rows(L.q->codes, n_in);
    move_rows(L.q->scales, L.q->n_groups());
    move_rows(L.q->zeros, L.q->n_groups());
  }
  if (!L.mask.empty()) move_rows(L.mask, n_in);
  if (!L.dense_f32.empty()) move_rows(L.dense_f32, n_in);
  return Status::ok();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Adds tensors widest element first, so every tensor of the file stays aligned to its element.
Status add_aligned(safetensors::Writer& w, std::vector<std::pair<std::string, Tensor>>& out) {
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return dtype_traits(a.second.dtype()).block_bytes > dtype_traits(b.second.dtype()).block_bytes;
  });
  LITHE_TRY(w.set_metadata("format", "pt"));
  for (const auto& [name, t] : out) LITHE_TRY(w.add_tensor(name, t));
  return Status::ok();
}

// Each compressed linear must be self-consistent and match `info` (the config describes all).
Status check_linear(const CompressedLinear& L, const CompressionInfo& info) {
  if (!L.q) {
    if (L.mask.empty()) return error(StatusCode::invalid_argument, "linear '{}' is neither quantized nor pruned", L.hf_name);
    const auto n = static_cast<size_t>(L.n_out * L.n_in);
    if (L.n_out <= 0 || L.n_in <= 0 || L.dense_f32.size() != n || L.mask.size() != n)
      return error(StatusCode::invalid_argument, "pruned linear '{}': dense_f32 and mask must hold n_out x n_in values",
                   L.hf_name);
    return Status::ok();
  }
  const QuantizedMatrix& q = *L.q;
  if (q.bits != info.bits || q.group != info.group || q.sym != info.sym)
    return error(StatusCode::invalid_argument, "linear '{}' has bits {} group {} sym {}, the checkpoint says {} {} {}",
                 L.hf_name, q.bits, q.group, q.sym, info.bits, info.group, info.sym);
  const auto n = static_cast<size_t>(q.n_out * q.n_in), ng = static_cast<size_t>(q.n_out * q.n_groups());
  if (q.codes.size() != n || q.scales.size() != ng || q.zeros.size() != ng || q.g_idx.size() != static_cast<size_t>(q.n_in) ||
      (!L.mask.empty() && L.mask.size() != n))
    return error(StatusCode::invalid_argument, "linear '{}': QuantizedMatrix arrays do not match {} x {}", L.hf_name,
                 q.n_out, q.n_in);
  for (float z : q.zeros)
    if (!(z >= 0 && z <= static_cast<float>((1 << q.bits) - 1)) || std::nearbyint(z) != z)
      return error(StatusCode::invalid_argument, "linear '{}': zero point {} is not an integer code of {} bits",
                   L.hf_name, z, q.bits);
  for (int32_t g : q.g_idx)
    if (g < 0 || g >= q.n_groups())
      return error(StatusCode::invalid_argument, "linear '{}': g_idx value {} out of range", L.hf_name, g);
  return Status::ok();
}

}  // namespace

Status write_lithe_checkpoint(const Model& src, const std::vector<CompressedLinear>& linears,
                              const CompressionInfo& info, const std::string& out_dir,
                              const CheckpointWriteOptions& opts) {
  if (opts.dtype != DType::f16 && opts.dtype != DType::bf16 && opts.dtype != DType::f32)
    return error(StatusCode::invalid_argument, "checkpoint dtype {} is not supported: use f16, bf16 or f32",
                 dtype_name(opts.dtype));
  if (opts.scale_dtype != DType::f16 && opts.scale_dtype != DType::f32)
    return error(StatusCode::invalid_argument, "scale dtype {} is not supported: use f16 or f32",
                 dtype_name(opts.scale_dtype));
  const ModelFile& mf = src.file();
  LITHE_ASSIGN(HfLlamaConfig cfg, hf_export_config(mf, opts.dtype));
  const gguf::File* g = mf.gguf();
  const bool permuted = g != nullptr && arch_permutes_qk(cfg.model_type);
  std::map<std::string, const CompressedLinear*> by_weight;  // "<L>.weight" -> linear
  std::vector<CompressedLinear> unpermuted;  // q/k of GGUF sources, rows back in HF order
  unpermuted.reserve(linears.size());
  for (const auto& L0 : linears) {
    LITHE_TRY(check_linear(L0, info));
    const CompressedLinear* lp = &L0;
    const bool is_q = ends_with(L0.hf_name, "q_proj"), is_k = ends_with(L0.hf_name, "k_proj");
    if (permuted && (is_q || is_k)) {
      unpermuted.push_back(L0);
      LITHE_TRY(unpermute_linear_rows(unpermuted.back(), is_q ? cfg.num_attention_heads : cfg.num_key_value_heads));
      lp = &unpermuted.back();
    }
    const CompressedLinear& L = *lp;
    if (!by_weight.emplace(L.hf_name + ".weight", &L).second)
      return error(StatusCode::invalid_argument, "linear '{}' given twice", L.hf_name);
  }
  LITHE_ASSIGN(StagingDir stage, make_staging(out_dir, opts.force));

  // Tensors are collected, then added widest element first so every tensor stays aligned.
  std::vector<std::pair<std::string, Tensor>> out;
  size_t found = 0;
  for (const auto& ti : mf.tensors()) {
    std::string hf = ti.name;
    if (g != nullptr) {
      LITHE_ASSIGN(HfName n, gguf_to_hf_name(ti.name, false));
      hf = n.name;
    }
    auto it = by_weight.find(hf);
    if (it == by_weight.end()) {
      LITHE_ASSIGN(HfTensor t, hf_export_tensor(mf, ti, cfg, opts.dtype));
      out.emplace_back(t.name, t.tensor);
      continue;
    }
    ++found;
    const CompressedLinear& L = *it->second;
    const int64_t n_out = L.q ? L.q->n_out : L.n_out, n_in = L.q ? L.q->n_in : L.n_in;
    if (ti.shape != Shape{n_out, n_in})
      return error(StatusCode::invalid_argument, "linear '{}' is {} x {} but the model's '{}' has shape {}", L.hf_name,
                   n_out, n_in, ti.name, shape_str(ti.shape));
    const std::string& b = L.hf_name;
    if (!L.mask.empty()) {
      LITHE_ASSIGN(Tensor m, host_tensor(DType::u8, {n_out, (n_in + 7) / 8}, pack_mask(L.mask, n_out, n_in)));
      out.emplace_back(b + ".mask", m);
    }
    if (!L.q) {
      LITHE_ASSIGN(Tensor w, host_tensor(DType::f32, {n_out, n_in}, L.dense_f32));
      LITHE_ASSIGN(w, convert(w, opts.dtype));
      out.emplace_back(b + ".weight", w);
      continue;
    }
    const QuantizedMatrix& q = *L.q;
    const int64_t G = q.n_groups();
    std::vector<uint8_t> zeros(static_cast<size_t>(G * n_out));
    std::vector<float> scales(static_cast<size_t>(G * n_out));
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t gi = 0; gi < G; ++gi) {
        zeros[static_cast<size_t>(gi * n_out + r)] = static_cast<uint8_t>(q.zeros[static_cast<size_t>(r * G + gi)]);
        scales[static_cast<size_t>(gi * n_out + r)] = q.scales[static_cast<size_t>(r * G + gi)];
      }
    LITHE_ASSIGN(Tensor qw, host_tensor(DType::i32, {n_out, packed_words(n_in, q.bits)}, pack_rows(q.codes, n_out, n_in, q.bits)));
    LITHE_ASSIGN(Tensor qz, host_tensor(DType::i32, {G, packed_words(n_out, q.bits)}, pack_rows(zeros, G, n_out, q.bits)));
    LITHE_ASSIGN(Tensor sc, host_tensor(DType::f32, {G, n_out}, scales));
    LITHE_ASSIGN(sc, convert(sc, opts.scale_dtype));
    LITHE_ASSIGN(Tensor gi, host_tensor(DType::i32, {n_in}, q.g_idx));
    out.emplace_back(b + ".qweight", qw);
    out.emplace_back(b + ".qzeros", qz);
    out.emplace_back(b + ".scales", sc);
    out.emplace_back(b + ".g_idx", gi);
  }
  if (found != by_weight.size())
    return error(StatusCode::not_found, "{} of the {} compressed linears name no weight of the model (e.g. '{}')",
                 by_weight.size() - found, by_weight.size(), by_weight.begin()->first);
  safetensors::Writer w;
  LITHE_TRY(add_aligned(w, out));
  const std::string tmp = stage.tmp.string();
  LITHE_TRY(w.write_sharded(tmp, opts.max_shard_bytes).status());
  LITHE_TRY(write_hf_config_files(tmp, cfg, {{"quantization_config", quantization_config_json(info)}}));
  LITHE_ASSIGN(bool tok, export_model_tokenizer(mf, tmp));
  LITHE_TRY(commit_staging(stage));
  log::info("wrote lithe checkpoint {}: {} compressed linears, {} tensors{}", out_dir, linears.size(), out.size(),
            tok ? ", tokenizer" : "");
  return Status::ok();
}

Result<GptqExportReport> export_gptq(const ModelFile& f, const std::string& out_dir, bool force) {
  if (quant_method(f) != "lithe")
    return error(StatusCode::invalid_argument, "export --format gptq needs a lithe checkpoint (config.json "
                 "quantization_config.quant_method \"lithe\"); '{}' has '{}'", f.directory(), quant_method(f));
  const nlohmann::json& qc = quantization_config(f);
  const int bits = qc.value("bits", 0);
  if (bits != 4 && bits != 8)
    return error(StatusCode::invalid_argument, "export --format gptq supports 4- and 8-bit checkpoints; this one has "
                 "{} bits", bits);
  LITHE_ASSIGN(HfLlamaConfig cfg, hf_export_config(f, DType::f16));
  const int per = 32 / bits;
  const uint32_t maxq = (1u << bits) - 1;
  std::vector<std::pair<std::string, Tensor>> out;
  GptqExportReport report;
  for (const auto& ti : f.tensors()) {
    const std::string& n = ti.name;
    if (ends_with(n, ".qzeros") || ends_with(n, ".scales") || ends_with(n, ".g_idx") || ends_with(n, ".mask")) continue;
    if (!ends_with(n, ".qweight")) {
      LITHE_ASSIGN(Tensor t, f.tensor(n));
      out.emplace_back(n, t);
      continue;
    }
    const std::string L = n.substr(0, n.size() - 8);
    LITHE_ASSIGN(QuantizedMatrix q, read_quantized_linear(f, L));
    const int64_t G = q.n_groups();
    if (q.n_in % per != 0 || q.n_out % per != 0)
      return error(StatusCode::invalid_argument, "linear '{}' ({} x {}): GPTQ packing needs both sizes divisible by {}",
                   L, q.n_out, q.n_in, per);
    std::vector<uint32_t> qw(static_cast<size_t>(q.n_in / per * q.n_out), 0);
    for (int64_t o = 0; o < q.n_out; ++o)
      for (int64_t i = 0; i < q.n_in; ++i)
        qw[static_cast<size_t>((i / per) * q.n_out + o)] |= uint32_t{q.codes[static_cast<size_t>(o * q.n_in + i)]}
                                                             << ((i % per) * bits);
    std::vector<uint32_t> qz(static_cast<size_t>(G * (q.n_out / per)), 0);
    std::vector<uint16_t> sc(static_cast<size_t>(G * q.n_out));
    for (int64_t o = 0; o < q.n_out; ++o)
      for (int64_t g = 0; g < G; ++g) {
        const auto z = static_cast<uint32_t>(q.zeros[static_cast<size_t>(o * G + g)]);
        if (z == 0)
          return error(StatusCode::unsupported, "linear '{}' has a zero point of 0 (row {}, group {}), which the GPTQ "
                       "v1 layout (zero - 1) cannot store", L, o, g);
        qz[static_cast<size_t>(g * (q.n_out / per) + o / per)] |= ((z - 1) & maxq) << ((o % per) * bits);
        sc[static_cast<size_t>(g * q.n_out + o)] = f32_to_f16(q.scales[static_cast<size_t>(o * G + g)]);
      }
    LITHE_ASSIGN(Tensor tqw, host_tensor(DType::i32, {q.n_in / per, q.n_out}, qw));
    LITHE_ASSIGN(Tensor tqz, host_tensor(DType::i32, {G, q.n_out / per}, qz));
    LITHE_ASSIGN(Tensor tsc, host_tensor(DType::f16, {G, q.n_out}, sc));
    LITHE_ASSIGN(Tensor tgi, host_tensor(DType::i32, {q.n_in}, q.g_idx));
    out.emplace_back(L + ".qweight", tqw);
    out.emplace_back(L + ".qzeros", tqz);
    out.emplace_back(L + ".scales", tsc);
    out.emplace_back(L + ".g_idx", tgi);
    report.linears++;
  }
  LITHE_ASSIGN(StagingDir stage, make_staging(out_dir, force));
  safetensors::Writer w;
  LITHE_TRY(add_aligned(w, out));
  report.tensors = static_cast<int>(out.size());
  const std::string tmp = stage.tmp.string();
  LITHE_TRY(w.write_sharded(tmp, uint64_t{4} << 30).status());
  const nlohmann::json quantize_config = {{"bits", bits},
                                          {"group_size", qc.value("group_size", int64_t{-1})},
                                          {"damp_percent", 0.01},
                                          {"desc_act", qc.value("desc_act", false)},
                                          {"static_groups", qc.value("static_groups", false)},
                                          {"sym", qc.value("sym", false)},
                                          {"true_sequential", true},
                                          {"model_name_or_path", nullptr},
                                          {"model_file_base_name", "model"},
                                          {"quant_method", "gptq"},
                                          {"checkpoint_format", "gptq"}};
  LITHE_TRY(write_file_atomic(tmp + "/quantize_config.json", quantize_config.dump(2) + "\n"));
  LITHE_TRY(write_hf_config_files(tmp, cfg, {{"quantization_config", quantize_config}}));
  LITHE_ASSIGN(report.tokenizer, export_model_tokenizer(f, tmp));
  LITHE_TRY(commit_staging(stage));
  return report;
}

}  // namespace lithe::compress

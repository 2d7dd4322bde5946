// The lithe compressed checkpoint format: bit packing and the reader (layouts in compress/checkpoint.h).
#include "lithe/compress/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "lithe/core/half.h"
#include "lithe/kernels/convert.h"

namespace lithe::compress {
namespace {

// A stored tensor copied out (no alignment assumed), checked against dtype and rank.
template <typename T>
Result<std::vector<T>> read_vec(const ModelFile& f, const std::string& name, std::span<const DType> dtypes, int ndim,
                                Shape& shape, DType* got = nullptr) {
  LITHE_ASSIGN(Tensor t, f.tensor(name));
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end() || t.ndim() != ndim)
    return error(StatusCode::invalid_argument, "tensor '{}' is {}: unexpected dtype or rank for a compressed linear",
                 name, t.describe());
  shape = t.shape();
  if (got != nullptr) *got = t.dtype();
  std::vector<T> v(t.nbytes() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data(), t.nbytes());
  return v;
}

std::vector<float> widen_scales(const std::vector<uint16_t>& h) {
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = f16_to_f32(h[i]);
  return out;
}

}  // namespace

int64_t packed_words(int64_t count, int bits) { return (count * bits + 31) / 32; }

std::vector<int32_t> pack_rows(std::span<const uint8_t> codes, int64_t rows, int64_t cols, int bits) {
  const int64_t words = packed_words(cols, bits);
  std::vector<uint32_t> w(static_cast<size_t>(rows * words), 0);
  const uint32_t maxq = (1u << bits) - 1;
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* row = w.data() + r * words;
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t v = codes[static_cast<size_t>(r * cols + c)] & maxq;
      const int64_t pos = c * bits;
      const int off = static_cast<int>(pos % 32);
      row[pos / 32] |= v << off;
      if (off + bits > 32) row[pos / 32 + 1] |= v >> (32 - off);  // 3-bit codes straddling a word
    }
  }
  std::vector<int32_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = std::bit_cast<int32_t>(w[i]);
  return out;
}

std::vector<uint8_t> unpack_rows(std::span<const int32_t> words, int64_t rows, int64_t cols, int bits) {
  const int64_t nw = packed_words(cols, bits);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  const uint32_t maxq = (1u << bits) - 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t pos = c * bits;
      const int off = static_cast<int>(pos % 32);
      const auto* row = words.data() + r * nw;
      uint64_t v = std::bit_cast<uint32_t>(row[pos / 32]) >> off;
      if (off + bits > 32) v |= static_cast<uint64_t>(std::bit_cast<uint32_t>(row[pos / 32 + 1])) << (32 - off);
      out[static_cast<size_t>(r * cols + c)] = static_cast<uint8_t>(v & maxq);
    }
  return out;
}

std::vector<uint8_t> pack_mask(std::span<const uint8_t> mask, int64_t rows, int64_t cols) {
  const int64_t nb = (cols + 7) / 8;
  std::vector<uint8_t> out(static_cast<size_t>(rows * nb), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (mask[static_cast<size_t>(r * cols + c)] != 0) out[static_cast<size_t>(r * nb + c / 8)] |= uint8_t(1u << (c % 8));
  return out;
}

std::vector<uint8_t> unpack_mask(std::span<const uint8_t> bits, int64_t rows, int64_t cols) {
  const int64_t nb = (cols + 7) / 8;
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] = (bits[static_cast<size_t>(r * nb + c / 8)] >> (c % 8)) & 1u;
  return out;
}

nlohmann::json quantization_config_json(const CompressionInfo& info) {
  nlohmann::json j = {{"quant_method", "lithe"},
                      {"format_version", 1},
                      {"method", info.method},
                      {"bits", info.bits},
                      {"group_size", info.group == 0 ? int64_t{-1} : info.group},
                      {"sym", info.sym},
                      {"desc_act", info.act_order},
                      {"static_groups", info.static_groups},
                      {"sparsity", info.sparsity},
                      {"n_m", nullptr},
                      {"calibration", nullptr}};
  if (info.n > 0) j["n_m"] = fmt::format("{}:{}", info.n, info.m);
  if (info.calibration)
    j["calibration"] = {{"file", info.calibration->file},
                        {"nsamples", info.calibration->nsamples},
                        {"seqlen", info.calibration->seqlen},
                        {"seed", info.calibration->seed},
                        {"sink_tokens", info.calibration->sink_tokens}};
  return j;
}

const nlohmann::json& quantization_config(const ModelFile& f) {
  static const nlohmann::json none;
  const nlohmann::json& c = f.config();
  if (!c.is_object() || !c.contains("quantization_config")) return none;
  return c["quantization_config"];
}

std::string quant_method(const ModelFile& f) {
  const nlohmann::json& q = quantization_config(f);
  if (!q.is_object() || !q.contains("quant_method") || !q["quant_method"].is_string()) return {};
  return q["quant_method"].get<std::string>();
}

Result<QuantizedMatrix> read_quantized_linear(const ModelFile& f, const std::string& hf_name) {
  const std::string method = quant_method(f);
  if (method != "lithe" && method != "gptq")
    return error(StatusCode::invalid_argument, "'{}' is not a lithe or gptq checkpoint (quant_method '{}')",
                 f.directory(), method);
  const nlohmann::json& qc = quantization_config(f);
  QuantizedMatrix q;
  try {
    q.bits = qc.at("bits").get<int>();
    const int64_t gs = qc.at("group_size").get<int64_t>();
    q.group = gs <= 0 ? 0 : gs;
    q.sym = qc.value("sym", false);
  } catch (const nlohmann::json::exception& e) {
    return error(StatusCode::invalid_argument, "quantization_config: {}", e.what());
  }
  const bool gptq = method == "gptq";
  if (q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 8)
    return error(StatusCode::invalid_argument, "quantization_config: bits {} is not 2, 3, 4 or 8", q.bits);
  if (gptq && q.bits == 3)
    return error(StatusCode::unsupported, "reading 3-bit gptq checkpoints is not supported");
  Shape s_gidx, s_sc, s_qw, s_qz;
  const DType i32[] = {DType::i32}, half_or_f32[] = {DType::f16, DType::f32};
  LITHE_ASSIGN(q.g_idx, read_vec<int32_t>(f, hf_name + ".g_idx", i32, 1, s_gidx));
  DType sc_dtype{};
  LITHE_ASSIGN(auto sc_raw, read_vec<uint8_t>(f, hf_name + ".scales", half_or_f32, 2, s_sc, &sc_dtype));
  LITHE_ASSIGN(auto qw, read_vec<int32_t>(f, hf_name + ".qweight", i32, 2, s_qw));
  LITHE_ASSIGN(auto qz, read_vec<int32_t>(f, hf_name + ".qzeros", i32, 2, s_qz));
  q.n_in = s_gidx[0];
  q.n_out = s_sc[1];
  const int64_t G = s_sc[0];
  const int per = 32 / q.bits;
  const Shape want_qw = gptq ? Shape{q.n_in * q.bits / 32, q.n_out} : Shape{q.n_out, packed_words(q.n_in, q.bits)};
  const Shape want_qz = gptq ? Shape{G, q.n_out * q.bits / 32} : Shape{G, packed_words(q.n_out, q.bits)};
  if (G != q.n_groups() || s_qw != want_qw || s_qz != want_qz || (gptq && (q.n_in % per != 0 || q.n_out % per != 0)))
    return error(StatusCode::invalid_argument,
                 "linear '{}': qweight {} / qzeros {} / scales {} / g_idx {} do not fit bits {} group {}", hf_name,
                 shape_str(s_qw), shape_str(s_qz), shape_str(s_sc), shape_str(s_gidx), q.bits, q.group);
  for (int32_t g : q.g_idx)
    if (g < 0 || g >= G) return error(StatusCode::invalid_argument, "linear '{}': g_idx value {} out of range", hf_name, g);

  // Scales and zeros [G][n_out] -> [n_out][G].
  std::vector<float> sc(static_cast<size_t>(G * q.n_out));
  if (sc_dtype == DType::f32) {
    std::memcpy(sc.data(), sc_raw.data(), sc.size() * 4);
  } else {
    std::vector<uint16_t> h(sc.size());
    std::memcpy(h.data(), sc_raw.data(), h.size() * 2);
    sc = widen_scales(h);
  }
  const uint32_t maxq = (1u << q.bits) - 1;
  std::vector<uint8_t> z;
  if (gptq) {  // (zero - 1) per field, packed along n_out
    z.resize(sc.size());
    const int64_t wpr = q.n_out / per;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t o = 0; o < q.n_out; ++o) {
        const uint32_t word = std::bit_cast<uint32_t>(qz[static_cast<size_t>(g * wpr + o / per)]);
        z[static_cast<size_t>(g * q.n_out + o)] = static_cast<uint8_t>(((word >> ((o % per) * q.bits)) & maxq) + 1);
      }
    q.codes.resize(static_cast<size_t>(q.n_out * q.n_in));
    for (int64_t i = 0; i < q.n_in; ++i)
      for (int64_t o = 0; o < q.n_out; ++o) {
        const uint32_t word = std::bit_cast<uint32_t>(qw[static_cast<size_t>((i / per) * q.n_out + o)]);
        q.codes[static_cast<size_t>(o * q.n_in + i)] = static_cast<uint8_t>((word >> ((i % per) * q.bits)) & maxq);
      }
  } else {
    z = unpack_rows(qz, G, q.n_out, q.bits);
    q.codes = unpack_rows(qw, q.n_out, q.n_in, q.bits);
  }
  q.scales.resize(sc.size());
  q.zeros.resize(sc.size());
  for (int64_t o = 0; o < q.n_out; ++o)
    for (int64_t g = 0; g < G; ++g) {
      q.scales[static_cast<size_t>(o * G + g)] = sc[static_cast<size_t>(g * q.n_out + o)];
      q.zeros[static_cast<size_t>(o * G + g)] = static_cast<float>(z[static_cast<size_t>(g * q.n_out + o)]);
    }
  return q;
}

namespace {

// The kept-weights mask [n_out][n_in] (1 = kept) of a pruned linear; empty when none is stored.
Result<std::vector<uint8_t>> read_mask(const ModelFile& f, const std::string& hf_name, int64_t n_out, int64_t n_in) {
  const std::string mask_name = hf_name + ".mask";
  bool has_mask = false;
  for (const auto& ti : f.tensors()) has_mask = has_mask || ti.name == mask_name;
  if (!has_mask) return std::vector<uint8_t>{};
  Shape s;
  const DType u8[] = {DType::u8};
  LITHE_ASSIGN(auto bits, read_vec<uint8_t>(f, mask_name, u8, 2, s));
  if (s != Shape{n_out, (n_in + 7) / 8})
    return error(StatusCode::invalid_argument, "tensor '{}' has shape {}, expected [{}, {}]", mask_name, shape_str(s),
                 n_out, (n_in + 7) / 8);
  return unpack_mask(bits, n_out, n_in);
}

}  // namespace

Result<Tensor> read_compressed_linear(const ModelFile& f, const std::string& hf_name, DType out) {
  if (out != DType::f32 && out != DType::f16)
    return error(StatusCode::invalid_argument, "read_compressed_linear: dtype {} is not f32 or f16", dtype_name(out));
  auto q = read_quantized_linear(f, hf_name);
  if (!q) return q.status().with_context(fmt::format("compressed linear '{}'", hf_name));
  std::vector<float> w = dequantize(*q);
  LITHE_ASSIGN(auto mask, read_mask(f, hf_name, q->n_out, q->n_in));
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == 0) w[i] = 0.0f;
  LITHE_ASSIGN(Tensor t, host_tensor(DType::f32, {q->n_out, q->n_in}, w));
  if (out == DType::f32) return t;
  return convert(t, out);
}

Result<gq::Matrix> to_runtime(const QuantizedMatrix& q, std::span<const uint8_t> mask) {
  gq::Matrix m;
  m.n_out = q.n_out;
  m.n_in = q.n_in;
  m.fmt = {.bits = q.bits, .group = q.group == 0 ? q.n_in : q.group, .sym = q.sym, .sparse24 = false};
  const int64_t G = m.n_groups();
  if (q.n_groups() != G || q.g_idx.size() != static_cast<size_t>(q.n_in))
    return error(StatusCode::invalid_argument, "quantized [{}, {}]: {} groups / {} g_idx entries do not fit group {}",
                 q.n_out, q.n_in, q.n_groups(), q.g_idx.size(), m.fmt.group);
  // Kernel column order: columns stably sorted by group (act-order), so each group is contiguous.
  std::vector<int32_t> order(static_cast<size_t>(q.n_in));
  for (size_t c = 0; c < order.size(); ++c) order[c] = static_cast<int32_t>(c);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return q.g_idx[static_cast<size_t>(a)] < q.g_idx[static_cast<size_t>(b)];
  });
  bool identity = true;
  for (int64_t k = 0; k < q.n_in; ++k) {
    const int32_t c = order[static_cast<size_t>(k)];
    if (q.g_idx[static_cast<size_t>(c)] != k / m.fmt.group)
      return error(StatusCode::unsupported, "quantized [{}, {}]: group {} does not hold exactly {} columns (g_idx)",
                   q.n_out, q.n_in, q.g_idx[static_cast<size_t>(c)], m.fmt.group);
    identity = identity && c == k;
  }
  if (!identity) m.perm = order;
  m.scales.resize(static_cast<size_t>(q.n_out * G));
  m.zeros.resize(m.scales.size());
  for (size_t i = 0; i < m.scales.size(); ++i) {
    const float z = q.zeros[i];
    if (z != std::round(z) || z < 0 || z > static_cast<float>((1 << q.bits) - 1))
      return error(StatusCode::unsupported, "quantized [{}, {}]: zero point {} is not an integer code", q.n_out, q.n_in, z);
    m.zeros[i] = static_cast<uint8_t>(z);
    m.scales[i] = f32_to_f16(q.scales[i]);
  }
  m.codes.resize(q.codes.size());
  for (int64_t r = 0; r < q.n_out; ++r)
    for (int64_t k = 0; k < q.n_in; ++k) {
      const auto c = static_cast<size_t>(r * q.n_in + order[static_cast<size_t>(k)]);
      const bool pruned = !mask.empty() && mask[c] == 0;
      m.codes[static_cast<size_t>(r * q.n_in + k)] = pruned ? m.zeros[static_cast<size_t>(r * G + k / m.fmt.group)] : q.codes[c];
    }
  m.fmt.sparse24 = !mask.empty() && gq::is_2to4(m);
  LITHE_TRY(gq::validate(m));
  return m;
}

Result<gq::Matrix> read_runtime_linear(const ModelFile& f, const std::string& hf_name) {
  auto q = read_quantized_linear(f, hf_name);
  if (!q) return q.status().with_context(fmt::format("compressed linear '{}'", hf_name));
  LITHE_ASSIGN(auto mask, read_mask(f, hf_name, q->n_out, q->n_in));
  auto m = to_runtime(*q, mask);
  if (!m) return m.status().with_context(fmt::format("compressed linear '{}'", hf_name));
  return m;
}

}  // namespace lithe::compress

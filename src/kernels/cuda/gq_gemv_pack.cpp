// Host side of the GEMV kernels (gq_gemv.cu): which shapes they run, and the packer of a canonical
// gq::Matrix into their layout (gq_gemv_layout.h), done once, at load.
#include <cstring>

#include "kernels/cuda/gq_gemv_layout.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda {

namespace L = gemv_layout;

Status gemv_supports(const QuantFormat& f, int64_t n_out, int64_t n_in) {
  const std::string what = fmt::format("gemv: {} [{} x {}] (n_out x n_in)", format_name(f, n_in), n_out, n_in);
  if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8)
    return error(StatusCode::unsupported, "{}: bits {} is not 2, 3, 4 or 8", what, f.bits);
  if (n_out < 1 || n_out > (int64_t{1} << 31))
    return error(StatusCode::unsupported, "{}: n_out must be in 1..2^31", what);
  if (n_in < 32 || n_in % 32 != 0 || n_in > L::kMaxNIn)
    return error(StatusCode::unsupported, "{}: n_in must be a positive multiple of 32, at most {}", what,
                 L::kMaxNIn);
  if (f.group < 32 || f.group % 32 != 0 || f.group > n_in)
    return error(StatusCode::unsupported, "{}: group {} must be a multiple of 32 in 32..n_in (n_in: per channel)",
                 what, f.group);
  return Status::ok();  // 2:4-sparse matrices run as dense
}

Result<PackedHost> pack_gemv(const gq::Matrix& m) {
  LITHE_TRY(gq::validate(m));
  LITHE_TRY(gemv_supports(m.fmt, m.n_out, m.n_in));
  const int bits = m.fmt.bits;
  const bool has_perm = !m.perm.empty();
  const L::Geometry g = L::geometry(m.fmt, m.n_out, m.n_in, has_perm);
  PackedHost out;
  out.desc.fmt = m.fmt;
  out.desc.n_out = m.n_out;
  out.desc.n_in = m.n_in;
  out.desc.layout = kLayoutGemv;
  out.desc.section = {g.codes, g.hi, g.recs, g.perm, 0, 0};
  out.desc.bytes = g.bytes;
  out.desc.has_perm = has_perm;
  out.bytes.assign(static_cast<size_t>(g.bytes), 0);
  uint8_t* base = out.bytes.data();

  auto or_bits = [](uint8_t* word, uint32_t v, int bit) {  // little-endian 32-bit word
    uint32_t w;
    std::memcpy(&w, word, 4);
    w |= v << bit;
    std::memcpy(word, &w, 4);
  };
  const int span = L::chunk_span(bits);
  for (int64_t r = 0; r < m.n_out; ++r) {
    const int64_t tile = r / L::kTileRows;
    const int rl = static_cast<int>(r % L::kTileRows);
    const uint8_t* codes = &m.codes[static_cast<size_t>(r * m.n_in)];
    for (int64_t col = 0; col < m.n_in; ++col) {
      const int64_t c = col / span;
      const int cs = static_cast<int>(col % span);
      const int lane = L::lane_at(rl, cs), q = L::pair_at(rl, cs), h = L::half_at(cs);
      const int64_t slot = (tile * g.chunks + c) * 32 + lane;
      const uint32_t code = codes[col];
      or_bits(base + g.codes + slot * 16 + 4 * L::lo_word(bits, q), bits == 3 ? code & 3u : code, L::lo_bit(bits, q, h));
      if (bits == 3) or_bits(base + g.hi + slot * 8 + 4 * L::hi_word(q), code >> 2, L::hi_bit(q, h));
    }
    const int64_t G = g.groups;
    for (int64_t k = 0; k < G; ++k) {  // record of row rl at [tile][k][rl % 8][rl / 8]
      const size_t gi = static_cast<size_t>(r * G + k);
      const uint32_t zc = f32_to_f16(-(1024.0f + static_cast<float>(m.zeros[gi])));
      const uint32_t rec = static_cast<uint32_t>(m.scales[gi]) | zc << 16;
      std::memcpy(base + g.recs + ((tile * G + k) * L::kTileRows + 2 * (rl % 8) + rl / 8) * 4, &rec, 4);
    }
  }
  if (has_perm) std::memcpy(base + g.perm, m.perm.data(), m.perm.size() * 4);
  return out;
}

}  // namespace lithe::cuda

// Host side of the GEMV kernels (gq_gemv.cu): which shapes they run, and the packer of a canonical
// gq::Matrix into their layout (gq_gemv_layout.h), done once, at load.
#include <cstring>
#include <vector>

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
  return Status::ok();  // 2:4 matrices run sparse where L::runs_sparse, else as dense
}

namespace {

// A little-endian 32-bit word of the packed bytes: the `width` (<= 8) bits at `bit` set to v.
void put_bits(uint8_t* word, uint32_t v, int bit, int width) {
  uint32_t w;
  std::memcpy(&w, word, 4);
  const uint32_t mask = ((1u << width) - 1) << bit;
  w = (w & ~mask) | (v << bit & mask);
  std::memcpy(word, &w, 4);
}

// The code columns of a 2:4 matrix (gq_gemv_layout.h): the two kept codes of each quad of columns,
// [n_out][n_in / 2], and each quad's kept positions as a meta nibble e0 | e1 << 2, [n_out][n_in / 4].
struct Kept {
  std::vector<uint8_t> codes, nibbles;
};
Kept keep_2of4(const gq::Matrix& m) {
  Kept k;
  const int64_t quads = m.n_in / 4, G = m.n_groups();
  k.codes.resize(static_cast<size_t>(m.n_out * quads * 2));
  k.nibbles.resize(static_cast<size_t>(m.n_out * quads));
  for (int64_t r = 0; r < m.n_out; ++r)
    for (int64_t q = 0; q < quads; ++q) {
      const uint8_t* c = &m.codes[static_cast<size_t>(r * m.n_in + 4 * q)];
      const uint8_t z = m.zeros[static_cast<size_t>(r * G + 4 * q / m.fmt.group)];
      bool keep[4] = {false, false, false, false};
      int n = 0;
      for (int p = 0; p < 4 && n < 2; ++p)
        if (c[p] != z) keep[p] = true, ++n;
      for (int p = 0; p < 4 && n < 2; ++p)
        if (!keep[p]) keep[p] = true, ++n;
      int e = 0, nib = 0;
      for (int p = 0; p < 4; ++p)
        if (keep[p]) {
          k.codes[static_cast<size_t>((r * quads + q) * 2 + e)] = c[p];
          nib |= p << (2 * e++);
        }
      k.nibbles[static_cast<size_t>(r * quads + q)] = static_cast<uint8_t>(nib);
    }
  return k;
}

}  // namespace

Result<PackedHost> pack_gemv(const gq::Matrix& m) {
  LITHE_TRY(gq::validate(m));
  LITHE_TRY(gemv_supports(m.fmt, m.n_out, m.n_in));
  const int bits = m.fmt.bits;
  const bool has_perm = !m.perm.empty();
  PackedHost out;
  out.desc.fmt = m.fmt;
  out.desc.fmt.sparse24 = L::runs_sparse(m.fmt, m.n_in);  // other 2:4 matrices run as dense
  const bool sparse = out.desc.fmt.sparse24;
  const L::Geometry g = L::geometry(out.desc.fmt, m.n_out, m.n_in, has_perm);
  out.desc.n_out = m.n_out;
  out.desc.n_in = m.n_in;
  out.desc.layout = kLayoutGemv;
  out.desc.section = {g.codes, g.hi, g.recs, g.perm, 0, 0};
  out.desc.bytes = g.bytes;
  out.desc.has_perm = has_perm;
  out.bytes.assign(static_cast<size_t>(g.bytes), 0);
  uint8_t* base = out.bytes.data();

  const Kept kept = sparse ? keep_2of4(m) : Kept{};
  const int64_t cols = sparse ? m.n_in / 2 : m.n_in;  // code columns
  if (sparse)  // every quad (0, 1) first: the padding past n_in and past n_out keeps that
    std::memset(base + g.hi, 0x44, static_cast<size_t>(g.recs - g.hi));
  const int span = L::chunk_span(bits);
  for (int64_t r = 0; r < m.n_out; ++r) {
    const int64_t tile = r / L::kTileRows;
    const int rl = static_cast<int>(r % L::kTileRows);
    const uint8_t* codes = sparse ? &kept.codes[static_cast<size_t>(r * cols)] : &m.codes[static_cast<size_t>(r * cols)];
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t c = col / span;
      const int cs = static_cast<int>(col % span);
      const int lane = L::lane_at(rl, cs), q = L::pair_at(rl, cs), h = L::half_at(cs);
      const int64_t slot = (tile * g.chunks + c) * 32 + lane;
      const uint32_t code = codes[col];
      uint8_t* lo = base + g.codes + slot * 16 + 4 * L::lo_word(bits, q);
      put_bits(lo, bits == 3 ? code & 3u : code, L::lo_bit(bits, q, h), bits == 3 ? 2 : bits);
      if (bits == 3) put_bits(base + g.hi + slot * 8 + 4 * L::hi_word(q), code >> 2, L::hi_bit(q, h), 1);
    }
    for (int64_t qd = 0; sparse && qd < m.n_in / 4; ++qd) {  // quad qd: code block qd / 8, chunk of 4 blocks
      const int64_t block = qd / 8, c = block / L::kblocks(bits);
      const int kb = static_cast<int>(block % L::kblocks(bits)), quad = static_cast<int>(qd % 8);
      const int64_t slot = (tile * g.chunks + c) * 32 + L::meta_lane(rl, kb, quad);
      put_bits(base + g.hi + slot * 8 + 4 * L::meta_word(kb), kept.nibbles[static_cast<size_t>(r * (m.n_in / 4) + qd)],
               L::meta_bit(rl, quad), 4);
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

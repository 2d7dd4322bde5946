// pack_gq: a canonical gq::Matrix laid out for the CPU kernels (kLayoutCpuGq; the layout is
// described in lithe/kernels/cpu.h, its geometry in gq_layout.h).
#include <cstring>

#include "kernels/cpu/gq_layout.h"
#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/group_quant.h"

namespace lithe::cpu {
namespace {

using detail::GqGeom;

int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

// Writes one unit (nb blocks present; nb < 4 only for the last unit) of codes in the layout of
// `bits`. a / b: the unit's A / B halves (absent values 0).
void encode_unit(int bits, const uint8_t* a, const uint8_t* b, int nb, uint8_t* dst) {
  switch (bits) {
    case 8: {
      const int half = nb * 16;  // whole unit: 64
      std::memcpy(dst, a, static_cast<size_t>(half));
      std::memcpy(dst + half, b, static_cast<size_t>(half));
      break;
    }
    case 4:
      for (int i = 0; i < nb * 16; ++i) dst[i] = static_cast<uint8_t>(a[i] | b[i] << 4);
      break;
    case 2:
    case 3: {
      for (int i = 0; i < 32; ++i)
        dst[i] = static_cast<uint8_t>((a[i] & 3) | (a[32 + i] & 3) << 2 | (b[i] & 3) << 4 | (b[32 + i] & 3) << 6);
      if (bits == 3) {
        uint64_t ha = 0, hb = 0;
        for (int i = 0; i < 64; ++i) {
          ha |= static_cast<uint64_t>((a[i] >> 2) & 1) << i;
          hb |= static_cast<uint64_t>((b[i] >> 2) & 1) << i;
        }
        for (int k = 0; k < 8; ++k) {  // little endian
          dst[32 + k] = static_cast<uint8_t>(ha >> (8 * k));
          dst[40 + k] = static_cast<uint8_t>(hb >> (8 * k));
        }
      }
      break;
    }
    default: break;
  }
}

void pack_code_row(const GqGeom& g, const uint8_t* codes, uint8_t* dst) {
  uint8_t ab[2][64];
  for (int64_t u = 0; u < g.units; ++u) {
    std::memset(ab, 0, sizeof(ab));
    const int64_t c0 = u * detail::kGqUnit;
    for (int v = 0; v < detail::kGqUnit && c0 + v < g.n_in; ++v) {
      int half = 0, i = 0;
      detail::gq_ab_of(v, half, i);
      ab[half][i] = codes[c0 + v];
    }
    const bool tail = u == g.units - 1 && g.tail_blocks != 0;
    encode_unit(g.bits, ab[0], ab[1], tail ? g.tail_blocks : 4, dst + u * g.unit_bytes);
  }
}

}  // namespace

Status gq_supports(const QuantFormat& f, int64_t n_out, int64_t n_in) {
  if (f.bits != 2 && f.bits != 3 && f.bits != 4 && f.bits != 8)
    return error(StatusCode::unsupported, "cpu gq kernels: {}-bit codes [{}, {}] are not supported (2, 3, 4, 8)", f.bits,
                 n_out, n_in);
  if (n_out <= 0 || n_in <= 0 || f.group <= 0 || f.group > n_in)
    return error(StatusCode::invalid_argument, "cpu gq kernels: shape [{}, {}] with group {} is not a valid matrix",
                 n_out, n_in, f.group);
  if (n_in % detail::kGqBlock != 0)
    return error(StatusCode::unsupported,
                 "cpu gq kernels: {} weight [{}, {}]: n_in {} must be a multiple of 32", format_name(f, n_in), n_out,
                 n_in, n_in);
  if (f.group % detail::kGqBlock != 0 && f.group != n_in)
    return error(StatusCode::unsupported,
                 "cpu gq kernels: {} weight [{}, {}]: group {} must be a multiple of 32 or n_in (per channel)",
                 format_name(f, n_in), n_out, n_in, f.group);
  return Status::ok();
}

Result<Tensor> pack_gq(const gq::Matrix& m) {
  LITHE_TRY(gq::validate(m));
  LITHE_TRY(gq_supports(m.fmt, m.n_out, m.n_in));
  const bool sym = m.fmt.sym;
  const GqGeom g = detail::gq_geom(m.fmt.bits, m.fmt.group, sym, m.n_out, m.n_in);
  PackedWeight p;
  p.fmt = m.fmt;
  p.n_out = m.n_out;
  p.n_in = m.n_in;
  p.layout = kLayoutCpuGq;
  p.has_perm = !m.perm.empty();
  int64_t off = 0;
  p.section[0] = off;  // rows: scales | zeros (asym) | codes
  off += align64(m.n_out * g.row_stride);
  if (sym) {
    p.section[1] = off;  // the shared zero-point row
    off += align64(g.ent_stride);
  }
  if (p.has_perm) {
    p.section[2] = off;
    off += align64(m.n_in * 4);
  }
  p.bytes = off;
  LITHE_ASSIGN(BufferPtr buf, alloc_host(static_cast<size_t>(off)));  // zeroed: the paddings stay 0
  auto* base = static_cast<uint8_t*>(buf->data());
  const int64_t G = m.n_groups();
  global_pool().parallel_for(m.n_out, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* row = base + r * g.row_stride;
      pack_code_row(g, m.codes.data() + r * m.n_in, row + g.code_off);
      auto* scales = reinterpret_cast<uint16_t*>(row);
      uint8_t* zeros = row + 2 * g.ent_stride;
      for (int64_t e = 0; e < g.n_ent; ++e) {
        const int64_t grp = g.block_mode ? e * detail::kGqBlock / m.fmt.group : e;
        scales[e] = m.scales[static_cast<size_t>(r * G + grp)];
        if (!sym) zeros[e] = m.zeros[static_cast<size_t>(r * G + grp)];
      }
    }
  });
  if (sym)
    for (int64_t e = 0; e < g.n_ent; ++e) base[p.section[1] + e] = static_cast<uint8_t>(1 << (m.fmt.bits - 1));
  if (p.has_perm) std::memcpy(base + p.section[2], m.perm.data(), static_cast<size_t>(m.n_in) * 4);
  return Tensor::packed(std::move(buf), 0, p);
}

}  // namespace lithe::cpu

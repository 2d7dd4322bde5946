// Host packer of the Marlin-class int4 GEMM (marlin.cu): lays a canonical gq::Matrix out once, at
// load, so that the kernel's loads land in tensor-core fragment order with no shuffles at run time.
//
// Packed layout (PackedWeight::layout = kLayoutMarlin; one byte block, sections at desc.section[i],
// each aligned to 256 bytes; marlin_layout.cuh holds the constants):
//   k_pad = n_in rounded up to 128 (padding codes are 0; the kernel pads the activations with 0).
//   [kSecCodes]  u32 words [k_pad/16][n_out/64][32][4]: for each k16 tile kt and each run nb of 64
//                output columns, 512 contiguous bytes, 16 per lane of the warp that multiplies them.
//                Lane l (g = l/4, t = l%4), word j covers the 16 columns 64nb+16j .. +15; its nibble
//                i (bits 4i..4i+3) is the code of output column n = 64nb + 16j + g + kNibbleN[i] at
//                kernel column k = 16kt + 2t + kNibbleK[i], kNibbleK = {0,8,0,8,1,9,1,9},
//                kNibbleN = {0,0,8,8,0,0,8,8}: masking nibbles {0,4}, {1,5}, then (after >> 8)
//                {2,6}, {3,7} gives the f16x2 registers b0b1, b2b3 of the m16n8k16 B fragments of
//                the column blocks 16j..+7 and 16j+8..+15, in that order.
//   [kSecScales] f16 [n_groups][n_out]: group gi's scales, each run of 64 columns permuted so that
//                position p = 8g + 2j + h holds column 16j + 8h + g (the 8 scales of a thread are 16
//                contiguous bytes). Per channel (group == n_in): n_groups = 1.
//   [kSecZeros]  u8  [n_groups][n_out], permuted as the scales; only when asymmetric (empty when sym:
//                the kernel uses the constant 8).
//   [kSecPerm]   i32 [n_in], act-order only: kernel column k multiplies x[perm[k]] (the launcher
//                gathers x by it when converting it to f16).
//   [kSecMeta]   2:4 sparse only (fmt.sparse24): u32 words [k_pad/32][n_out/64][32][2], the
//                mma.sp metadata; see below. Empty when dense.
//   [kSecEnd]    total bytes.
// 2:4 sparse (fmt.sparse24; the weights are the sparse A operand of mma.sp m16n8k32): the codes
// section holds only the two kept codes of each aligned run ("chunk") of 4 of k, [k_pad/32]
// [n_out/64][32][4] words: lane l (g, t), word f covers output columns 64nb+16f..+15; nibble i is
// the kept code kSpElem[i] (0: the lower k) of chunk t + 4 kSpChunkHi[i] of column
// 64nb + 16f + g + kNibbleN[i] (the same dequantization then yields the A fragment registers
// a0a1, a4a5, a2a3, a6a7 with the dense layout's scale entries). A chunk keeps its codes != zero
// point (at most 2, validate() checks) plus, when fewer, the lowest other positions (whose codes
// equal the zero point: weight 0). Metadata word q of lane l: column block f = 2q + (t >> 1)
// (sparsity selector f & 1), k half h = t & 1; bits 0..15 for column 16f + g, 16..31 for
// 16f + 8 + g; chunk c (0..3) of the half at bits 4c..4c+3: lower kept index, then higher.
// Group index of kernel column k: k / group (the last group may be short); a k tile of the kernel
// never straddles two groups because group % 128 == 0 or there is one group.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "kernels/cuda/marlin_layout.cuh"
#include "lithe/kernels/cuda_gq.h"

namespace lithe::cuda {

namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

Status marlin_supports(const QuantFormat& f, int64_t n_out, int64_t n_in) {
  const std::string shape = fmt::format("[n_out {}, n_in {}]", n_out, n_in);
  if (f.bits != 4)
    return error(StatusCode::unsupported, "marlin int4 GEMM: {} weights of shape {} are not 4-bit (the kernel runs "
                 "int4 only)", format_name(f, n_in), shape);
  if (n_out <= 0 || n_in <= 0 || n_out % 64 != 0 || n_in % 64 != 0)
    return error(StatusCode::unsupported, "marlin int4 GEMM: shape {} unsupported: n_out and n_in must be positive "
                 "multiples of 64", shape);
  if (f.group != n_in && (f.group <= 0 || f.group % 128 != 0))
    return error(StatusCode::unsupported, "marlin int4 GEMM: group {} for shape {} unsupported: the group must be a "
                 "multiple of 128 or n_in (per channel)", f.group, shape);
  if (f.group > n_in)
    return error(StatusCode::unsupported, "marlin int4 GEMM: group {} is larger than n_in for shape {}", f.group,
                 shape);
  // 32-bit indexing inside the kernel: u32 words of the codes, scale and zero entries.
  const int64_t k_pad = marlin::padded_k(n_in);
  if (k_pad / 8 * n_out >= (int64_t{1} << 31) || n_out * ((n_in + f.group - 1) / f.group) >= (int64_t{1} << 31))
    return error(StatusCode::unsupported, "marlin int4 GEMM: shape {} is too large (32-bit indexing)", shape);
  return Status::ok();
}

Result<PackedHost> pack_marlin(const gq::Matrix& m) {
  LITHE_TRY(marlin_supports(m.fmt, m.n_out, m.n_in));
  LITHE_TRY(gq::validate(m));
  const int64_t N = m.n_out, K = m.n_in, G = m.n_groups();
  const int64_t k_pad = marlin::padded_k(K);
  const bool asym = !m.fmt.sym;
  const bool perm = !m.perm.empty();
  const bool sparse = m.fmt.sparse24;

  PackedHost out;
  PackedWeight& d = out.desc;
  d.fmt = m.fmt;
  d.n_out = N;
  d.n_in = K;
  d.layout = kLayoutMarlin;
  d.has_perm = perm;
  int64_t off = 0;
  d.section[marlin::kSecCodes] = off;
  off = align_up(off + k_pad * N / (sparse ? 4 : 2), marlin::kSectionAlign);
  d.section[marlin::kSecScales] = off;
  off = align_up(off + G * N * 2, marlin::kSectionAlign);
  d.section[marlin::kSecZeros] = off;
  if (asym) off = align_up(off + G * N, marlin::kSectionAlign);
  d.section[marlin::kSecPerm] = off;
  if (perm) off = align_up(off + K * 4, marlin::kSectionAlign);
  d.section[marlin::kSecMeta] = off;
  if (sparse) off = align_up(off + k_pad * N / 8, marlin::kSectionAlign);
  d.section[marlin::kSecEnd] = off;
  d.bytes = off;
  out.bytes.assign(static_cast<size_t>(off), 0);

  const uint8_t* codes = m.codes.data();
  auto code = [&](int64_t n, int64_t k) -> uint32_t {
    return k < K ? codes[static_cast<size_t>(n * K + k)] : 0u;
  };
  uint8_t* base = out.bytes.data() + d.section[marlin::kSecCodes];
  const int64_t nb64 = N / 64;
  if (!sparse) {
    // Codes: word (kt, nb, lane, j).
    for (int64_t kt = 0; kt < k_pad / 16; ++kt)
      for (int64_t nb = 0; nb < nb64; ++nb)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          for (int j = 0; j < 4; ++j) {
            uint32_t w = 0;
            for (int i = 0; i < 8; ++i) {
              const int64_t k = 16 * kt + 2 * t + marlin::kNibbleK[i];
              const int64_t n = 64 * nb + 16 * j + g + marlin::kNibbleN[i];
              w |= (code(n, k) & 0xfu) << (4 * i);
            }
            const int64_t idx = ((kt * nb64 + nb) * 32 + lane) * 4 + j;
            std::memcpy(base + idx * 4, &w, 4);
          }
        }
  } else {
    // The two kept positions (increasing) of the chunk of column n at k0 and their codes.
    struct Kept {
      int idx[2];
      uint32_t code[2];
    };
    auto kept = [&](int64_t n, int64_t k0) {
      Kept r{{0, 1}, {0, 0}};
      if (k0 >= K) return r;  // padding: x is 0 there
      const uint8_t z = m.zeros[static_cast<size_t>(n * G + k0 / m.fmt.group)];
      int cnt = 0;
      bool used[4] = {false, false, false, false};
      for (int p = 0; p < 4 && cnt < 2; ++p)
        if (code(n, k0 + p) != z) used[p] = true, ++cnt;
      for (int p = 0; p < 4 && cnt < 2; ++p)
        if (!used[p]) used[p] = true, ++cnt;
      int e = 0;
      for (int p = 0; p < 4; ++p)
        if (used[p]) {
          r.idx[e] = p;
          r.code[e] = code(n, k0 + p);
          ++e;
        }
      return r;
    };
    uint8_t* meta = out.bytes.data() + d.section[marlin::kSecMeta];
    for (int64_t kt = 0; kt < k_pad / 32; ++kt)
      for (int64_t nb = 0; nb < nb64; ++nb)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          for (int f = 0; f < 4; ++f) {
            uint32_t w = 0;
            for (int i = 0; i < 8; ++i) {
              const int64_t n = 64 * nb + 16 * f + g + marlin::kNibbleN[i];
              const int64_t k0 = 32 * kt + 4 * (t + 4 * marlin::kSpChunkHi[i]);
              w |= (kept(n, k0).code[marlin::kSpElem[i]] & 0xfu) << (4 * i);
            }
            const int64_t idx = ((kt * nb64 + nb) * 32 + lane) * 4 + f;
            std::memcpy(base + idx * 4, &w, 4);
          }
          for (int q = 0; q < 2; ++q) {
            const int f = 2 * q + (t >> 1), h = t & 1;
            uint32_t w = 0;
            for (int half = 0; half < 2; ++half) {
              const int64_t n = 64 * nb + 16 * f + 8 * half + g;
              for (int c = 0; c < 4; ++c) {
                const Kept r = kept(n, 32 * kt + 16 * h + 4 * c);
                w |= static_cast<uint32_t>(r.idx[0] | r.idx[1] << 2) << (16 * half + 4 * c);
              }
            }
            const int64_t idx = ((kt * nb64 + nb) * 32 + lane) * 2 + q;
            std::memcpy(meta + idx * 4, &w, 4);
          }
        }
  }

  // Scales (and zeros), group-major, 64-column runs permuted.
  auto* scales = reinterpret_cast<uint16_t*>(out.bytes.data() + d.section[marlin::kSecScales]);
  uint8_t* zeros = out.bytes.data() + d.section[marlin::kSecZeros];
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t nb = 0; nb < nb64; ++nb)
      for (int p = 0; p < 64; ++p) {
        const int64_t n = 64 * nb + marlin::scale_column(p);
        const auto src = static_cast<size_t>(n * G + gi);
        const int64_t dst = gi * N + 64 * nb + p;
        scales[dst] = m.scales[src];
        if (asym) zeros[dst] = m.zeros[src];
      }
  if (perm)
    std::memcpy(out.bytes.data() + d.section[marlin::kSecPerm], m.perm.data(), static_cast<size_t>(K) * 4);
  return out;
}

}  // namespace lithe::cuda

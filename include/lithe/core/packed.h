// Packed weight matrices: a linear layer's weights kept in the compressed form a checkpoint gives
// (group-quantized codes, scales, zero points; kernels/group_quant.h), laid out once, at load, for
// one backend's kernels. A Tensor of dtype gq carries one PackedWeight: its shape is the logical
// [n_out, n_in], its bytes are the backend layout the descriptor names.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace lithe {

// A group-quantized weight format: W[r][c] = scale[r][g] * (code[r][c] - zero[r][g]) with
// g = (kernel column of c) / group; codes are unsigned `bits`-bit integers.
struct QuantFormat {
  int bits = 4;           // 2, 3, 4 or 8
  int64_t group = 128;    // input columns per group; n_in for one group per row (per channel)
  bool sym = false;       // every zero point is 2^(bits-1)
  bool sparse24 = false;  // each aligned run of 4 kernel columns of a row holds <= 2 non-zero weights
  bool operator==(const QuantFormat&) const = default;
};
// "int4 g128 asym", "int3 per-channel sym", "int4 g128 sym 2:4" (per channel when group == n_in).
std::string format_name(const QuantFormat& f, int64_t n_in);

struct PackedWeight {
  QuantFormat fmt;
  int64_t n_out = 0, n_in = 0;
  // Which layout the bytes follow; each backend names its own (kernels/cpu.h, kernels/cuda_gq.h).
  int layout = 0;
  // Byte offsets of the layout's sections from the tensor's first byte (meaning per layout).
  std::array<int64_t, 6> section{};
  int64_t bytes = 0;  // the whole packed matrix
  bool has_perm = false;  // act-order: the layout holds a column permutation (kernel column k reads x[perm[k]])
};

}  // namespace lithe

// Round-to-nearest quantization and dequantization (see include/lithe/compress/rtn.h).
#include "lithe/compress/rtn.h"

#include <algorithm>

#include "lithe/core/thread_pool.h"

namespace lithe::compress {

Status check_matrix(std::span<const float> w, int64_t n_out, int64_t n_in) {
  if (n_out <= 0 || n_in <= 0)
    return error(StatusCode::invalid_argument, "matrix shape [{}][{}] must be positive", n_out, n_in);
  if (static_cast<int64_t>(w.size()) != n_out * n_in)
    return error(StatusCode::invalid_argument, "matrix has {} values, shape [{}][{}] needs {}", w.size(), n_out,
                 n_in, n_out * n_in);
  return Status::ok();
}

QuantizedMatrix make_quantized(int64_t n_out, int64_t n_in, const QuantGrid& grid) {
  QuantizedMatrix q;
  q.n_out = n_out;
  q.n_in = n_in;
  q.bits = grid.bits;
  q.group = grid.group;
  q.sym = grid.sym;
  q.codes.assign(static_cast<size_t>(n_out * n_in), 0);
  q.scales.assign(static_cast<size_t>(n_out * q.n_groups()), 1.0f);
  q.zeros.assign(static_cast<size_t>(n_out * q.n_groups()), 0.0f);
  q.g_idx.resize(static_cast<size_t>(n_in));
  for (int64_t c = 0; c < n_in; ++c) q.g_idx[static_cast<size_t>(c)] = grid.group ? static_cast<int32_t>(c / grid.group) : 0;
  return q;
}

Result<QuantizedMatrix> rtn(std::span<const float> w, int64_t n_out, int64_t n_in, const QuantGrid& grid) {
  LITHE_TRY(check_matrix(w, n_out, n_in));
  LITHE_TRY(grid.validate(n_in));
  QuantizedMatrix q = make_quantized(n_out, n_in, grid);
  const int64_t gs = grid.group ? grid.group : n_in, ng = q.n_groups();
  const int maxq = grid.maxq();
  global_pool().parallel_for(n_out, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < ng; ++g) {
        const float* x = w.data() + r * n_in + g * gs;
        const int64_t len = std::min(gs, n_in - g * gs);
        const GridParams p = find_params(grid, x, len);
        q.scales[static_cast<size_t>(r * ng + g)] = p.scale;
        q.zeros[static_cast<size_t>(r * ng + g)] = p.zero;
        uint8_t* codes = q.codes.data() + r * n_in + g * gs;
        for (int64_t c = 0; c < len; ++c) codes[c] = static_cast<uint8_t>(quantize_code(x[c], p, maxq));
      }
    }
  });
  return q;
}

std::vector<float> dequantize(const QuantizedMatrix& q) {
  std::vector<float> out(static_cast<size_t>(q.n_out * q.n_in));
  for (int64_t r = 0; r < q.n_out; ++r)
    for (int64_t c = 0; c < q.n_in; ++c)
      out[static_cast<size_t>(r * q.n_in + c)] = dequantize_code(q.codes[static_cast<size_t>(r * q.n_in + c)], q.params(r, c));
  return out;
}

}  // namespace lithe::compress

// Grid parameter search for lithe::compress::QuantGrid (see the header for the exact rules).
#include "lithe/compress/quant_grid.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lithe::compress {

Status QuantGrid::validate(int64_t n_in) const {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    return error(StatusCode::invalid_argument, "quantization bits {} not supported (use 2, 3, 4 or 8)", bits);
  if (group < 0) return error(StatusCode::invalid_argument, "group size {} is negative (0 = per row)", group);
  if (n_in <= 0) return error(StatusCode::invalid_argument, "matrix has {} input columns", n_in);
  if (group > 0 && n_in % group != 0 && !partial_groups) {
    int64_t below = group, above = group;  // nearest divisors of n_in (1 and n_in always are)
    while (n_in % below != 0) --below;
    while (above < n_in && n_in % above != 0) ++above;
    return error(StatusCode::invalid_argument,
                 "group size {} does not divide the input dimension {}: use a divisor (e.g. {} or {}) or "
                 "--partial-groups to let the last group of each row be shorter ({} columns, as the GPTQ "
                 "reference does)",
                 group, n_in, below, std::min(above, n_in), n_in % group);
  }
  if (mse && (mse_grid <= 0 || !(mse_maxshrink > 0.0f && mse_maxshrink <= 1.0f) || !(mse_norm > 0.0f)))
    return error(StatusCode::invalid_argument, "bad clipping search settings (grid {}, maxshrink {}, norm {})",
                 mse_grid, mse_maxshrink, mse_norm);
  return Status::ok();
}

namespace {
GridParams params_from_range(float xmin, float xmax, bool sym, int maxq) {
  GridParams p;
  p.scale = (xmax - xmin) / static_cast<float>(maxq);
  p.zero = sym ? static_cast<float>(maxq + 1) / 2.0f : std::nearbyint(-xmin / p.scale);
  return p;
}
}  // namespace

GridParams find_params(const QuantGrid& grid, const float* x, int64_t n) {
  const int maxq = grid.maxq();
  float xmin = 0.0f, xmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  if (grid.sym) {
    xmax = std::max(-xmin, xmax);
    xmin = -xmax;
  }
  if (xmin == 0.0f && xmax == 0.0f) {
    xmin = -1.0f;
    xmax = 1.0f;
  }
  GridParams best = params_from_range(xmin, xmax, grid.sym, maxq);
  if (!grid.mse) return best;

  const int steps = static_cast<int>(static_cast<double>(grid.mse_maxshrink) * grid.mse_grid);
  double best_err = std::numeric_limits<double>::infinity();
  for (int i = 0; i < steps; ++i) {
    const float shrink = 1.0f - static_cast<float>(i) / static_cast<float>(grid.mse_grid);
    const GridParams p = params_from_range(shrink * xmin, shrink * xmax, grid.sym, maxq);
    double err = 0.0;
    for (int64_t k = 0; k < n; ++k)
      err += std::pow(std::fabs(static_cast<double>(quantize_value(x[k], p, maxq) - x[k])), grid.mse_norm);
    if (err < best_err) {
      best_err = err;
      best = p;
    }
  }
  return best;
}

}  // namespace lithe::compress

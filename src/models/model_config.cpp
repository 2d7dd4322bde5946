#include "lithe/models/model_config.h"

#include <cmath>
#include <numbers>

namespace lithe {

Status ModelConfig::validate() const {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0) return error(StatusCode::invalid_argument, "model config: {} is {}, must be positive", name, v);
    return Status::ok();
  };
  LITHE_TRY(positive("n_layers", n_layers));
  LITHE_TRY(positive("d_model", d_model));
  LITHE_TRY(positive("n_heads", n_heads));
  LITHE_TRY(positive("n_kv_heads", n_kv_heads));
  LITHE_TRY(positive("head_dim", head_dim));
  LITHE_TRY(positive("d_ff", d_ff));
  LITHE_TRY(positive("vocab_size", vocab_size));
  if (n_heads % n_kv_heads != 0)
    return error(StatusCode::invalid_argument, "model config: n_kv_heads {} does not divide n_heads {}", n_kv_heads,
                 n_heads);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return error(StatusCode::invalid_argument, "model config: rope dimension {} must be even and at most head_dim {}",
                 rope_dim, head_dim);
  if (!(rms_eps > 0) || !(rope_theta > 0))
    return error(StatusCode::invalid_argument, "model config: rms_eps {} and rope_theta {} must be positive", rms_eps,
                 rope_theta);
  return Status::ok();
}

cpu::RopeTable make_rope_table(const ModelConfig& c) {
  cpu::RopeTable t;
  t.rot_dim = c.rope_dim;
  t.inv_freq.resize(static_cast<size_t>(c.rope_dim / 2));
  const auto& s = c.rope_scaling;
  for (int64_t i = 0; i < c.rope_dim / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.rope_dim));
    if (s.type == RopeScaling::Type::linear) {
      f /= s.factor;
    } else if (s.type == RopeScaling::Type::llama3) {
      // Llama 3.1: keep high frequencies, divide low ones by factor, blend in between.
      const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_ctx / s.low_freq_factor;
      const double high_wavelen = old_ctx / s.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    t.inv_freq[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return t;
}

}  // namespace lithe

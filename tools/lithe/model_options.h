// Options every model-running subcommand shares (-m, --device, --dequantize, --ctx, --kv-type)
// and the sampling flags, with one place that turns them into a loaded Model / SamplingParams.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <random>
#include <string>

#include "lithe/decode/sampler.h"
#include "lithe/models/model.h"
#include "lithe/runtime/cache_policy.h"

namespace lithe::cli {

struct ModelOptions {
  std::string model;
  std::string device = "cpu";
  bool dequantize = false;
  int64_t ctx = 0;  // 0: the command's default
  std::string kv_type = "f32";
  bool batch_layouts = false;  // LoadOptions::batch_layouts (serve: --batch-layouts, on)

  void add(CLI::App& app, int64_t default_ctx, bool model_required = true) {
    ctx = default_ctx;
    auto* m = app.add_option("-m,--model", model, "model: a .gguf file or a checkpoint directory");
    if (model_required) m->required();
    app.add_option("--device", device, "cpu or cuda")->capture_default_str();
    app.add_flag("--dequantize", dequantize, "load every weight as f32 (the full-precision baseline)");
    app.add_option("-c,--ctx", ctx, "context length (KV cache slots)")->capture_default_str();
    app.add_option("--kv-type", kv_type, "KV cache dtype: f32 or f16")->capture_default_str();
  }
  Result<std::unique_ptr<Model>> load() const {
    LITHE_ASSIGN(Device d, parse_device(device));
    LoadOptions lo;
    lo.device = d;
    lo.dequantize = dequantize;
    lo.batch_layouts = batch_layouts;
    return Model::load(model, lo);
  }
  Result<DType> kv_dtype() const {
    if (kv_type == "f32") return DType::f32;
    if (kv_type == "f16") return DType::f16;
    return error(StatusCode::invalid_argument, "--kv-type '{}' is not supported: use f32 or f16", kv_type);
  }
};

// --cache / --sinks / --window: the KV cache policy of a sequence (runtime/cache_policy.h).
struct CacheOptions {
  std::string policy = "full";
  int64_t sinks = 4;
  int64_t window = 0;  // 0: the command's default

  void add(CLI::App& app, const std::string& policies, int64_t default_window, const std::string& window_help) {
    window = default_window;
    app.add_option("--cache", policy, "KV cache policy: " + policies)->capture_default_str();
    app.add_option("--sinks", sinks, "attention-sink tokens kept by --cache sink")->capture_default_str();
    app.add_option("--window", window, "most recent tokens kept by --cache " + window_help)->capture_default_str();
  }
  // The spec for one policy name (--window 0 -> default_span minus the sinks, when default_span > 0),
  // checked against the model's trained context.
  Result<CacheSpec> spec(std::string_view name, const Model& model, int64_t default_span) const {
    CacheSpec s;
    LITHE_ASSIGN(s.policy, parse_cache_policy(name));
    s.sinks = s.policy == CachePolicy::sink ? sinks : 0;
    if (sinks < 0) return error(StatusCode::invalid_argument, "--sinks {} must be >= 0", sinks);
    s.window = window != 0 || default_span <= 0 ? window : default_span - s.sinks;
    LITHE_TRY(validate_cache_spec(s, model.config().max_context));
    return s;
  }
};

struct SamplingOptions {
  SamplingParams p;
  int64_t seed = -1;

  void add(CLI::App& app) {
    app.add_option("--temp", p.temperature, "temperature (0 = greedy)")->capture_default_str();
    app.add_option("--top-k", p.top_k, "top-k (0 = off)")->capture_default_str();
    app.add_option("--top-p", p.top_p, "top-p (1 = off)")->capture_default_str();
    app.add_option("--min-p", p.min_p, "min-p (0 = off)")->capture_default_str();
    app.add_option("--repeat-penalty", p.repeat_penalty, "repetition penalty (1 = off)")->capture_default_str();
    app.add_option("--repeat-last-n", p.repeat_last_n, "tokens the penalties look back over")->capture_default_str();
    app.add_option("--frequency-penalty", p.frequency_penalty, "frequency penalty")->capture_default_str();
    app.add_option("--presence-penalty", p.presence_penalty, "presence penalty")->capture_default_str();
    app.add_option("--seed", seed, "random seed (-1: random)")->capture_default_str();
  }
  SamplingParams params() {
    if (seed < 0) seed = static_cast<int64_t>(std::random_device{}() & 0x7fffffff);
    p.seed = static_cast<uint64_t>(seed);
    return p;
  }
};

}  // namespace lithe::cli

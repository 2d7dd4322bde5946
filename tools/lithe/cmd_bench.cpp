// lithe bench -m MODEL [-p 512] [-n 128] [-r 5] [--threads T] [--json]
// Prompt processing (one forward pass of p tokens) and generation (n single-token steps from an
// empty context), each repeated r times after a warm-up; medians and spread, peak memory, and the
// memory bandwidth decode achieves (weight bytes + KV bytes read per token).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include "command.h"
#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  int64_t p = 512, n = 128, reps = 5;
  bool json = false;
};

struct Stats {
  double median = 0, min = 0, max = 0, stddev = 0;
};

Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t k = v.size();
  s.median = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
  s.min = v.front();
  s.max = v.back();
  double mean = 0;
  for (double x : v) mean += x / static_cast<double>(k);
  for (double x : v) s.stddev += (x - mean) * (x - mean) / static_cast<double>(k);
  s.stddev = std::sqrt(s.stddev);
  return s;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status run(Options& o) {
  if (o.p < 0 || o.n < 0 || o.reps <= 0)
    return error(StatusCode::invalid_argument, "-p {} and -n {} must be >= 0 and -r {} positive", o.p, o.n, o.reps);
  LITHE_ASSIGN(auto model, o.model.load());
  const ModelConfig& c = model->config();
  LITHE_ASSIGN(DType kv, o.model.kv_dtype());
  const int64_t ctx = std::max<int64_t>(o.model.ctx, std::max(o.p, o.n) + 1);
  LITHE_ASSIGN(KvCache cache, model->new_cache(ctx, kv));
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(std::max<int64_t>(o.p, 1)));
  for (auto& t : prompt) t = tok(rng);
  std::vector<float> logits;

  auto run_pp = [&]() -> Result<double> {
    cache.clear();
    const double t0 = now_s();
    for (int64_t i = 0; i < o.p; i += 512) {
      const auto k = static_cast<size_t>(std::min<int64_t>(512, o.p - i));
      LITHE_TRY(model->forward(cache, std::span<const int32_t>(prompt.data() + i, k), false, logits));
    }
    return now_s() - t0;
  };
  auto run_tg = [&]() -> Result<double> {
    cache.clear();
    int32_t t = prompt[0];
    const double t0 = now_s();
    for (int64_t i = 0; i < o.n; ++i) {
      LITHE_TRY(model->forward(cache, std::span<const int32_t>(&t, 1), false, logits));
      t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    return now_s() - t0;
  };
  std::vector<double> pp, tg;
  if (o.p > 0) {
    LITHE_TRY(run_pp().status());  // warm-up
    for (int64_t r = 0; r < o.reps; ++r) {
      LITHE_ASSIGN(double s, run_pp());
      pp.push_back(static_cast<double>(o.p) / s);
    }
  }
  if (o.n > 0) {
    LITHE_TRY(run_tg().status());
    for (int64_t r = 0; r < o.reps; ++r) {
      LITHE_ASSIGN(double s, run_tg());
      tg.push_back(static_cast<double>(o.n) / s);
    }
  }
  const Stats sp = stats(pp), sg = stats(tg);
  // Bytes decode reads per token: all weights, plus on average half the KV cache written so far.
  const double w_bytes = static_cast<double>(model->weight_bytes_per_token());
  const double kv_bytes = static_cast<double>(c.n_layers * 2 * c.kv_dim() * dtype_traits(kv).block_bytes) *
                          static_cast<double>(o.n) / 2.0;
  const double gbps = sg.median * (w_bytes + kv_bytes) / 1e9;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  const int threads = global_pool().size();
  if (o.json) {
    auto js = [](const Stats& s) {
      return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"stddev", s.stddev}};
    };
    nlohmann::json j = {{"model", o.model.model},
                        {"device", o.model.device},
                        {"threads", threads},
                        {"isa", cpu::isa_name(cpu::active_isa())},
                        {"dequantize", o.model.dequantize},
                        {"n_prompt", o.p},
                        {"n_gen", o.n},
                        {"repetitions", o.reps},
                        {"prompt_tokens_per_second", js(sp)},
                        {"gen_tokens_per_second", js(sg)},
                        {"prompt_runs", pp},
                        {"gen_runs", tg},
                        {"weight_bytes_per_token", w_bytes},
                        {"decode_gb_per_second", gbps},
                        {"peak_rss_mib", peak_mib}};
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("model {} | {} | {} threads | {}\n", o.model.model, o.model.device, threads,
               cpu::isa_name(cpu::active_isa()));
    if (o.p > 0)
      fmt::print("pp{:<5} {:9.1f} tok/s  (min {:.1f}, max {:.1f}, sd {:.1f}, {} runs)\n", o.p, sp.median, sp.min,
                 sp.max, sp.stddev, o.reps);
    if (o.n > 0)
      fmt::print("tg{:<5} {:9.1f} tok/s  (min {:.1f}, max {:.1f}, sd {:.1f}, {} runs)  decode reads {:.1f} GB/s\n", o.n,
                 sg.median, sg.min, sg.max, sg.stddev, o.reps, gbps);
    fmt::print("peak memory {:.0f} MiB; weights read per token {:.1f} MiB\n", peak_mib, w_bytes / (1 << 20));
  }
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  o->model.add(sub, 0);
  sub.add_option("-p,--n-prompt", o->p, "prompt tokens per prompt-processing run")->capture_default_str();
  sub.add_option("-n,--n-gen", o->n, "tokens per generation run")->capture_default_str();
  sub.add_option("-r,--repetitions", o->reps, "repetitions (after one warm-up)")->capture_default_str();
  sub.add_flag("--json", o->json, "print JSON");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(bench, "Measure prompt-processing and generation speed (median of repetitions)", setup);

}  // namespace lithe::cli

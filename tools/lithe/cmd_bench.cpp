// lithe bench -m MODEL | --synthetic NAME [--dtype f16] [--device cpu|cuda] [-p 512] [-n 128] [-d 0]
//             [-r 5] [--threads T] [--json] [--in-step]
// Prompt processing (one forward pass of p tokens, in chunks of --ubatch) and generation (n
// single-token steps after a context of d tokens), each repeated r times after a warm-up; medians
// and spread, peak memory, and the memory bandwidth decode achieves (weight bytes + KV bytes read
// per token). Generation decodes greedily as generate() does: each step is queued with its token
// the previous step's argmax on the device (kArgmaxToken) before that step's result is fetched.
// --synthetic builds a model of a known shape (llama2-7b, llama3-8b, llama2-13b) with random
// weights on the device, so real-size speed is measured without real weights.
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
#ifdef LITHE_HAVE_CUDA
#include "lithe/kernels/cuda_device.h"
#endif
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  std::string synthetic, dtype = "f16";
  int64_t p = 512, n = 128, depth = 0, reps = 5, ubatch = 512;
  bool json = false;
  bool in_step = false;  // --in-step: fetch each token before queuing the next step
};

Result<std::unique_ptr<Model>> load_model(const Options& o) {
  if (o.synthetic.empty()) {
    if (o.model.model.empty()) return error(StatusCode::invalid_argument, "give -m MODEL or --synthetic NAME");
    return o.model.load();
  }
  LITHE_ASSIGN(Device dev, parse_device(o.model.device));
  return Model::synthetic(o.synthetic, o.dtype, dev);
}

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
  if (o.p < 0 || o.n < 0 || o.depth < 0 || o.reps <= 0 || o.ubatch <= 0)
    return error(StatusCode::invalid_argument, "-p {}, -n {} and -d {} must be >= 0, -r {} and --ubatch {} positive",
                 o.p, o.n, o.depth, o.reps, o.ubatch);
  LITHE_ASSIGN(auto model, load_model(o));
  const ModelConfig& c = model->config();
  LITHE_ASSIGN(DType kv, o.model.kv_dtype());
  const int64_t ctx = std::max<int64_t>(o.model.ctx, std::max(o.p, o.depth + o.n) + 1);
  LITHE_ASSIGN(KvCache cache, model->new_cache(ctx, kv));
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(std::max<int64_t>(std::max(o.p, o.depth), 1)));
  for (auto& t : prompt) t = tok(rng);
  std::vector<float> vals;
  std::vector<int32_t> ids;

  auto prefill = [&](int64_t n) -> Status {
    for (int64_t i = 0; i < n; i += o.ubatch) {
      const auto k = static_cast<size_t>(std::min<int64_t>(o.ubatch, n - i));
      LITHE_TRY(model->forward_top_k(cache, std::span<const int32_t>(prompt.data() + i, k), 1, vals, ids));
    }
    return Status::ok();
  };
  auto run_pp = [&]() -> Result<double> {
    cache.clear();
    const double t0 = now_s();
    LITHE_TRY(prefill(o.p));
    return now_s() - t0;
  };
  auto run_tg = [&]() -> Result<double> {
    cache.clear();
    LITHE_TRY(prefill(o.depth));
    const int32_t first = prompt[0], next = kArgmaxToken;
    const double t0 = now_s();
    for (int64_t i = 0; i < o.n; ++i) {
      LITHE_TRY(model->launch_top_k(cache, std::span<const int32_t>(i == 0 ? &first : &next, 1), 1));
      if (i > 0 || o.in_step) LITHE_TRY(model->fetch_top_k(vals, ids));
    }
    if (!o.in_step) LITHE_TRY(model->fetch_top_k(vals, ids));
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
  // Bytes decode reads per token: all weights, plus the KV cache filled so far (on average the
  // depth and half the generated tokens).
  const double w_bytes = static_cast<double>(model->weight_bytes_per_token());
  const double kv_bytes = static_cast<double>(c.n_layers * 2 * c.kv_dim() * dtype_traits(kv).block_bytes) *
                          (static_cast<double>(o.depth) + static_cast<double>(o.n) / 2.0);
  const double gbps = sg.median * (w_bytes + kv_bytes) / 1e9;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  const int threads = global_pool().size();
  std::string gpu;
#ifdef LITHE_HAVE_CUDA
  if (model->backend().device() == Device::cuda) {
    LITHE_ASSIGN(cuda::DeviceInfo d, cuda::device_info());
    gpu = fmt::format("{} ({:.1f} of {:.1f} GiB used)", d.name, (d.total_memory - d.free_memory) / 1073741824.0,
                      d.total_memory / 1073741824.0);
  }
#endif
  if (o.json) {
    auto js = [](const Stats& s) {
      return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"stddev", s.stddev}};
    };
    nlohmann::json j = {{"model", o.synthetic.empty() ? o.model.model : "synthetic:" + o.synthetic},
                        {"dtype", o.synthetic.empty() ? "" : o.dtype},
                        {"depth", o.depth},
                        {"gpu", gpu},
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
    fmt::print("model {} | {} {} | {} threads | {}\n",
               o.synthetic.empty() ? o.model.model : "synthetic " + o.synthetic + " " + o.dtype, o.model.device, gpu,
               threads, cpu::isa_name(cpu::active_isa()));
    if (o.p > 0)
      fmt::print("pp{:<5} {:9.1f} tok/s  (min {:.1f}, max {:.1f}, sd {:.1f}, {} runs)\n", o.p, sp.median, sp.min,
                 sp.max, sp.stddev, o.reps);
    if (o.n > 0)
      fmt::print("tg{:<5} @ depth {} {:9.1f} tok/s  (min {:.1f}, max {:.1f}, sd {:.1f}, {} runs)  decode reads {:.1f} GB/s\n", o.n,
                 o.depth, sg.median, sg.min, sg.max, sg.stddev, o.reps, gbps);
    fmt::print("peak memory {:.0f} MiB; weights read per token {:.1f} MiB\n", peak_mib, w_bytes / (1 << 20));
  }
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  o->model.add(sub, 0, false);
  sub.add_option("--synthetic", o->synthetic, "random weights of a known shape: llama2-7b, llama3-8b, llama2-13b");
  sub.add_option("--dtype", o->dtype, "weight dtype of --synthetic: f16, bf16 or f32")->capture_default_str();
  sub.add_option("-d,--depth", o->depth, "context tokens before generation runs")->capture_default_str();
  sub.add_option("--ubatch", o->ubatch, "prompt tokens per forward pass")->capture_default_str();
  sub.add_option("-p,--n-prompt", o->p, "prompt tokens per prompt-processing run")->capture_default_str();
  sub.add_option("-n,--n-gen", o->n, "tokens per generation run")->capture_default_str();
  sub.add_option("-r,--repetitions", o->reps, "repetitions (after one warm-up)")->capture_default_str();
  sub.add_flag("--json", o->json, "print JSON");
  sub.add_flag("--in-step", o->in_step, "generation: fetch each token before queuing the next step (no decoding "
               "ahead; what running ahead gains)");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(bench, "Measure prompt-processing and generation speed (median of repetitions)", setup);

}  // namespace lithe::cli

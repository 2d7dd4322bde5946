// lithe perplexity -m MODEL -f TEXT [--ctx N] [--max-windows K] [--protocol gptq|llamacpp] [--json]
//                  [--save-logits FILE] [--kld FILE]
// lithe perplexity --stream --cache full|window|recompute|sink[,...] [--sinks 4] [--window W]
//                  [--segment 10000] [--max-tokens N] [--plot FILE.png] -m MODEL -f TEXT [--json]
//   token-by-token streaming perplexity under each listed cache policy (eval/stream_perplexity.h)
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "command.h"
#include "lithe/core/file_util.h"
#include "lithe/core/progress.h"
#include "lithe/eval/line_plot.h"
#include "lithe/eval/perplexity.h"
#include "lithe/eval/stream_perplexity.h"
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  std::string file, protocol = "gptq", save_logits, kld;
  int64_t max_windows = 0, batch = 512;
  bool json = false;
  // --stream
  bool stream = false;
  CacheOptions cache;
  int64_t segment = 10000, max_tokens = 0;
  std::string plot;
};

// Splits "a,b,c" (empty pieces dropped).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string run_label(const StreamResult& r) {
  switch (r.cache.policy) {
    case CachePolicy::sink: return fmt::format("sink s={} w={}", r.cache.sinks, r.cache.window);
    case CachePolicy::full: return fmt::format("full ctx={}", r.span);
    default: return fmt::format("{} w={}", cache_policy_name(r.cache.policy), r.cache.window);
  }
}

Status run_stream(Options& o) {
  if (!o.save_logits.empty() || !o.kld.empty())
    return error(StatusCode::invalid_argument, "--save-logits and --kld do not apply to --stream");
  LITHE_ASSIGN(std::string text, read_text_file(o.file));
  LITHE_ASSIGN(auto model, o.model.load());
  std::vector<CacheSpec> specs;
  for (const std::string& name : split_list(o.cache.policy)) {
    LITHE_ASSIGN(CacheSpec spec, o.cache.spec(name, *model, 0));
    specs.push_back(spec);
  }
  if (specs.empty()) return error(StatusCode::invalid_argument, "--cache '{}' names no policy", o.cache.policy);
  EncodeOptions eo = model->tokenizer().default_encode_options();
  eo.invalid_utf8 = InvalidUtf8::replace;
  LITHE_ASSIGN(std::vector<int32_t> ids, model->tokenizer().encode(text, eo));
  StreamOptions so;
  so.ctx = o.model.ctx;
  so.max_tokens = o.max_tokens;
  so.segment = o.segment;
  LITHE_ASSIGN(so.kv_dtype, o.model.kv_dtype());
  std::vector<StreamResult> runs;
  for (const CacheSpec& spec : specs) {
    so.cache = spec;
    std::unique_ptr<Progress> bar;
    auto on_progress = [&](int64_t done, int64_t total) {
      if (!bar) bar = std::make_unique<Progress>(fmt::format("stream {}", cache_policy_name(spec.policy)), total);
      bar->set(done);
    };
    LITHE_ASSIGN(StreamResult r, stream_perplexity(*model, ids, so, on_progress));
    if (bar) bar->finish();
    runs.push_back(std::move(r));
  }
  if (!o.plot.empty()) {
    std::vector<PlotSeries> series;
    for (const auto& r : runs) {
      PlotSeries ps{run_label(r), {}};
      for (const auto& [t, nll] : r.curve)  // from 1% of the stream on: the first tokens' means dwarf the rest
        if (t * 100 >= r.tokens) ps.points.emplace_back(static_cast<double>(t), nll);
      series.push_back(std::move(ps));
    }
    LITHE_TRY(write_line_plot_png(o.plot, series, {"running log perplexity", "tokens", "log ppl"}));
  }
  if (o.json) {
    nlohmann::json j = {{"model", o.model.model}, {"file", o.file}, {"text_tokens", ids.size()}, {"runs", {}}};
    for (const auto& r : runs) {
      nlohmann::json segs = nlohmann::json::array();
      for (const auto& s : r.segments) segs.push_back({{"start", s.start}, {"end", s.end}, {"ppl", s.ppl}});
      j["runs"].push_back({{"cache", cache_policy_name(r.cache.policy)}, {"sinks", r.cache.sinks},
                           {"window", r.cache.window}, {"span", r.span}, {"tokens", r.tokens}, {"ppl", r.ppl},
                           {"nll", r.nll}, {"seconds", r.seconds}, {"ms_per_token", r.ms_per_token},
                           {"ms_per_token_full", r.ms_per_token_full},
                           {"stopped_at_context", r.stopped_at_context}, {"segments", segs}, {"curve", r.curve}});
    }
    if (!o.plot.empty()) j["plot"] = o.plot;
    std::cout << j.dump(2) << "\n";
    return Status::ok();
  }
  fmt::print("streaming perplexity of {} ({} tokens)\n", o.file, ids.size());
  fmt::print("{:<22} {:>9} {:>10} {:>10} {:>14}\n", "cache", "tokens", "ppl", "ms/token", "ms/token full");
  for (const auto& r : runs)
    fmt::print("{:<22} {:>9} {:>10.3f} {:>10.2f} {:>14.2f}{}\n", run_label(r), r.tokens, r.ppl, r.ms_per_token,
               r.ms_per_token_full, r.stopped_at_context ? "  (stopped: context full)" : "");
  // Rows follow the run with the most segments (a full cache may stop early).
  const std::vector<StreamSegment>& rows =
      std::max_element(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
        return a.segments.size() < b.segments.size();
      })->segments;
  fmt::print("\nper-segment perplexity\n{:<16}", "tokens");
  for (const auto& r : runs) fmt::print(" {:>22}", run_label(r));
  fmt::print("\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    fmt::print("{:<16}", fmt::format("{}-{}", rows[i].start, rows[i].end));
    for (const auto& r : runs)
      fmt::print(" {:>22}", i < r.segments.size() ? fmt::format("{:.3f}", r.segments[i].ppl) : "-");
    fmt::print("\n");
  }
  if (!o.plot.empty()) fmt::print("plot: {}\n", o.plot);
  return Status::ok();
}

Status run(Options& o) {
  if (o.stream) return run_stream(o);
  LITHE_ASSIGN(PplProtocol proto, parse_ppl_protocol(o.protocol));
  LITHE_ASSIGN(std::string text, read_text_file(o.file));
  LITHE_ASSIGN(auto model, o.model.load());
  PerplexityOptions po;
  po.protocol = proto;
  po.ctx = o.model.ctx;
  po.max_windows = o.max_windows;
  po.batch = o.batch;
  LITHE_ASSIGN(po.kv_dtype, o.model.kv_dtype());
  po.save_logits = o.save_logits;
  po.kld_base = o.kld;
  std::unique_ptr<Progress> bar;  // created at the first window, when the total is known
  auto on_window = [&](int64_t done, int64_t total) {
    if (!bar) bar = std::make_unique<Progress>("perplexity windows", total);
    bar->set(done);
  };
  LITHE_ASSIGN(PerplexityResult r, perplexity(*model, text, po, on_window));
  if (bar) bar->finish();
  if (o.json) {
    nlohmann::json j = {{"ppl", r.ppl},       {"nll", r.nll},         {"tokens", r.tokens},
                        {"text_tokens", r.text_tokens}, {"windows", r.windows}, {"ctx", r.ctx},
                        {"protocol", ppl_protocol_name(r.protocol)},  {"seconds", r.seconds},
                        {"model", o.model.model}, {"file", o.file},   {"window_ppl", r.window_ppl}};
    if (r.has_kld)
      j["kld"] = {{"mean", r.kld_mean}, {"max", r.kld_max}, {"top1_agreement", r.top1_agreement},
                  {"base_ppl", r.base_ppl}, {"delta_ppl", r.delta_ppl}};
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("perplexity {:.4f} (nll {:.6f}) over {} scored tokens in {} windows of {} ({} protocol), {:.1f} s\n",
               r.ppl, r.nll, r.tokens, r.windows, r.ctx, ppl_protocol_name(r.protocol), r.seconds);
    if (r.has_kld)
      fmt::print("vs baseline: KL mean {:.6f} max {:.4f}, top-1 agreement {:.2f}%, baseline ppl {:.4f}, delta {:+.4f}\n",
                 r.kld_mean, r.kld_max, 100 * r.top1_agreement, r.base_ppl, r.delta_ppl);
  }
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  o->model.add(sub, 0);
  sub.add_option("-f,--file", o->file, "text file to score")->required();
  sub.add_option("--protocol", o->protocol, "gptq (windows of --ctx, default 2048, every token) or llamacpp "
                 "(windows of 512, second half)")->capture_default_str();
  sub.add_option("--max-windows", o->max_windows, "score at most K windows (0: all)")->capture_default_str();
  sub.add_option("--batch", o->batch, "tokens per forward pass")->capture_default_str();
  sub.add_option("--save-logits", o->save_logits, "save the log-probabilities as a baseline for --kld");
  sub.add_option("--kld", o->kld, "report KL divergence, top-1 agreement and delta ppl against a baseline file");
  sub.add_flag("--json", o->json, "print JSON");
  sub.add_flag("--stream", o->stream, "streaming perplexity: score the text token by token under --cache");
  o->cache.add(sub, "(--stream) full, window, recompute or sink; a comma list compares several", 1020,
               "window / sink / recompute (--stream)");
  sub.add_option("--segment", o->segment, "(--stream) tokens per reported segment")->capture_default_str();
  sub.add_option("--max-tokens", o->max_tokens, "(--stream) score only the first N tokens (0: all)")
      ->capture_default_str();
  sub.add_option("--plot", o->plot, "(--stream) write running log-perplexity per policy as a PNG");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(perplexity,
              "Perplexity of a model on a text (gptq or llamacpp protocol), KL vs a baseline, or streaming (--stream)",
              setup);

}  // namespace lithe::cli

// lithe perplexity -m MODEL -f TEXT [--ctx N] [--max-windows K] [--protocol gptq|llamacpp] [--json]
//                  [--save-logits FILE] [--kld FILE]
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "command.h"
#include "lithe/core/file_util.h"
#include "lithe/core/progress.h"
#include "lithe/eval/perplexity.h"
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  std::string file, protocol = "gptq", save_logits, kld;
  int64_t max_windows = 0, batch = 512;
  bool json = false;
};

Status run(Options& o) {
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
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(perplexity, "Perplexity of a model on a text (gptq or llamacpp protocol), KL vs a baseline", setup);

}  // namespace lithe::cli

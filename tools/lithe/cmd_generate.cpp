// lithe generate -m MODEL -p PROMPT -n N [sampling flags] [--stop S]... [--json]
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "command.h"
#include "lithe/core/file_util.h"
#include "lithe/decode/generate.h"
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  SamplingOptions sampling;
  std::string prompt, prompt_file;
  int64_t n = 128;
  std::vector<std::string> stop;
  bool json = false, no_bos = false, special = false, ignore_eos = false;
};

Status run(Options& o) {
  LITHE_ASSIGN(auto model, o.model.load());
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    LITHE_ASSIGN(prompt, read_text_file(o.prompt_file));
  }
  if (prompt.empty()) return error(StatusCode::invalid_argument, "give a prompt with -p or -f");
  EncodeOptions eo = model->tokenizer().default_encode_options();
  if (o.no_bos) eo.add_bos = false;
  eo.parse_special = o.special;
  LITHE_ASSIGN(std::vector<int32_t> ids, model->tokenizer().encode(prompt, eo));
  if (ids.empty()) return error(StatusCode::invalid_argument, "the prompt encodes to no tokens");
  LITHE_ASSIGN(DType kv, o.model.kv_dtype());
  LITHE_ASSIGN(KvCache cache, model->new_cache(o.model.ctx, kv));
  GenerateOptions go;
  go.max_tokens = o.n;
  go.sampling = o.sampling.params();
  go.stop = o.stop;
  go.stop_at_eog = !o.ignore_eos;
  std::vector<int32_t> history;
  auto stream = [&](std::string_view s) {
    if (!o.json) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  if (!o.json) std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  LITHE_ASSIGN(GenerateResult r, generate(*model, cache, history, ids, go, stream));
  const double pp = r.prompt_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prompt_seconds : 0;
  const auto n_gen = static_cast<double>(r.tokens.size());
  const double tg = r.generate_seconds > 0 ? n_gen / r.generate_seconds : 0;
  if (o.json) {
    nlohmann::json j = {{"prompt", prompt},
                        {"text", r.text},
                        {"prompt_ids", ids},
                        {"ids", r.tokens},
                        {"finish_reason", r.finish_reason},
                        {"seed", o.sampling.seed},
                        {"timings", {{"prompt_tokens", r.prompt_tokens},
                                     {"prompt_seconds", r.prompt_seconds},
                                     {"prompt_tokens_per_second", pp},
                                     {"generated_tokens", r.tokens.size()},
                                     {"generate_seconds", r.generate_seconds},
                                     {"generate_tokens_per_second", tg}}}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::fprintf(stderr, "\n[prompt %lld tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | %s | seed %lld]\n",
                 static_cast<long long>(r.prompt_tokens), pp, r.tokens.size(), tg, r.finish_reason.c_str(),
                 static_cast<long long>(o.sampling.seed));
  }
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  o->model.add(sub, 4096);
  o->sampling.add(sub);
  sub.add_option("-p,--prompt", o->prompt, "prompt text");
  sub.add_option("-f,--file", o->prompt_file, "read the prompt from a file");
  sub.add_option("-n,--n-predict", o->n, "tokens to generate")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub.add_option("--stop", o->stop, "stop string (repeatable)");
  sub.add_flag("--json", o->json, "print JSON: text, token ids and timings");
  sub.add_flag("--no-bos", o->no_bos, "do not add BOS even if the model asks for it");
  sub.add_flag("--special", o->special, "parse special tokens written in the prompt");
  sub.add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-generation tokens");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(generate, "Generate text from a prompt", setup);

}  // namespace lithe::cli

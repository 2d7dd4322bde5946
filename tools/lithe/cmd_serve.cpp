// lithe serve -m MODEL [--host H] [--port P] [--max-batch N] [--ctx N] [--api-key KEY] ...:
// an OpenAI-compatible HTTP server with continuous batching (see include/lithe/serve/).
#include <filesystem>

#include "command.h"
#include "lithe/serve/server.h"
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  std::string synthetic, dtype = "f16";
  serve::ServerOptions server;
  int64_t max_body_kib = 1024;
  CacheOptions cache;
};

Result<std::unique_ptr<Model>> load_model(const Options& o) {
  if (o.synthetic.empty()) return o.model.load();
  ModelOptions host = o.model;  // the tokenizer's model: mapped on the host, its weights unused
  host.device = "cpu";
  LITHE_ASSIGN(auto tokens, host.load());
  LITHE_ASSIGN(Device dev, parse_device(o.model.device));
  return Model::synthetic(o.synthetic, o.dtype, dev, 1, tokens.get());
}

Status run(Options& o) {
  LITHE_ASSIGN(auto model, load_model(o));
  o.server.engine.ctx = o.model.ctx;
  LITHE_ASSIGN(o.server.engine.cache, o.cache.spec(o.cache.policy, *model, o.model.ctx));
  LITHE_ASSIGN(o.server.engine.kv_dtype, o.model.kv_dtype());
  o.server.max_body_bytes = static_cast<size_t>(o.max_body_kib) * 1024;
  if (o.server.model_id.empty())
    o.server.model_id = o.synthetic.empty() ? std::filesystem::path(o.model.model).filename().replace_extension().string()
                                            : "synthetic-" + o.synthetic + "-" + o.dtype;
  if (o.server.api_key.empty())
    if (const char* k = std::getenv("LITHE_API_KEY")) o.server.api_key = k;
  return serve::serve(*model, o.server);
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  o->model.add(sub, 2048);
  o->model.batch_layouts = true;
  sub.add_option("--batch-layouts", o->model.batch_layouts,
                 "keep the weights also in the CPU matrix-matrix kernels' layout, so that batched steps do not decode "
                 "them on every call (q4_1: twice its bytes more); off saves that memory")
      ->capture_default_str();
  auto& s = o->server;
  sub.add_option("--host", s.host, "address to listen on (0.0.0.0: every interface)")->capture_default_str();
  sub.add_option("--port", s.port, "TCP port (0: any free port, printed on start)")->capture_default_str()->check(
      CLI::Range(0, 65535));
  sub.add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' on /v1/* (or set LITHE_API_KEY)");
  sub.add_option("--synthetic", o->synthetic,
                 "serve random weights of a known shape (llama2-7b, llama3-8b, llama2-13b) with -m's tokenizer and "
                 "chat template, for load tests: the text is noise, the speed is real");
  sub.add_option("--dtype", o->dtype, "--synthetic weights: f16, bf16, f32 or a gq format (int4-g128)")
      ->capture_default_str();
  sub.add_option("--model-name", s.model_id, "the model id clients send (default: the file name without extension)");
  sub.add_option("--max-batch", s.engine.max_batch, "sequences batched at once")->capture_default_str()->check(
      CLI::Range(int64_t{1}, int64_t{4096}));
  sub.add_option("--batch-tokens", s.engine.batch_tokens, "tokens per forward pass (prompt chunks fill it)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub.add_option("--block-size", s.engine.block_size, "tokens per KV block")->capture_default_str()->check(
      CLI::Range(int64_t{1}, int64_t{4096}));
  sub.add_option("--kv-blocks", s.engine.kv_blocks, "KV blocks in the pool (0: max-batch x ctx/4 tokens' worth)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub.add_option("--max-queue", s.engine.max_queue, "waiting requests before answering 503")->capture_default_str();
  sub.add_option("--http-threads", s.http_threads, "connections served at once")->capture_default_str()->check(
      CLI::Range(4, 4096));
  sub.add_option("--max-body-kib", o->max_body_kib, "largest request body in KiB")->capture_default_str()->check(
      CLI::Range(int64_t{1}, int64_t{1} << 20));
  o->cache.add(sub, "each request's KV cache: full (prompt + max_tokens <= --ctx), window or sink (--sinks first "
               "tokens + the last --window: a request may run past --ctx)", 0,
               "window / sink (0: --ctx minus the sinks)");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(serve, "Serve the model over an OpenAI-compatible HTTP API with continuous batching", setup);

}  // namespace lithe::cli

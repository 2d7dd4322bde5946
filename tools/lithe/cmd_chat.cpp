// lithe chat -m MODEL: an interactive conversation through the model's chat template. Each turn
// renders the whole conversation; the KV cache keeps the shared prefix, so only new tokens run.
// Lines starting with / are commands: /reset, /exit. Replies stream as they are generated.
// --cache sink (or window) keeps the conversation going past --ctx: the oldest turns leave the
// cache (the first --sinks tokens stay), see runtime/kv_cache.h.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "command.h"
#include "lithe/decode/generate.h"
#include "lithe/tokenizer/chat_template.h"
#include "model_options.h"

namespace lithe::cli {
namespace {

struct Options {
  ModelOptions model;
  SamplingOptions sampling;
  CacheOptions cache;
  std::string system, chat_template;
  int64_t n = 512;
};

Status run(Options& o) {
  LITHE_ASSIGN(auto model, o.model.load());
  const Tokenizer& tok = model->tokenizer();
  std::string source = model->chat_template();
  if (!o.chat_template.empty()) {
    LITHE_ASSIGN(source, builtin_chat_template(o.chat_template));
  }
  if (source.empty())
    return error(StatusCode::invalid_argument, "the model has no chat template: pass --chat-template chatml (or another "
                 "built-in name)");
  LITHE_ASSIGN(ChatTemplate tmpl, ChatTemplate::parse(source));
  ChatRenderOptions ro;
  ro.add_generation_prompt = true;
  if (tok.bos_id() >= 0) ro.bos_token = tok.token_text(tok.bos_id());
  if (tok.eos_id() >= 0) ro.eos_token = tok.token_text(tok.eos_id());
  LITHE_ASSIGN(DType kv, o.model.kv_dtype());
  LITHE_ASSIGN(CacheSpec spec, o.cache.spec(o.cache.policy, *model, o.model.ctx));
  LITHE_ASSIGN(KvCache cache, model->new_cache(spec, o.model.ctx, kv));
  GenerateOptions go;
  go.max_tokens = o.n;
  go.sampling = o.sampling.params();
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::vector<int32_t> history;
  const bool tty = isatty(fileno(stdin)) != 0;
  if (tty) std::fprintf(stderr, "lithe chat: %s (type /exit to quit, /reset to start over)\n", model->path().c_str());
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.resize(o.system.empty() ? 0 : 1);
      cache.clear();
      history.clear();
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    LITHE_ASSIGN(std::string prompt, tmpl.render(messages, ro));
    EncodeOptions eo = tok.default_encode_options();
    eo.parse_special = true;
    if (!ro.bos_token.empty() && prompt.starts_with(ro.bos_token)) eo.add_bos = false;  // the template printed it
    LITHE_ASSIGN(std::vector<int32_t> ids, tok.encode(prompt, eo));
    auto r = generate(*model, cache, history, ids, go, [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    if (!r) {
      if (r.status().message().find("context") == std::string::npos) return r.status();
      std::fprintf(stderr, "\n[the conversation no longer fits the context (%lld tokens): /reset to start over]\n",
                   static_cast<long long>(o.model.ctx));
      messages.pop_back();
      continue;
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages.push_back({"assistant", r->text});
  }
  return Status::ok();
}

void setup(CLI::App& sub, Runner& runner) {
  auto o = std::make_shared<Options>();
  o->model.add(sub, 4096);
  o->sampling.add(sub);
  o->cache.add(sub, "full (fails when the conversation outgrows --ctx), window (the last --window tokens) or sink "
               "(--sinks first tokens + the last --window: goes on past the context)", 0,
               "window / sink (0: --ctx minus the sinks)");
  sub.add_option("-n,--n-predict", o->n, "maximum tokens per reply")->capture_default_str();
  sub.add_option("--system", o->system, "system message");
  sub.add_option("--chat-template", o->chat_template,
                 "use a built-in template instead of the model's: chatml, llama2, llama3, qwen2.5, phi3, smollm2");
  runner = [o] { return run(*o); };
}

}  // namespace

LITHE_COMMAND(chat, "Chat with a model interactively (uses its chat template, streams replies)", setup);

}  // namespace lithe::cli

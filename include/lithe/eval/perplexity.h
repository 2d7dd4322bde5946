// Perplexity under two protocols, and KL divergence against saved baseline log-probabilities.
//  gptq:     tokenize the whole text once, split into non-overlapping windows of ctx tokens (a
//            partial last window is dropped), score every token of each window that has context
//            (ctx - 1 predictions per window), ppl = exp(mean NLL).
//  llamacpp: llama.cpp's `perplexity`: windows of ctx (default 512) tokens, the first replaced by
//            BOS when the model adds one, only the second half scored (ctx - ctx/2 - 1 per window).
// Baseline files (--save-logits) hold, per scored position, the f16 log-softmax over the vocabulary
// and the observed next token, so that --kld can report KL(base || model), top-1 agreement and
// the change in perplexity without re-running the baseline model.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lithe/models/model.h"

namespace lithe {

enum class PplProtocol { gptq, llamacpp };
Result<PplProtocol> parse_ppl_protocol(std::string_view s);
std::string_view ppl_protocol_name(PplProtocol p);

struct PerplexityOptions {
  PplProtocol protocol = PplProtocol::gptq;
  int64_t ctx = 0;            // 0: 2048 (gptq) or 512 (llamacpp)
  int64_t max_windows = 0;    // 0: all
  int64_t batch = 512;        // tokens per forward pass inside a window
  DType kv_dtype = DType::f32;
  std::string save_logits;    // write baseline log-probs here
  std::string kld_base;       // compare against this baseline file
};

struct PerplexityResult {
  double ppl = 0, nll = 0;  // mean NLL per scored token (nats)
  int64_t tokens = 0;       // scored tokens
  int64_t text_tokens = 0;  // tokens in the whole text
  int64_t windows = 0, ctx = 0;
  PplProtocol protocol = PplProtocol::gptq;
  double seconds = 0;
  std::vector<double> window_ppl;
  bool has_kld = false;
  double kld_mean = 0, kld_max = 0, top1_agreement = 0, base_ppl = 0, delta_ppl = 0;
};

// progress(done_windows, total_windows) after each window.
Result<PerplexityResult> perplexity(Model& model, const std::string& text, const PerplexityOptions& opts,
                                    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lithe

// Streaming perplexity (StreamingLLM): a long text scored token by token through one KV cache
// policy (cache_policy.h), as a model serving an endless stream would see it. Every token t >= 1
// is predicted from what the policy keeps of tokens [0, t):
//   full       dense attention over everything so far; stops when its --ctx slots are full
//   window     the last W tokens, positions re-indexed 0..W-1 (keys rotated at attention time)
//   sink       the first S tokens + the last W, re-indexed 0..S+W-1
//   recompute  the last W tokens re-run from scratch at positions 0..W-1 for every prediction (a
//              W-token prefill per token: the slow quality reference). While fewer than W tokens
//              have been seen that is the dense computation, which runs incrementally.
// Reported: the mean NLL / perplexity, the perplexity of every `segment` tokens, and the running
// log-perplexity (mean NLL of tokens 1..t) sampled for plotting.
#pragma once

#include <functional>
#include <vector>

#include "lithe/models/model.h"

namespace lithe {

struct StreamOptions {
  CacheSpec cache;
  int64_t ctx = 0;            // full: cache slots (the model's trained context when 0)
  int64_t max_tokens = 0;     // score only the first tokens of the text (0: all)
  int64_t segment = 10000;    // tokens per reported segment
  int64_t curve_points = 500; // running log-perplexity samples (about)
  DType kv_dtype = DType::f32;
};

struct StreamSegment {
  int64_t start = 0, end = 0;  // token range [start, end) of the predicted tokens
  double ppl = 0;
};

struct StreamResult {
  CacheSpec cache;
  int64_t span = 0;            // tokens attended per prediction at most
  int64_t tokens = 0;          // predictions scored
  bool stopped_at_context = false;  // full: the cache filled before the text ended
  double nll = 0, ppl = 0;
  double seconds = 0, ms_per_token = 0;
  double ms_per_token_full = 0;  // over the predictions made with the span full (0: never full)
  std::vector<StreamSegment> segments;  // the last one may be partial
  std::vector<std::pair<int64_t, double>> curve;  // (tokens scored, running mean NLL)
};

// ids: the tokenized text (at least 2 tokens). progress(scored, total) now and then.
Result<StreamResult> stream_perplexity(Model& model, const std::vector<int32_t>& ids, const StreamOptions& opts,
                                       const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lithe

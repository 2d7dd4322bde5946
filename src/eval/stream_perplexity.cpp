#include "lithe/eval/stream_perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace lithe {

Result<StreamResult> stream_perplexity(Model& model, const std::vector<int32_t>& ids, const StreamOptions& o,
                                       const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t max_ctx = model.config().max_context;
  LITHE_TRY(validate_cache_spec(o.cache, max_ctx));
  if (o.segment < 1) return error(StatusCode::invalid_argument, "--segment {} must be >= 1", o.segment);
  int64_t n = static_cast<int64_t>(ids.size());
  if (o.max_tokens > 0) n = std::min(n, o.max_tokens);
  if (n < 2) return error(StatusCode::invalid_argument, "the text has {} tokens: streaming perplexity needs >= 2", n);
  const int64_t ctx = o.ctx > 0 ? o.ctx : (max_ctx > 0 ? max_ctx : 2048);

  StreamResult r;
  r.cache = o.cache;
  r.span = o.cache.span(ctx);
  const bool recompute = o.cache.policy == CachePolicy::recompute;
  // recompute re-fills a full cache of W slots for every prediction.
  LITHE_ASSIGN(KvCache cache, recompute ? model.new_cache(o.cache.window, o.kv_dtype)
                                        : model.new_cache(o.cache, ctx, o.kv_dtype));
  const int64_t total = n - 1;
  const int64_t curve_every = std::max<int64_t>(1, total / std::max<int64_t>(1, o.curve_points));
  std::vector<int32_t> targets;
  std::vector<float> lp;
  double nll_sum = 0, seg_sum = 0;
  int64_t seg_start = 0;
  auto close_segment = [&] {
    r.segments.push_back({seg_start, r.tokens, std::exp(seg_sum / static_cast<double>(r.tokens - seg_start))});
    seg_start = r.tokens;
    seg_sum = 0;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto t_full = t0;  // when the attention span first became full
  for (int64_t t = 0; t < total; ++t) {  // token t predicts token t + 1
    if (t == r.span) t_full = std::chrono::steady_clock::now();
    // recompute over all tokens so far (t < W) is the dense cache's computation: run it incrementally.
    if (recompute && t >= o.cache.window) {
      const int64_t first = std::max<int64_t>(0, t + 1 - o.cache.window);
      const std::span<const int32_t> win(ids.data() + first, static_cast<size_t>(t + 1 - first));
      targets.assign(win.size(), -1);
      targets.back() = ids[static_cast<size_t>(t + 1)];
      cache.clear();
      LITHE_TRY(model.forward_logprobs(cache, win, targets, lp));
    } else {
      if (!recompute && !cache.rolling() && cache.size() >= cache.capacity()) {
        r.stopped_at_context = true;
        break;
      }
      targets.assign(1, ids[static_cast<size_t>(t + 1)]);
      LITHE_TRY(model.forward_logprobs(cache, std::span<const int32_t>(ids.data() + t, 1), targets, lp));
    }
    const double nll = -static_cast<double>(lp.back());
    nll_sum += nll;
    seg_sum += nll;
    ++r.tokens;
    if (r.tokens % o.segment == 0 || t + 1 == total) close_segment();
    if (r.tokens % curve_every == 0) r.curve.emplace_back(r.tokens, nll_sum / static_cast<double>(r.tokens));
    if (progress && (r.tokens % 256 == 0 || t + 1 == total)) progress(r.tokens, total);
  }
  if (seg_start < r.tokens) close_segment();  // a full cache stopped mid-segment
  if (r.curve.empty() || r.curve.back().first != r.tokens)
    r.curve.emplace_back(r.tokens, nll_sum / static_cast<double>(r.tokens));
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.ppl = std::exp(r.nll);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.ms_per_token = 1000.0 * r.seconds / static_cast<double>(r.tokens);
  if (r.tokens > r.span)
    r.ms_per_token_full = 1000.0 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t_full).count() /
                          static_cast<double>(r.tokens - r.span);
  return r;
}

}  // namespace lithe

#include "lithe/decode/generate.h"

#include <algorithm>
#include <chrono>

#include "lithe/decode/text_stream.h"
#include "lithe/runtime/backend.h"

namespace lithe {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Result<GenerateResult> generate(Model& model, KvCache& cache, std::vector<int32_t>& history,
                                const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const std::function<bool(std::string_view)>& on_text) {
  LITHE_TRY(opts.sampling.validate());
  if (prompt.empty()) return error(StatusCode::invalid_argument, "the prompt is empty");
  for (const auto& s : opts.stop)
    if (s.empty()) return error(StatusCode::invalid_argument, "stop strings must not be empty");
  // A rolling cache (sink / window policy) never fills: it evicts, and takes any prompt in chunks
  // of at most its window.
  if (!cache.rolling() && static_cast<int64_t>(prompt.size()) >= cache.capacity())
    return error(StatusCode::invalid_argument,
                 "the prompt has {} tokens but the context holds {}: shorten the prompt or raise --ctx", prompt.size(),
                 cache.capacity());
  // Reuse the cached prefix shared with the new prompt (keep at least one token to run). history
  // holds every token the cache has seen; a rolling cache that evicted part of the stretch to drop
  // starts over (rewind returns 0).
  size_t common = 0;
  const size_t cached = std::min(history.size(), static_cast<size_t>(cache.seen()));
  while (common < cached && common + 1 < prompt.size() && history[common] == prompt[common]) ++common;
  common = static_cast<size_t>(cache.rewind(static_cast<int64_t>(common)));
  history.assign(prompt.begin(), prompt.end());
  const int64_t chunk = cache.rolling() ? std::min(opts.prefill_chunk, cache.max_append()) : opts.prefill_chunk;

  GenerateResult res;
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  Sampler sampler(opts.sampling);
  // When sampling needs only the k best logits, only those leave the backend (the device reduces
  // the vocabulary); otherwise the whole row does.
  const int k = std::min(sampler.candidates_needed(), vocab);
  std::vector<float> logits, top_vals;
  std::vector<int32_t> top_ids;
  auto run = [&](std::span<const int32_t> tokens) -> Status {
    if (k == 0) return model.forward(cache, tokens, false, logits);
    return model.forward_top_k(cache, tokens, k, top_vals, top_ids);
  };
  const auto t0 = Clock::now();
  for (size_t i = common; i < prompt.size(); i += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prompt.size() - i, static_cast<size_t>(chunk));
    LITHE_TRY(run(std::span<const int32_t>(prompt.data() + i, n)));
  }
  res.prompt_tokens = static_cast<int64_t>(prompt.size() - common);
  res.prompt_seconds = seconds_since(t0);

  TextStream stream(model.tokenizer(), opts.stop);
  bool stop_string_hit = false;
  const auto t1 = Clock::now();
  res.finish_reason = "length";
  // Greedy decoding runs one step ahead: step s+1 is queued, its token the device's argmax
  // (kArgmaxToken), before step s's token reaches the host, so sampling, text and the next step's
  // staging overlap the device's work. A step queued past the end is dropped and its cache slot
  // given back (so not with a rolling cache, whose append may evict).
  const bool ahead = k == 1 && !cache.rolling();
  bool queued = false;  // a step is queued whose top-1 is not yet fetched
  auto drop_queued = [&]() -> Status {
    if (!queued) return Status::ok();
    queued = false;
    LITHE_TRY(model.fetch_top_k(top_vals, top_ids));
    cache.rewind(cache.size() - 1);
    return Status::ok();
  };
  Status st;
  for (int64_t step = 0; step < opts.max_tokens && st.is_ok(); ++step) {
    const bool full = !cache.rolling() && cache.size() >= cache.capacity();
    const bool fetch = queued;  // this token's result is still on its way
    queued = ahead && !full && step + 1 < opts.max_tokens;
    if (queued) {
      const int32_t next = kArgmaxToken;
      st = model.launch_top_k(cache, std::span<const int32_t>(&next, 1), 1);
      if (!st.is_ok()) {
        queued = false;
        break;
      }
    }
    if (fetch) {
      st = model.fetch_top_k(top_vals, top_ids);
      if (!st.is_ok()) break;
    }
    const int32_t id = k > 0 ? sampler.sample_top(top_vals, top_ids)
                             : sampler.sample(std::span<float>(logits.data(), static_cast<size_t>(vocab)), history);
    res.tokens.push_back(id);
    history.push_back(id);
    if (opts.stop_at_eog && model.tokenizer().is_eog(id)) {
      res.finish_reason = "stop";
      break;
    }
    Result<TextStream::Piece> piece = stream.feed(id);
    if (!piece.is_ok()) {
      st = piece.status();
      break;
    }
    res.text += piece->text;
    if (on_text && !piece->text.empty() && !on_text(piece->text)) {
      res.finish_reason = "cancelled";
      break;
    }
    if (piece->stopped) {
      res.finish_reason = "stop";
      stop_string_hit = true;
      break;
    }
    if (full) {
      res.finish_reason = "context";
      break;
    }
    if (step + 1 == opts.max_tokens) break;
    if (!queued) st = run(std::span<const int32_t>(&history.back(), 1));
  }
  const Status dropped = drop_queued();
  LITHE_TRY(st);
  LITHE_TRY(dropped);
  if (!stop_string_hit) {  // emit what was held back, and any incomplete UTF-8 tail
    const std::string rest = stream.flush();
    res.text += rest;
    if (on_text && !rest.empty()) on_text(rest);
  }
  // The last sampled token was never run through the model; keep history equal to the cache.
  history.resize(static_cast<size_t>(cache.seen()));
  res.generate_seconds = seconds_since(t1);
  return res;
}

}  // namespace lithe

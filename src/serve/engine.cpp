#include "lithe/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "lithe/core/log.h"
#include "lithe/core/thread_pool.h"
#include "lithe/decode/text_stream.h"
#include "lithe/kernels/cpu.h"
#include "lithe/serve/sampling.h"

namespace lithe::serve {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status EngineOptions::validate() const {
  if (max_batch < 1) return error(StatusCode::invalid_argument, "--max-batch {} must be >= 1", max_batch);
  if (batch_tokens < 1) return error(StatusCode::invalid_argument, "--batch-tokens {} must be >= 1", batch_tokens);
  if (ctx < 2) return error(StatusCode::invalid_argument, "--ctx {} must be >= 2", ctx);
  if (block_size < 1) return error(StatusCode::invalid_argument, "--block-size {} must be >= 1", block_size);
  if (kv_blocks < 0) return error(StatusCode::invalid_argument, "--kv-blocks {} must be >= 0 (0: default)", kv_blocks);
  if (cache.policy == CachePolicy::recompute)
    return error(StatusCode::invalid_argument, "--cache recompute is not a cache: serve takes full, window or sink");
  return validate_cache_spec(cache, ctx, "--ctx");
}

int64_t EngineOptions::pool_blocks() const {
  if (kv_blocks > 0) return kv_blocks;
  const int64_t per_seq = (std::max<int64_t>(ctx / 4, 1) + block_size - 1) / block_size;
  return std::max(max_batch * per_seq, (ctx + block_size - 1) / block_size);  // at least one full context
}

// ---- RequestHandle ----

bool RequestHandle::next(Event& ev, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestHandle::cancel() { cancelled_ = true; }

void RequestHandle::push(Event ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

// ---- Engine ----

struct Engine::Seq {
  uint64_t id = 0;  // arrival order
  std::shared_ptr<RequestHandle> handle;
  GenRequest req;
  std::vector<int32_t> tokens;  // prompt + generated; tokens[n_cached..] still to run
  int64_t n_cached = 0;         // tokens whose K/V are in the cache
  std::optional<KvCache> cache;  // while admitted: a paged cache in the pool (its blocks go back with it)
  int64_t blocks() const { return cache ? static_cast<int64_t>(cache->blocks().size()) : 0; }
  std::optional<std::mt19937_64> rng;  // seeded once; kept through preemption
  SampleScratch scratch;
  std::optional<TextStream> text;
  Clock::time_point arrival, last_token;
  int64_t generated() const { return static_cast<int64_t>(tokens.size() - req.prompt.size()); }
  // Tokens this iteration runs (set by the planner).
  int64_t chunk = 0;
};

Result<std::shared_ptr<KvPool>> Engine::make_pool(Model& model, const EngineOptions& options) {
  LITHE_TRY(options.validate());
  return model.new_kv_pool(options.pool_blocks(), options.block_size, options.kv_dtype);
}

Engine::Engine(Model& model, const EngineOptions& options, Metrics& metrics, std::shared_ptr<KvPool> pool)
    : model_(model), opts_(options), metrics_(metrics), pool_(std::move(pool)) {
  LITHE_CHECK_MSG(pool_ != nullptr && pool_->block_size() == opts_.block_size, "Engine: a pool from Engine::make_pool");
  metrics_.kv_blocks_total = pool_->num_blocks();
  metrics_.kv_blocks_free = pool_->num_free();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

Status Engine::check(const GenRequest& req) const {
  const auto p = static_cast<int64_t>(req.prompt.size());
  if (p == 0) return error(StatusCode::invalid_argument, "the prompt encodes to no tokens: send some text");
  if (req.max_tokens < 1) return error(StatusCode::invalid_argument, "max_tokens {} must be >= 1", req.max_tokens);
  if (!opts_.cache.rolling() && p + req.max_tokens > opts_.ctx)
    return error(StatusCode::invalid_argument,
                 "this model's context is {} tokens, but {} were asked ({} in the prompt + {} max_tokens): shorten the "
                 "prompt or lower max_tokens",
                 opts_.ctx, p + req.max_tokens, p, req.max_tokens);
  const int64_t need = pool_->blocks_for(opts_.kv_slots(p + req.max_tokens));
  if (need > pool_->num_blocks())
    return error(StatusCode::invalid_argument,
                 "the request needs {} KV blocks of {} tokens but the server's pool has {}: lower max_tokens (or start "
                 "the server with more --kv-blocks)",
                 need, pool_->block_size(), pool_->num_blocks());
  return req.sampling.validate();
}

Result<std::shared_ptr<RequestHandle>> Engine::submit(GenRequest req) {
  LITHE_TRY(check(req));
  auto s = std::make_unique<Seq>();
  s->handle = std::make_shared<RequestHandle>();
  s->tokens = req.prompt;
  s->req = std::move(req);
  s->arrival = Clock::now();
  auto handle = s->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return error(StatusCode::unsupported, "the server is shutting down: retry on another instance");
    if (static_cast<int64_t>(incoming_.size()) + metrics_.queue_depth.load() >= opts_.max_queue)
      return error(StatusCode::unsupported, "the server is overloaded ({} requests queued): retry later",
                   opts_.max_queue);
    s->id = next_id_++;
    incoming_.push_back(std::move(s));
  }
  cv_.notify_all();
  return handle;
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::take_incoming() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!incoming_.empty()) {
    waiting_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

void Engine::loop() {
  for (;;) {
    take_incoming();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) break;
      if (running_.empty() && waiting_.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
        continue;
      }
    }
    step();
  }
  take_incoming();
  Event ev;
  ev.done = true;
  ev.finish_reason = "error";
  ev.error = "the server is shutting down";
  for (auto& s : running_) finish(*s, ev);
  for (auto& s : waiting_) finish(*s, ev);
  running_.clear();
  waiting_.clear();
}

void Engine::finish(Seq& s, Event ev) {
  s.cache.reset();  // its blocks go back to the pool
  metrics_.kv_blocks_free = pool_->num_free();  // before the client hears of it
  ev.done = true;
  ev.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
  ev.completion_tokens = s.generated();
  if (ev.finish_reason == "cancelled") ++metrics_.cancelled;
  metrics_.request_duration.observe(seconds(Clock::now() - s.arrival));
  s.handle->push(std::move(ev));
}

void Engine::preempt(std::vector<std::unique_ptr<Seq>>::iterator it) {
  Seq& s = **it;
  s.cache.reset();
  s.n_cached = 0;  // recomputed from its tokens (prompt + generated) when readmitted
  s.chunk = 0;
  ++metrics_.preemptions;
  log::debug("serve: preempting request {} ({} tokens) for KV blocks", s.id, s.tokens.size());
  auto pos = std::lower_bound(waiting_.begin(), waiting_.end(), s.id,
                              [](const std::unique_ptr<Seq>& w, uint64_t id) { return w->id < id; });
  waiting_.insert(pos, std::move(*it));
  running_.erase(it);
}

bool Engine::step() {
  // Cancelled requests (client gone) leave first.
  auto drop_cancelled = [this](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if ((*it)->handle->cancelled()) {
        Event ev;
        ev.finish_reason = "cancelled";
        finish(**it, std::move(ev));
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  drop_cancelled(running_);
  drop_cancelled(waiting_);

  // 1. One token for every decoding sequence (oldest first); preempt the youngest for blocks.
  int64_t budget = opts_.batch_tokens;
  for (size_t i = 0; i < running_.size();) {
    Seq& s = *running_[i];
    s.chunk = 0;
    const auto todo = static_cast<int64_t>(s.tokens.size()) - s.n_cached;
    if (todo != 1) {  // still prefilling: planned below
      ++i;
      continue;
    }
    const int64_t extra = s.cache->blocks_to_append(1);
    bool self_preempted = false;
    while (extra > pool_->num_free()) {
      const bool self = running_.size() - 1 == i;
      preempt(running_.end() - 1);
      if (self) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the youngest: every older one is planned
    s.cache->reserve(s.cache->slots_after(1));
    s.chunk = 1;
    --budget;
    ++i;
  }
  // 2. Prompt chunks of sequences already prefilling, then admissions, within the token budget.
  auto plan_chunk = [&](Seq& s) -> int64_t {
    const int64_t todo = static_cast<int64_t>(s.tokens.size()) - s.n_cached;
    const int64_t have = (s.blocks() + pool_->num_free()) * pool_->block_size();
    int64_t room = have - s.n_cached;
    if (opts_.cache.rolling())  // at most its window at once; the whole window once its span has room
      room = have >= opts_.cache.span(opts_.ctx) ? opts_.cache.window : std::min(opts_.cache.window, room);
    return std::max<int64_t>(0, std::min({todo, budget, room}));
  };
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.chunk > 0 || budget <= 0) continue;
    s.chunk = plan_chunk(s);
    s.cache->reserve(s.cache->slots_after(s.chunk));
    budget -= s.chunk;
  }
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < opts_.max_batch) {
    Seq& s = *waiting_.front();
    const int64_t chunk = plan_chunk(s);
    // Admit only when the whole chunk fits (or the prompt is done, or a rolling cache's window is
    // full): otherwise wait for blocks.
    const bool whole_window = opts_.cache.rolling() && chunk == opts_.cache.window;
    if (chunk == 0 || (chunk < budget && chunk < static_cast<int64_t>(s.tokens.size()) && !whole_window)) break;
    auto cache = model_.new_cache(opts_.cache, static_cast<int64_t>(s.req.prompt.size()) + s.req.max_tokens, pool_);
    if (!cache) {
      if (!running_.empty()) break;  // memory may come back when others finish
      Event ev;
      ev.finish_reason = "error";
      ev.error = cache.status().message();
      finish(s, std::move(ev));
      waiting_.pop_front();
      continue;
    }
    s.cache.emplace(std::move(*cache));
    if (!s.rng) {  // first admission (a preempted sequence keeps its generator and text state)
      s.rng.emplace(s.req.sampling.seed);
      s.text.emplace(model_.tokenizer(), s.req.stop);
    }
    s.chunk = chunk;
    s.cache->reserve(s.cache->slots_after(chunk));
    budget -= chunk;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  metrics_.queue_depth = static_cast<int64_t>(waiting_.size());
  metrics_.running = static_cast<int64_t>(running_.size());
  metrics_.kv_blocks_free = pool_->num_free();

  // 3. One forward pass over every planned sequence.
  std::vector<SequenceInput> batch;
  std::vector<Seq*> in_batch;
  std::vector<std::vector<int32_t>> positions;
  positions.reserve(running_.size());
  int64_t n_tokens = 0;
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.chunk == 0) continue;
    std::vector<int32_t> pos(static_cast<size_t>(s.chunk));
    for (int64_t i = 0; i < s.chunk; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(s.n_cached + i);
    positions.push_back(std::move(pos));
    batch.push_back({&*s.cache, std::span<const int32_t>(s.tokens.data() + s.n_cached, static_cast<size_t>(s.chunk)),
                     positions.back(), false});
    in_batch.push_back(&s);
    n_tokens += s.chunk;
  }
  if (batch.empty()) return false;
  ++metrics_.iterations;
  metrics_.batch_size.observe(static_cast<double>(in_batch.size()));
  metrics_.batch_tokens.observe(static_cast<double>(n_tokens));
  Status st = model_.forward(batch, logits_);
  if (!st.is_ok()) {
    log::error("serve: forward pass of {} sequences failed: {}", in_batch.size(), st.to_string());
    for (Seq* s : in_batch) {
      Event ev;
      ev.finish_reason = "error";
      ev.error = st.message();
      finish(*s, std::move(ev));
    }
    std::erase_if(running_, [&](const auto& sp) { return sp->chunk > 0; });
    return true;
  }

  // 4. Sample where the whole input is cached: the draws in parallel, the text in order.
  const auto vocab = static_cast<size_t>(model_.config().vocab_size);
  std::vector<size_t> to_sample;
  for (size_t b = 0; b < in_batch.size(); ++b) {
    Seq& s = *in_batch[b];
    s.n_cached += s.chunk;
    if (s.n_cached < static_cast<int64_t>(s.req.prompt.size())) metrics_.prompt_tokens += static_cast<uint64_t>(s.chunk);
    if (s.n_cached == static_cast<int64_t>(s.tokens.size())) to_sample.push_back(b);
  }
  std::vector<Event> events(in_batch.size());
  global_pool().parallel_for(static_cast<int64_t>(to_sample.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const size_t b = to_sample[static_cast<size_t>(i)];
      sample(*in_batch[b], std::span<float>(logits_.data() + b * vocab, vocab), events[b]);
    }
  });
  const auto now = Clock::now();
  for (size_t b : to_sample) {
    Seq& s = *in_batch[b];
    Event& ev = events[b];
    const int32_t id = s.tokens.back();
    ++metrics_.generated_tokens;
    if (s.generated() == 1) metrics_.ttft.observe(seconds(now - s.arrival));
    else metrics_.inter_token.observe(seconds(now - s.last_token));
    s.last_token = now;
    bool done = false;
    if (model_.tokenizer().is_eog(id)) {
      ev.finish_reason = "stop";
      done = true;
    } else {
      auto piece = s.text->feed(id);
      if (!piece) {
        ev.finish_reason = "error";
        ev.error = piece.status().message();
        done = true;
      } else {
        ev.text = std::move(piece->text);
        if (piece->stopped) {
          ev.finish_reason = "stop";
          done = true;
        }
      }
    }
    if (!done && s.generated() >= s.req.max_tokens) {
      ev.finish_reason = "length";
      done = true;
    }
    if (done) {
      if (ev.finish_reason != "stop" || model_.tokenizer().is_eog(id)) ev.text += s.text->flush();
      finish(s, std::move(ev));
      s.chunk = -1;  // marks it for removal
    } else {
      s.handle->push(std::move(ev));
    }
  }
  std::erase_if(running_, [](const auto& sp) { return sp->chunk < 0; });
  metrics_.running = static_cast<int64_t>(running_.size());
  metrics_.kv_blocks_free = pool_->num_free();
  return true;
}

// Runs on a pool thread: touches only this sequence's generator, tokens and its logits row.
void Engine::sample(Seq& s, std::span<float> row, Event& ev) {
  double lse = 0;
  std::vector<float> raw;
  if (s.req.top_logprobs >= 0) {  // log-probabilities of the model's own distribution (before penalties)
    raw.assign(row.begin(), row.end());
    std::vector<float> w = raw, sums(static_cast<size_t>((raw.size() + cpu::kSoftmaxBlock - 1) / cpu::kSoftmaxBlock));
    const float mx = cpu::softmax_weights(w.data(), static_cast<int64_t>(w.size()), 1.0f, sums.data());
    double sum = 0;
    for (float b : sums) sum += b;
    lse = static_cast<double>(mx) + std::log(sum);
  }
  const std::span<const int32_t> generated(s.tokens.data() + s.req.prompt.size(),
                                           s.tokens.size() - s.req.prompt.size());
  const int32_t id = sample_token(row, s.req.sampling, generated, *s.rng, s.scratch);
  s.tokens.push_back(id);
  if (s.req.top_logprobs < 0) return;
  const Tokenizer& tok = model_.tokenizer();
  auto piece = [&tok](int32_t t) {
    auto p = tok.token_to_piece(t);
    return p ? *p : std::string();
  };
  TokenLogprob lp;
  lp.token = piece(id);
  lp.logprob = static_cast<double>(raw[static_cast<size_t>(id)]) - lse;
  const auto k = static_cast<size_t>(std::min<int64_t>(s.req.top_logprobs, static_cast<int64_t>(raw.size())));
  if (k > 0) {
    std::vector<int32_t> ids(raw.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(), [&raw](int32_t a, int32_t b) {
      return raw[static_cast<size_t>(a)] > raw[static_cast<size_t>(b)] ||
             (raw[static_cast<size_t>(a)] == raw[static_cast<size_t>(b)] && a < b);
    });
    for (size_t i = 0; i < k; ++i)
      lp.top.emplace_back(piece(ids[i]), static_cast<double>(raw[static_cast<size_t>(ids[i])]) - lse);
  }
  ev.logprobs.push_back(std::move(lp));
}

}  // namespace lithe::serve

// The server's engine: one scheduler thread that runs iteration-level continuous batching over a
// Model. Each iteration it (1) takes newly submitted requests into the waiting queue and drops
// cancelled ones, (2) gives every decoding sequence one token, taking a KV block when it crosses a
// block boundary and preempting the youngest sequence (freed, recomputed later) when none is free,
// (3) fills the rest of the per-iteration token budget with prompt chunks of prefilling sequences,
// then admits waiting ones (FIFO) while blocks, the budget and --max-batch allow (chunked
// prefill), (4) runs all of them in one Model::forward, and (5) samples a token for each sequence
// whose input is fully cached and streams the text to its RequestHandle. Every sequence's K/V live
// in one paged KvPool (fixed-size blocks, a block table per sequence, kv_pool.h), so admission
// and preemption are decided by the pool's free blocks and no sequence allocates K/V memory (a
// device cache still allocates its positions array, capacity x 4 bytes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lithe/decode/sampler.h"
#include "lithe/models/model.h"
#include "lithe/serve/metrics.h"

namespace lithe::serve {

struct EngineOptions {
  int64_t max_batch = 64;      // sequences admitted at once (decoding + prefilling)
  int64_t batch_tokens = 512;  // tokens per forward pass: decode tokens first, prompt chunks fill the rest
  int64_t ctx = 2048;          // context of one sequence: prompt + max_tokens
  int64_t block_size = 16;     // tokens per KV block
  int64_t kv_blocks = 0;       // blocks in the pool; 0: enough for max_batch sequences of ctx / 4 tokens
  DType kv_dtype = DType::f32;
  // Each sequence's cache: full (prompt + max_tokens <= ctx) or sink / window (cache_policy.h):
  // a rolling cache of span <= ctx slots, so a request may run past ctx (it keeps the first
  // sinks tokens and the most recent window).
  CacheSpec cache;
  int64_t max_queue = 4096;    // waiting requests beyond which submit refuses (overloaded)
  Status validate() const;
  int64_t pool_blocks() const;  // kv_blocks, or its default
  // KV slots a sequence of n tokens occupies: n, or at most the span of a rolling cache.
  int64_t kv_slots(int64_t n) const { return cache.rolling() ? std::min(n, cache.span(ctx)) : n; }
};

struct GenRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  SamplingParams sampling;  // penalties count generated tokens only (as OpenAI's do)
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no logprobs; else the alternatives per token (0..20)
};

struct TokenLogprob {
  std::string token;  // the token's bytes (may be part of a UTF-8 character)
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;  // most likely alternatives, best first
};

// What the scheduler sends a request: text as it becomes safe to show, then one final event.
struct Event {
  std::string text;
  std::vector<TokenLogprob> logprobs;  // of the tokens sampled since the last event (when asked)
  bool done = false;
  std::string finish_reason;  // when done: "stop", "length", "cancelled" or "error"
  std::string error;          // when finish_reason is "error"
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// Shared by the HTTP handler (which waits on it and may cancel) and the scheduler (which pushes).
class RequestHandle {
 public:
  // Waits up to `timeout` for the next event; false on timeout.
  bool next(Event& ev, std::chrono::milliseconds timeout);
  void cancel();
  bool cancelled() const { return cancelled_.load(); }
  void push(Event ev);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
};

class Engine {
 public:
  // The paged KV store the engine's sequences share (options.pool_blocks() blocks, made once;
  // errors name the memory asked for); options are validated first.
  static Result<std::shared_ptr<KvPool>> make_pool(Model& model, const EngineOptions& options);
  Engine(Model& model, const EngineOptions& options, Metrics& metrics, std::shared_ptr<KvPool> pool);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return opts_; }
  Model& model() { return model_; }
  // invalid_argument when the request can never run here (empty prompt, prompt + max_tokens over
  // the context or the block pool); unsupported when the engine is stopping or the queue is full.
  Status check(const GenRequest& req) const;
  Result<std::shared_ptr<RequestHandle>> submit(GenRequest req);
  // Ends the scheduler; requests still queued or running finish with an error.
  void stop();

 private:
  struct Seq;
  void loop();
  bool step();  // one iteration; false when there was nothing to do
  void take_incoming();
  void preempt(std::vector<std::unique_ptr<Seq>>::iterator it);
  void finish(Seq& s, Event ev);
  void sample(Seq& s, std::span<float> row, Event& ev);

  Model& model_;
  EngineOptions opts_;
  Metrics& metrics_;
  std::shared_ptr<KvPool> pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> incoming_;  // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  uint64_t next_id_ = 0;                       // guarded by mu_
  // Scheduler-thread state, ordered by arrival (id).
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  std::vector<float> logits_;
  std::thread thread_;
};

}  // namespace lithe::serve

// KV cache policies by name, for running and comparing them (StreamingLLM, kv_cache.h):
//   full       every token, up to the context (the cache fails when full)
//   window     the most recent W tokens (no sinks), positions re-indexed inside the cache
//   sink       the first S tokens (attention sinks) + the most recent W, re-indexed likewise
//   recompute  not a cache: for every new token the model re-runs the last W tokens from scratch
//              at positions 0..W-1 (the quality reference; perplexity --stream only)
#pragma once

#include <string_view>

#include "lithe/runtime/kv_cache.h"

namespace lithe {

enum class CachePolicy { full, window, recompute, sink };

struct CacheSpec {
  CachePolicy policy = CachePolicy::full;
  int64_t sinks = 4;   // sink only
  int64_t window = 0;  // window / sink / recompute: tokens kept besides the sinks
  // Attention span: S + W for sink, W for window / recompute, `ctx` for full.
  int64_t span(int64_t ctx) const;
  // window / sink: a rolling cache that evicts instead of filling up.
  bool rolling() const { return policy == CachePolicy::window || policy == CachePolicy::sink; }
};

// "full", "window", "recompute", "sink"; errors name the value and the choices.
Result<CachePolicy> parse_cache_policy(std::string_view s);
std::string_view cache_policy_name(CachePolicy p);
// Checks sinks >= 0, window >= 1 (rolling policies and recompute) and that the span fits
// max_context (0: unknown, unchecked), named `context` in the error. Errors name the flag and value.
Status validate_cache_spec(const CacheSpec& spec, int64_t max_context,
                           std::string_view context = "the model's trained context");
// The cache a sequence runs with: full -> KvCache::create(ctx slots), window / sink ->
// create_rolling; recompute is refused (it is an evaluation mode, not a cache).
Result<KvCache> make_cache(const CacheSpec& spec, int64_t n_layers, int64_t ctx, int64_t kv_dim, DType dtype,
                           Device device);
// The same policy as a paged cache in `pool` (KvCache::create_paged / create_paged_rolling).
Result<KvCache> make_paged_cache(const CacheSpec& spec, int64_t ctx, std::shared_ptr<KvPool> pool);

}  // namespace lithe

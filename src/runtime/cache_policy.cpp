// KV cache policies by name, their checks and the caches they make (cache_policy.h).
#include "lithe/runtime/cache_policy.h"

namespace lithe {

int64_t CacheSpec::span(int64_t ctx) const {
  switch (policy) {
    case CachePolicy::full: return ctx;
    case CachePolicy::sink: return sinks + window;
    default: return window;
  }
}

Result<CachePolicy> parse_cache_policy(std::string_view s) {
  if (s == "full") return CachePolicy::full;
  if (s == "window") return CachePolicy::window;
  if (s == "recompute") return CachePolicy::recompute;
  if (s == "sink") return CachePolicy::sink;
  return error(StatusCode::invalid_argument, "unknown --cache '{}': use full, window, recompute or sink", s);
}

std::string_view cache_policy_name(CachePolicy p) {
  switch (p) {
    case CachePolicy::full: return "full";
    case CachePolicy::window: return "window";
    case CachePolicy::recompute: return "recompute";
    case CachePolicy::sink: return "sink";
  }
  return "?";
}

Status validate_cache_spec(const CacheSpec& spec, int64_t max_context, std::string_view context) {
  if (spec.policy == CachePolicy::full) return Status::ok();
  if (spec.sinks < 0) return error(StatusCode::invalid_argument, "--sinks {} must be >= 0", spec.sinks);
  if (spec.window < 1)
    return error(StatusCode::invalid_argument, "--window {} must be >= 1 for --cache {}", spec.window,
                 cache_policy_name(spec.policy));
  const int64_t span = spec.span(0);
  if (max_context > 0 && span > max_context)
    return error(StatusCode::invalid_argument,
                 "--window {}{} spans {} tokens, more than {} of {}: lower --window", spec.window,
                 spec.policy == CachePolicy::sink ? fmt::format(" + --sinks {}", spec.sinks) : "", span, context,
                 max_context);
  return Status::ok();
}

namespace {
Status not_a_cache() {
  return error(StatusCode::invalid_argument,
               "--cache recompute is an evaluation mode of perplexity --stream, not a cache: use full, window or sink");
}
}  // namespace

Result<KvCache> make_cache(const CacheSpec& spec, int64_t n_layers, int64_t ctx, int64_t kv_dim, DType dtype,
                           Device device) {
  switch (spec.policy) {
    case CachePolicy::full: return KvCache::create(n_layers, ctx, kv_dim, dtype, device);
    case CachePolicy::window: return KvCache::create_rolling(n_layers, 0, spec.window, kv_dim, dtype, device);
    case CachePolicy::sink: return KvCache::create_rolling(n_layers, spec.sinks, spec.window, kv_dim, dtype, device);
    case CachePolicy::recompute: break;
  }
  return not_a_cache();
}

Result<KvCache> make_paged_cache(const CacheSpec& spec, int64_t ctx, std::shared_ptr<KvPool> pool) {
  switch (spec.policy) {
    case CachePolicy::full: return KvCache::create_paged(std::move(pool), ctx);
    case CachePolicy::window: return KvCache::create_paged_rolling(std::move(pool), 0, spec.window);
    case CachePolicy::sink: return KvCache::create_paged_rolling(std::move(pool), spec.sinks, spec.window);
    case CachePolicy::recompute: break;
  }
  return not_a_cache();
}

}  // namespace lithe

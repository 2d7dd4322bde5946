#include "lithe/serve/metrics.h"

#include <fmt/format.h>

namespace lithe::serve {
namespace {

const std::vector<double> kLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const std::vector<double> kCountBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

Metrics::Metrics()
    : batch_size(kCountBounds), batch_tokens(kCountBounds), ttft(kLatencyBounds), inter_token(kLatencyBounds),
      request_duration(kLatencyBounds) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

std::string Metrics::render() const {
  std::string out;
  header(out, "lithe_requests_total", "counter", "HTTP requests by endpoint and status code");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, n] : requests_)
      out += fmt::format("lithe_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n", k.first, k.second, n);
  }
  auto scalar = [&out](const char* name, const char* type, const char* help, auto v) {
    header(out, name, type, help);
    out += fmt::format("{} {}\n", name, v);
  };
  scalar("lithe_prompt_tokens_total", "counter", "prompt tokens run through the model", prompt_tokens.load());
  scalar("lithe_generated_tokens_total", "counter", "tokens generated", generated_tokens.load());
  scalar("lithe_preemptions_total", "counter", "sequences preempted (KV blocks ran out; recomputed later)",
         preemptions.load());
  scalar("lithe_cancelled_total", "counter", "requests cancelled (client disconnected)", cancelled.load());
  scalar("lithe_iterations_total", "counter", "scheduler iterations (batched forward passes)", iterations.load());
  scalar("lithe_queue_depth", "gauge", "requests waiting for admission", queue_depth.load());
  scalar("lithe_running_sequences", "gauge", "sequences admitted (prefilling or decoding)", running.load());
  scalar("lithe_kv_blocks_free", "gauge", "free KV blocks", kv_blocks_free.load());
  scalar("lithe_kv_blocks_total", "gauge", "KV blocks in the pool", kv_blocks_total.load());
  batch_size.render("lithe_batch_size", "sequences per forward pass", out);
  batch_tokens.render("lithe_batch_tokens", "tokens per forward pass", out);
  ttft.render("lithe_time_to_first_token_seconds", "from arrival to the first generated token", out);
  inter_token.render("lithe_inter_token_latency_seconds", "between consecutive generated tokens", out);
  request_duration.render("lithe_request_duration_seconds", "from arrival to the last token", out);
  return out;
}

}  // namespace lithe::serve

// Server metrics in the Prometheus text format (GET /metrics): request counts by endpoint and
// status, prompt and generated token counters, queue depth and running sequences, KV blocks,
// preemptions and cancellations, and histograms of batch size, batch tokens, time to first token,
// inter-token latency and request duration. Thread-safe; updated by the HTTP threads and the
// scheduler.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lithe::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends the _bucket/_sum/_count lines of `name`.
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last: +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  Metrics();
  void count_request(const std::string& endpoint, int status);
  std::string render() const;

  std::atomic<uint64_t> prompt_tokens{0}, generated_tokens{0}, preemptions{0}, cancelled{0}, iterations{0};
  std::atomic<int64_t> queue_depth{0}, running{0}, kv_blocks_free{0}, kv_blocks_total{0};
  Histogram batch_size, batch_tokens, ttft, inter_token, request_duration;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

}  // namespace lithe::serve

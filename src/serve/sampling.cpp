#include "lithe/serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "lithe/kernels/cpu.h"

namespace lithe::serve {
namespace {

// The last token with weight > 0 (a draw that rounding carried past the total).
int32_t last_positive(std::span<const float> w) {
  for (size_t i = w.size(); i-- > 0;)
    if (w[i] > 0) return static_cast<int32_t>(i);
  return 0;
}

// Nucleus: the most likely tokens until their mass reaches top_p * total; sorts a growing prefix only.
int32_t sample_nucleus(std::span<const float> w, double total, float top_p, double u,
                       std::vector<std::pair<float, int32_t>>& order) {
  const auto vocab = static_cast<int32_t>(w.size());
  order.resize(w.size());
  for (int32_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = {w[static_cast<size_t>(i)], i};
  auto desc = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  const double want = static_cast<double>(top_p) * total;
  size_t sorted = 0, keep = 0;
  double mass = 0;
  for (size_t k = 64;; k *= 4) {
    k = std::min(k, order.size());
    std::partial_sort(order.begin() + static_cast<long>(sorted), order.begin() + static_cast<long>(k), order.end(),
                      desc);
    for (; sorted < k; ++sorted) {
      mass += order[sorted].first;
      if (mass >= want) break;
    }
    if (sorted < k || k == order.size()) {
      keep = std::min(sorted + 1, order.size());
      break;
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += order[i].first;
  double r = u * kept;
  for (size_t i = 0; i < keep; ++i) {
    r -= order[i].first;
    if (r < 0) return order[i].second;
  }
  return order[keep - 1].second;
}

}  // namespace

int32_t sample_token(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> generated,
                     std::mt19937_64& rng, SampleScratch& scratch) {
  const auto vocab = static_cast<int64_t>(logits.size());
  if (p.frequency_penalty != 0 || p.presence_penalty != 0) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : generated) counts[id]++;
    for (const auto& [id, n] : counts)
      if (id >= 0 && id < vocab)
        logits[static_cast<size_t>(id)] -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
  }
  if (p.temperature <= 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Weights exp((l - max) / T) in place of the logits, with their sums per block.
  const int64_t n_blocks = (vocab + cpu::kSoftmaxBlock - 1) / cpu::kSoftmaxBlock;
  scratch.block_sums.resize(static_cast<size_t>(n_blocks));
  cpu::softmax_weights(logits.data(), vocab, 1.0f / p.temperature, scratch.block_sums.data());
  double total = 0;
  for (float s : scratch.block_sums) total += s;
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (!(total > 0) || !std::isfinite(total)) return last_positive(logits);
  if (p.top_p < 1.0f) return sample_nucleus(logits, total, p.top_p, u, scratch.order);
  // The whole distribution: the block the draw falls in, then the token in it (id order).
  double r = u * total;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const double s = scratch.block_sums[static_cast<size_t>(b)];
    if (r >= s) {
      r -= s;
      continue;
    }
    const int64_t e = std::min(vocab, (b + 1) * cpu::kSoftmaxBlock);
    for (int64_t i = b * cpu::kSoftmaxBlock; i < e; ++i) {
      r -= logits[static_cast<size_t>(i)];
      if (r < 0) return static_cast<int32_t>(i);
    }
    r = 0;  // rounding inside the block: the draw goes on from the next block's start
  }
  return last_positive(logits);
}

}  // namespace lithe::serve

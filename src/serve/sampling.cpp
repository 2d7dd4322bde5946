#include "lithe/serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace lithe::serve {

int32_t sample_token(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> generated,
                     std::mt19937_64& rng, std::vector<std::pair<float, int32_t>>& scratch) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (p.frequency_penalty != 0 || p.presence_penalty != 0) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : generated) counts[id]++;
    for (const auto& [id, n] : counts)
      if (id >= 0 && id < vocab)
        logits[static_cast<size_t>(id)] -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
  }
  const auto best = std::max_element(logits.begin(), logits.end());
  if (p.temperature <= 0) return static_cast<int32_t>(best - logits.begin());
  const float mx = *best, inv_t = 1.0f / p.temperature;
  // Weights exp((l - max) / T), in place of the logits.
  double total = 0;
  for (float& l : logits) total += l = std::exp((l - mx) * inv_t);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (p.top_p >= 1.0f) {  // the whole distribution: a scan in id order
    double r = u(rng) * total;
    for (int32_t i = 0; i < vocab; ++i) {
      r -= logits[static_cast<size_t>(i)];
      if (r < 0) return i;
    }
    return static_cast<int32_t>(best - logits.begin());
  }
  // Nucleus: the most likely tokens until their mass reaches top_p; sort a growing prefix only.
  scratch.resize(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) scratch[static_cast<size_t>(i)] = {logits[static_cast<size_t>(i)], i};
  auto desc = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  const double want = static_cast<double>(p.top_p) * total;
  size_t sorted = 0, keep = 0;
  double mass = 0;
  for (size_t k = 64;; k *= 4) {
    k = std::min(k, scratch.size());
    std::partial_sort(scratch.begin() + static_cast<long>(sorted), scratch.begin() + static_cast<long>(k),
                      scratch.end(), desc);
    for (; sorted < k; ++sorted) {
      mass += scratch[sorted].first;
      if (mass >= want) break;
    }
    if (sorted < k || k == scratch.size()) {
      keep = std::min(sorted + 1, scratch.size());
      break;
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += scratch[i].first;
  double r = u(rng) * kept;
  for (size_t i = 0; i < keep; ++i) {
    r -= scratch[i].first;
    if (r < 0) return scratch[i].second;
  }
  return scratch[keep - 1].second;
}

}  // namespace lithe::serve

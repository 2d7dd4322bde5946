#include "lithe/decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace lithe {

Status SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return error(StatusCode::invalid_argument, "temperature {} must be >= 0", temperature);
  if (!(top_p > 0 && top_p <= 1)) return error(StatusCode::invalid_argument, "top_p {} must be in (0, 1]", top_p);
  if (!(min_p >= 0 && min_p <= 1)) return error(StatusCode::invalid_argument, "min_p {} must be in [0, 1]", min_p);
  if (!(repeat_penalty > 0)) return error(StatusCode::invalid_argument, "repeat_penalty {} must be > 0", repeat_penalty);
  if (repeat_last_n < 0) return error(StatusCode::invalid_argument, "repeat_last_n {} must be >= 0", repeat_last_n);
  if (!std::isfinite(frequency_penalty) || !std::isfinite(presence_penalty))
    return error(StatusCode::invalid_argument, "penalties must be finite");
  return Status::ok();
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

double Sampler::logprob(std::span<const float> logits, int32_t id) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
  return static_cast<double>(logits[static_cast<size_t>(id)] - mx) - std::log(sum);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const auto vocab = static_cast<int32_t>(logits.size());
  // Penalties over the last repeat_last_n tokens.
  if (penalties_on()) {
    std::unordered_map<int32_t, int> counts;
    const size_t n = std::min(history.size(), static_cast<size_t>(p_.repeat_last_n));
    for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
    for (const auto& [id, cnt] : counts) {
      if (id < 0 || id >= vocab) continue;
      float& l = logits[static_cast<size_t>(id)];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= static_cast<float>(cnt) * p_.frequency_penalty + p_.presence_penalty;
    }
  }
  if (p_.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit (top-k first keeps the sort small).
  cand_.clear();
  cand_.reserve(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) cand_.emplace_back(logits[static_cast<size_t>(i)], i);
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = static_cast<size_t>(p_.top_k);
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<long>(keep), cand_.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  cand_.resize(keep);
  return finish();
}

bool Sampler::penalties_on() const {
  return p_.repeat_last_n > 0 && (p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0 || p_.presence_penalty != 0);
}

int Sampler::candidates_needed() const {
  if (penalties_on()) return 0;
  if (p_.temperature <= 0) return 1;
  return std::max(p_.top_k, 0);
}

int32_t Sampler::sample_top(std::span<const float> vals, std::span<const int32_t> ids) {
  if (p_.temperature <= 0) return ids[0];  // (no draw, as sample())
  cand_.clear();
  for (size_t i = 0; i < vals.size(); ++i) cand_.emplace_back(vals[i], ids[i]);
  return finish();
}

int32_t Sampler::finish() {
  size_t keep = cand_.size();
  // Probabilities of the survivors (before temperature, as llama.cpp's top-p/min-p see them).
  const float mx = cand_[0].first;
  std::vector<double> prob(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].first - mx));
  for (double& p : prob) p /= sum;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t i = 0;
    for (; i < prob.size(); ++i) {
      cum += prob[i];
      if (cum >= p_.top_p) {
        ++i;
        break;
      }
    }
    keep = std::max<size_t>(1, std::min(i, prob.size()));
    cand_.resize(keep);
    prob.resize(keep);
  }
  if (p_.min_p > 0) {
    const double floor = prob[0] * p_.min_p;
    size_t i = 1;
    while (i < prob.size() && prob[i] >= floor) ++i;
    cand_.resize(i);
    prob.resize(i);
  }
  // Temperature on the survivors, then draw.
  std::vector<double> w(cand_.size());
  double total = 0;
  for (size_t i = 0; i < cand_.size(); ++i)
    total += w[i] = std::exp(static_cast<double>(cand_[i].first - mx) / p_.temperature);
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_);
  for (size_t i = 0; i < w.size(); ++i) {
    if (r < w[i]) return cand_[i].second;
    r -= w[i];
  }
  return cand_.back().second;
}

}  // namespace lithe

// Token sampling from logits. Order (as llama.cpp): repetition/frequency/presence penalties over
// the recent history, then top-k, top-p, min-p on the probabilities, then temperature, then a
// draw from the seeded generator. temperature <= 0 is greedy (argmax after penalties).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "lithe/core/status.h"

namespace lithe {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off (divides positive logits, multiplies negative ones)
  int repeat_last_n = 64;       // history window of the penalties
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  Status validate() const;  // errors name the parameter and its range
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // logits: one row of vocab floats (modified in place by the penalties).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // How many of a row's largest logits sampling needs: 1 when greedy, top_k when top-k is on, 0
  // when it needs the whole row (penalties on, or top-k off). Lets a GPU reduce the row first.
  int candidates_needed() const;
  // Samples from a row's `vals.size()` largest logits (value descending, ties by smaller id, with
  // ids): the same draw sample() makes on the whole row when that count is candidates_needed().
  int32_t sample_top(std::span<const float> vals, std::span<const int32_t> ids);
  // log-softmax of the (penalised) logits at `id`, for logprobs.
  static double logprob(std::span<const float> logits, int32_t id);
  void reseed(uint64_t seed) { rng_.seed(seed); }

 private:
  SamplingParams p_;
  // top-p, min-p, temperature and the draw over cand_ (sorted, top-k applied).
  int32_t finish();
  bool penalties_on() const;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch
};

}  // namespace lithe

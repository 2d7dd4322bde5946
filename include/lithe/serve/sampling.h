// Token sampling with OpenAI's semantics, fast enough to run once per sequence per batched step:
// presence/frequency penalties over the generated tokens, then temperature, then nucleus (top_p)
// over the tempered distribution (lithe::Sampler follows llama.cpp's order instead, and sorts the
// whole vocabulary when top-k is off). temperature 0 is greedy. Only the candidates that top_p
// keeps are sorted; with top_p = 1 nothing is. The weights come from cpu::softmax_weights (SIMD
// exp, sums per block), so a draw first finds its block, then its token.
#pragma once

#include <random>
#include <span>
#include <vector>

#include "lithe/decode/sampler.h"

namespace lithe::serve {

// Buffers reused between calls (one per sequence).
struct SampleScratch {
  std::vector<float> block_sums;                  // weight sums per cpu::kSoftmaxBlock logits
  std::vector<std::pair<float, int32_t>> order;  // top_p candidates, sorted by weight as needed
};

// logits: one row, overwritten (penalties, then the weights of the tempered distribution).
int32_t sample_token(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> generated,
                     std::mt19937_64& rng, SampleScratch& scratch);

}  // namespace lithe::serve

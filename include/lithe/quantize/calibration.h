// Calibration data for the compression pipeline: random token windows from a text.
//
// As the GPTQ reference (datautils.get_c4/get_wikitext2) does, the whole text is tokenized once
// as one sequence (no BOS/EOS, special tokens not parsed) and nsamples windows of seqlen
// consecutive tokens are cut from it at random starts. The draw: std::mt19937_64 seeded with
// `seed`, and for each window in order a start from
// std::uniform_int_distribution<int64_t>(0, n_tokens - seqlen) (inclusive bounds), so windows may
// overlap and repeat. The distribution's algorithm is the standard library's; the same seed gives
// the same windows with the same library (libstdc++ here).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "lithe/core/status.h"
#include "lithe/tokenizer/tokenizer.h"

namespace lithe::compress {

// The default calibration text, relative to the source tree (the SOTU calibration split).
inline constexpr const char* kDefaultCalibrationText = "data/sotu-calib.txt";

// nsamples windows of seqlen tokens each. invalid_argument when nsamples or seqlen is not
// positive, or when the text has fewer than seqlen tokens (the message names the token count,
// nsamples and seqlen).
Result<std::vector<std::vector<int32_t>>> calibration_windows(const Tokenizer& tok, std::string_view text,
                                                               int64_t nsamples, int64_t seqlen, uint64_t seed);

// The same draw over an already tokenized text.
Result<std::vector<std::vector<int32_t>>> calibration_windows(std::span<const int32_t> tokens, int64_t nsamples,
                                                               int64_t seqlen, uint64_t seed);

// nsamples windows of seqlen uniform random token ids in [0, vocab) (std::mt19937_64 seeded with
// `seed`): calibration for synthetic models, which have no tokenizer (timing only).
Result<std::vector<std::vector<int32_t>>> random_token_windows(int64_t vocab, int64_t nsamples, int64_t seqlen,
                                                                uint64_t seed);

}  // namespace lithe::compress

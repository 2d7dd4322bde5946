// Random calibration windows (see calibration.h for the draw).
#include "lithe/quantize/calibration.h"

#include <cstdint>
#include <random>

namespace lithe::compress {

Result<std::vector<std::vector<int32_t>>> calibration_windows(std::span<const int32_t> tokens, int64_t nsamples,
                                                               int64_t seqlen, uint64_t seed) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (nsamples <= 0 || seqlen <= 0)
    return error(StatusCode::invalid_argument, "calibration needs nsamples > 0 and seqlen > 0 (got {} and {})",
                 nsamples, seqlen);
  if (n < seqlen)
    return error(StatusCode::invalid_argument,
                 "the calibration text has {} tokens, too few for {} windows of {} tokens (need at least {})", n,
                 nsamples, seqlen, seqlen);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> start(0, n - seqlen);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(nsamples));
  for (auto& w : out) {
    const int64_t s = start(rng);
    w.assign(tokens.begin() + s, tokens.begin() + s + seqlen);
  }
  return out;
}

Result<std::vector<std::vector<int32_t>>> calibration_windows(const Tokenizer& tok, std::string_view text,
                                                               int64_t nsamples, int64_t seqlen, uint64_t seed) {
  if (nsamples <= 0 || seqlen <= 0)  // checked before the (possibly long) tokenization
    return calibration_windows(std::span<const int32_t>(), nsamples, seqlen, seed);
  EncodeOptions opt;  // no BOS/EOS: the text is one concatenated stream
  opt.invalid_utf8 = InvalidUtf8::replace;
  LITHE_ASSIGN(std::vector<int32_t> ids, tok.encode(text, opt));
  return calibration_windows(std::span<const int32_t>(ids), nsamples, seqlen, seed);
}

Result<std::vector<std::vector<int32_t>>> random_token_windows(int64_t vocab, int64_t nsamples, int64_t seqlen,
                                                                uint64_t seed) {
  if (nsamples <= 0 || seqlen <= 0 || vocab <= 0 || vocab > INT32_MAX)
    return error(StatusCode::invalid_argument,
                 "random calibration needs nsamples > 0, seqlen > 0 and a vocabulary (got {}, {}, {})", nsamples,
                 seqlen, vocab);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(nsamples));
  for (auto& w : out) {
    w.resize(static_cast<size_t>(seqlen));
    for (auto& t : w) t = id(rng);
  }
  return out;
}

}  // namespace lithe::compress

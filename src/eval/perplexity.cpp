#include "lithe/eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "lithe/core/file_util.h"
#include "lithe/core/half.h"
#include "lithe/runtime/backend.h"

namespace lithe {

Result<PplProtocol> parse_ppl_protocol(std::string_view s) {
  if (s == "gptq") return PplProtocol::gptq;
  if (s == "llamacpp") return PplProtocol::llamacpp;
  return error(StatusCode::invalid_argument, "unknown perplexity protocol '{}': use gptq or llamacpp", s);
}

std::string_view ppl_protocol_name(PplProtocol p) { return p == PplProtocol::gptq ? "gptq" : "llamacpp"; }

namespace {

// Baseline file: magic "LITHEKLD", u32 version 1, u32 vocab, u64 positions, then per position
// i32 next-token id followed by vocab f16 log-probs.
constexpr char kKldMagic[8] = {'L', 'I', 'T', 'H', 'E', 'K', 'L', 'D'};

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

void log_softmax(const float* logits, int64_t n, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n));
  const float lse = log_sum_exp(logits, n);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = logits[i] - lse;
}

}  // namespace

Result<PerplexityResult> perplexity(Model& model, const std::string& text, const PerplexityOptions& o,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  PerplexityResult r;
  r.protocol = o.protocol;
  r.ctx = o.ctx > 0 ? o.ctx : (o.protocol == PplProtocol::gptq ? 2048 : 512);
  if (r.ctx < 4) return error(StatusCode::invalid_argument, "--ctx {} is too small (at least 4)", r.ctx);
  if (o.batch <= 0) return error(StatusCode::invalid_argument, "--batch {} must be positive", o.batch);
  const Tokenizer& tok = model.tokenizer();
  EncodeOptions eo = tok.default_encode_options();
  eo.invalid_utf8 = InvalidUtf8::replace;  // a malformed text file is scored, not refused
  LITHE_ASSIGN(std::vector<int32_t> ids, tok.encode(text, eo));
  r.text_tokens = static_cast<int64_t>(ids.size());
  int64_t windows = r.text_tokens / r.ctx;
  if (windows == 0)
    return error(StatusCode::invalid_argument, "the text has {} tokens, fewer than one window of --ctx {}",
                 r.text_tokens, r.ctx);
  if (o.max_windows > 0) windows = std::min(windows, o.max_windows);
  r.windows = windows;
  const int64_t first = o.protocol == PplProtocol::gptq ? 0 : r.ctx / 2;  // first logit row scored
  const int64_t vocab = model.config().vocab_size;

  FilePtr save, base;
  if (!o.save_logits.empty()) {
    save.reset(std::fopen((o.save_logits + ".part").c_str(), "wb"));  // renamed into place at the end
    if (!save) return error(StatusCode::io_error, "cannot create '{}.part'", o.save_logits);
    const uint32_t header[2] = {1, static_cast<uint32_t>(vocab)};
    const uint64_t positions = static_cast<uint64_t>(windows * (r.ctx - first - 1));
    std::fwrite(kKldMagic, 1, 8, save.get());
    std::fwrite(header, 4, 2, save.get());
    std::fwrite(&positions, 8, 1, save.get());
  }
  if (!o.kld_base.empty()) {
    base.reset(std::fopen(o.kld_base.c_str(), "rb"));
    if (!base) return error(StatusCode::not_found, "cannot open baseline '{}'", o.kld_base);
    char magic[8];
    uint32_t header[2];
    uint64_t positions = 0;
    if (std::fread(magic, 1, 8, base.get()) != 8 || std::memcmp(magic, kKldMagic, 8) != 0 ||
        std::fread(header, 4, 2, base.get()) != 2 || std::fread(&positions, 8, 1, base.get()) != 1)
      return error(StatusCode::corrupt_file, "'{}' is not a lithe --save-logits file", o.kld_base);
    if (header[0] != 1 || header[1] != vocab)
      return error(StatusCode::invalid_argument, "baseline '{}' has version {} and vocabulary {}, model has {}",
                   o.kld_base, header[0], header[1], vocab);
    if (positions < static_cast<uint64_t>(windows * (r.ctx - first - 1)))
      return error(StatusCode::invalid_argument,
                   "baseline '{}' holds {} positions but this run scores {}: use the same text, --ctx, --protocol "
                   "and --max-windows",
                   o.kld_base, positions, windows * (r.ctx - first - 1));
    r.has_kld = true;
  }

  LITHE_ASSIGN(KvCache cache, model.new_cache(r.ctx, o.kv_dtype));
  std::vector<float> logits, lp, base_lp(static_cast<size_t>(vocab));
  std::vector<int32_t> targets;
  std::vector<uint16_t> half(static_cast<size_t>(vocab));
  double nll_sum = 0, base_nll_sum = 0, kld_sum = 0;
  int64_t agree = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> win(ids.begin() + w * r.ctx, ids.begin() + (w + 1) * r.ctx);
    if (o.protocol == PplProtocol::llamacpp && eo.add_bos && tok.bos_id() >= 0) win[0] = tok.bos_id();
    cache.clear();
    double win_nll = 0;
    int64_t win_n = 0;
    for (int64_t c0 = 0; c0 < r.ctx; c0 += o.batch) {
      const int64_t n = std::min(o.batch, r.ctx - c0);
      const std::span<const int32_t> chunk(win.data() + c0, static_cast<size_t>(n));
      if (!save && !base) {  // only the next tokens' log-probabilities leave the backend
        targets.assign(static_cast<size_t>(n), -1);
        for (int64_t j = std::max(c0, first); j < c0 + n && j + 1 < r.ctx; ++j)
          targets[static_cast<size_t>(j - c0)] = win[static_cast<size_t>(j + 1)];
        LITHE_TRY(model.forward_logprobs(cache, chunk, targets, lp));
        for (int64_t j = std::max(c0, first); j < c0 + n && j + 1 < r.ctx; ++j) {
          win_nll -= static_cast<double>(lp[static_cast<size_t>(j - c0)]);
          ++win_n;
        }
        continue;
      }
      LITHE_TRY(model.forward(cache, chunk, true, logits));
      for (int64_t j = std::max(c0, first); j < c0 + n && j + 1 < r.ctx; ++j) {
        const float* row = logits.data() + (j - c0) * vocab;
        const int32_t next = win[static_cast<size_t>(j + 1)];
        log_softmax(row, vocab, lp);
        const double nll = -static_cast<double>(lp[static_cast<size_t>(next)]);
        win_nll += nll;
        ++win_n;
        if (save) {
          for (int64_t i = 0; i < vocab; ++i) half[static_cast<size_t>(i)] = f32_to_f16(lp[static_cast<size_t>(i)]);
          std::fwrite(&next, 4, 1, save.get());
          std::fwrite(half.data(), 2, half.size(), save.get());
        }
        if (base) {
          int32_t base_next = 0;
          if (std::fread(&base_next, 4, 1, base.get()) != 1 ||
              std::fread(half.data(), 2, half.size(), base.get()) != half.size())
            return error(StatusCode::corrupt_file, "baseline '{}' ends early", o.kld_base);
          if (base_next != next)
            return error(StatusCode::invalid_argument,
                         "baseline '{}' was made from different tokens (position {}: {} vs {})", o.kld_base, win_n,
                         base_next, next);
          double kld = 0;
          int64_t arg_b = 0, arg_m = 0;
          for (int64_t i = 0; i < vocab; ++i) {
            const float b = f16_to_f32(half[static_cast<size_t>(i)]);
            base_lp[static_cast<size_t>(i)] = b;
            kld += std::exp(static_cast<double>(b)) * (static_cast<double>(b) - lp[static_cast<size_t>(i)]);
            if (b > base_lp[static_cast<size_t>(arg_b)]) arg_b = i;
            if (lp[static_cast<size_t>(i)] > lp[static_cast<size_t>(arg_m)]) arg_m = i;
          }
          kld_sum += kld;
          r.kld_max = std::max(r.kld_max, kld);
          agree += arg_b == arg_m;
          base_nll_sum -= base_lp[static_cast<size_t>(next)];
        }
      }
    }
    nll_sum += win_nll;
    r.tokens += win_n;
    r.window_ppl.push_back(std::exp(win_nll / static_cast<double>(win_n)));
    if (progress) progress(w + 1, windows);
  }
  if (save) {
    if (std::fflush(save.get()) != 0 || std::ferror(save.get()))
      return error(StatusCode::io_error, "cannot write '{}.part'", o.save_logits);
    save.reset();
    if (std::rename((o.save_logits + ".part").c_str(), o.save_logits.c_str()) != 0)
      return error(StatusCode::io_error, "cannot rename '{}.part' into place", o.save_logits);
  }
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.ppl = std::exp(r.nll);
  if (r.has_kld) {
    r.kld_mean = kld_sum / static_cast<double>(r.tokens);
    r.top1_agreement = static_cast<double>(agree) / static_cast<double>(r.tokens);
    r.base_ppl = std::exp(base_nll_sum / static_cast<double>(r.tokens));
    r.delta_ppl = r.ppl - r.base_ppl;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace lithe

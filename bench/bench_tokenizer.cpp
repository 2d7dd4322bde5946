// Tokenizer encode/decode throughput on one core over the SOTU corpus.
//
//   bench_tokenizer MODEL SOTU_DIR [--reps N] [--json]
//
// MODEL: .gguf, tokenizer.json or a directory with tokenizer.json. Every address is encoded as one
// text (as a prompt would be), in file-name order; a repetition encodes the whole corpus. Reports
// the median and min/max over repetitions of MB/s (10^6 bytes of UTF-8 text per second) and tokens/s,
// for encode and for decode. bench/tokenizer_speed.py runs this next to Hugging Face tokenizers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lithe/tokenizer/tokenizer.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stats {
  double median, min, max;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL SOTU_DIR [--reps N] [--json]\n", argv[0]);
    return 2;
  }
  int reps = 5;
  bool json = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    if (std::strcmp(argv[i], "--json") == 0) json = true;
  }
  auto tok = lithe::load_tokenizer_from_path(argv[1]);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[2])) {
    if (e.path().extension() == ".txt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
    bytes += texts.back().size();
  }
  if (texts.empty()) {
    std::fprintf(stderr, "error: no .txt files in %s\n", argv[2]);
    return 1;
  }

  std::vector<std::vector<int32_t>> ids(texts.size());
  std::vector<double> enc_mbs, dec_mbs;
  size_t tokens = 0;
  for (int r = 0; r <= reps; ++r) {  // repetition 0 warms up
    const double t0 = now_s();
    tokens = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      auto res = (*tok)->encode(texts[i]);
      if (!res.is_ok()) {
        std::fprintf(stderr, "error: %s\n", res.status().to_string().c_str());
        return 1;
      }
      ids[i] = std::move(res).value();
      tokens += ids[i].size();
    }
    const double t1 = now_s();
    size_t out_bytes = 0;
    for (const auto& v : ids) out_bytes += (*tok)->decode(v).value().size();
    const double t2 = now_s();
    if (out_bytes != bytes) {
      std::fprintf(stderr, "error: decode gave %zu bytes for %zu\n", out_bytes, bytes);
      return 1;
    }
    if (r == 0) continue;
    enc_mbs.push_back(static_cast<double>(bytes) / 1e6 / (t1 - t0));
    dec_mbs.push_back(static_cast<double>(bytes) / 1e6 / (t2 - t1));
  }
  const Stats e = stats(enc_mbs), d = stats(dec_mbs);
  const double tok_per_byte = static_cast<double>(tokens) / static_cast<double>(bytes);
  if (json) {
    std::printf(
        "{\"files\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"reps\": %d, \"encode_mb_s\": {\"median\": %.3f, \"min\": %.3f, "
        "\"max\": %.3f}, \"decode_mb_s\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}, \"encode_tokens_s\": %.0f}\n",
        texts.size(), bytes, tokens, reps, e.median, e.min, e.max, d.median, d.min, d.max, e.median * 1e6 * tok_per_byte);
  } else {
    std::printf("corpus: %zu files, %.2f MB, %zu tokens (%.2f bytes/token)\n", texts.size(), static_cast<double>(bytes) / 1e6,
                tokens, 1.0 / tok_per_byte);
    std::printf("encode: %.2f MB/s median (min %.2f, max %.2f) over %d reps, %.0f tokens/s\n", e.median, e.min, e.max,
                reps, e.median * 1e6 * tok_per_byte);
    std::printf("decode: %.2f MB/s median (min %.2f, max %.2f)\n", d.median, d.min, d.max);
  }
  return 0;
}

// Autoregressive generation: prefill the prompt (in chunks), then sample token by token until
// max_tokens, an end-of-generation token, or a stop string. Text is streamed through a callback
// as complete UTF-8, holding back any tail that could still become a stop string.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lithe/decode/sampler.h"
#include "lithe/models/model.h"

namespace lithe {

struct GenerateOptions {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any
  bool stop_at_eog = true;
  int64_t prefill_chunk = 512;    // prompt tokens per forward pass
};

struct GenerateResult {
  std::string text;                 // generated text, stop string excluded
  std::vector<int32_t> tokens;      // generated ids (including a final end-of-generation id)
  std::string finish_reason;        // "length", "stop" (string or end-of-generation), "context"
  int64_t prompt_tokens = 0;        // tokens actually run (after any reused cache prefix)
  double prompt_seconds = 0, generate_seconds = 0;
};

// Runs `prompt` after whatever `cache` already holds, reusing the cached prefix it shares with
// `history` (the ids the cache has seen; updated to include prompt and output). A rolling cache
// (sink / window policy) never ends a reply with "context": it evicts, and takes prompts longer
// than itself in chunks of at most its window.
// on_text returns false to stop early (client gone).
Result<GenerateResult> generate(Model& model, KvCache& cache, std::vector<int32_t>& history,
                                const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const std::function<bool(std::string_view)>& on_text = {});

}  // namespace lithe

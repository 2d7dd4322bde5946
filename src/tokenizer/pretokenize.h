// Pre-tokenizers of byte-level BPE: the text is cut into words by a sequence of split rules, each
// the hand-coded equivalent of one regex that Hugging Face tokenizers runs with Oniguruma.
// A rule splits every fragment produced by the rules before it (HF Sequence of Split/ByteLevel
// pre-tokenizers, behavior "Isolated": matches and the gaps between them become fragments).
//
// The table maps GGUF `tokenizer.ggml.pre` names to rule sequences; adding a pre-tokenizer is one
// row there (and, for a new regex, one matcher function).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lithe/core/status.h"

namespace lithe::tok {

// Per-code-point class bits used by the matchers.
enum CharClass : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

struct SplitText {
  const uint32_t* cps;   // code points
  const uint8_t* cls;    // CharClass bits per code point
};

// Length (in code points) of the rule's match starting exactly at i, with `end` acting as the end
// of the input; 0 when the regex does not match at i.
using MatchFn = size_t (*)(const SplitText& t, size_t i, size_t end);

struct SplitRule {
  const char* regex;  // the HF/Oniguruma pattern this implements (used for tokenizer.json)
  MatchFn match;
};

const SplitRule* find_split_rule(std::string_view regex);
const std::vector<SplitRule>& split_rules();

// Rule sequence of a GGUF pre-tokenizer name; not_found lists the names known.
Result<std::vector<const SplitRule*>> pretokenizer_preset(std::string_view name);
// The preset name whose rule sequence equals `rules`, or empty.
std::string preset_name_for(const std::vector<const SplitRule*>& rules);
std::vector<std::string> preset_names();

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<const SplitRule*> rules) : rules_(std::move(rules)) {}
  const std::vector<const SplitRule*>& rules() const { return rules_; }

  // Splits valid UTF-8 `text` into words, as byte ranges [first, second) in order.
  // Scratch vectors are reused between calls by the caller.
  struct Scratch {
    std::vector<uint32_t> cps;
    std::vector<uint8_t> cls;
    std::vector<uint32_t> offsets;  // byte offset of each code point (+ one past the end)
    std::vector<uint32_t> a, b;     // fragment boundaries
  };
  void split(std::string_view text, Scratch& s, std::vector<std::pair<uint32_t, uint32_t>>& words) const;

 private:
  std::vector<const SplitRule*> rules_;
};

}  // namespace lithe::tok

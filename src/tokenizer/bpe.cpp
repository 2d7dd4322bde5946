// BPE with ranked merges (Hugging Face `BPE` model semantics): the symbols of a word start as its
// bytes (byte-level) or characters (char-level); the adjacent pair with the lowest merge rank is
// merged, leftmost first on ties, until no pair has a merge.
#include <algorithm>
#include <climits>
#include <queue>

#include "tokenizer_impl.h"
#include "unicode.h"

namespace lithe::tok {
namespace {

// Open-addressing hash map (left id, right id) -> (rank, merged id). Linear probing, load <= 0.5.
class PairMap {
 public:
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t result = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Returns false when the pair is already present (the first rank wins).
  bool insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
    const uint64_t k = key(left, right);
    for (size_t i = hash(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {k, rank, result};
        return true;
      }
    }
  }
  const Slot* find(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    const uint64_t k = key(left, right);
    for (size_t i = hash(k);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t key(int32_t l, int32_t r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  size_t hash(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Symbols of a word: a token id, or -(1 + byte offset in the word) for a character that is not a
// token (resolved after merging: byte fallback or unk).
using Symbols = std::vector<int32_t>;

class BpeModel final : public Model {
 public:
  BpeModel(const TokenizerSpec& spec, const TokenIndex& index) : spec_(spec), index_(index) {}

  Status init() {
    const auto n_vocab = static_cast<int32_t>(spec_.tokens.size());
    merges_.reserve(spec_.merges.size());
    for (size_t r = 0; r < spec_.merges.size(); ++r) {
      const auto& [a, b] = spec_.merges[r];
      const int32_t ia = index_.find(a), ib = index_.find(b);
      if (ia < 0 || ib < 0) {
        return error(StatusCode::corrupt_file, "merge {} ('{} {}') names '{}', which is not in the vocabulary", r, a, b,
                     ia < 0 ? a : b);
      }
      const int32_t ir = index_.find(a + b);
      if (ir < 0) {
        return error(StatusCode::corrupt_file, "merge {} ('{} {}') makes '{}', which is not in the vocabulary", r, a, b,
                     a + b);
      }
      merges_.insert(ia, ib, static_cast<int32_t>(r), ir);
    }
    byte_ids_.fill(-1);
    fallback_ids_.fill(-1);
    if (spec_.byte_level) {
      const auto& table = byte_to_unicode();
      for (int b = 0; b < 256; ++b) byte_ids_[b] = index_.find(table[b]);
      LITHE_ASSIGN(auto rules, spec_split_rules(spec_));
      pre_ = PreTokenizer(std::move(rules));
    } else {
      for (int b = 0; b < 256; ++b) fallback_ids_[b] = index_.find(fmt::format("<0x{:02X}>", b));
      if (spec_.byte_fallback) {
        for (int b = 0; b < 256; ++b) {
          if (fallback_ids_[b] < 0) {
            return error(StatusCode::corrupt_file, "byte_fallback is set but the token <0x{:02X}> is missing", b);
          }
        }
      }
    }
    (void)n_vocab;
    return Status::ok();
  }

  void encode(std::string_view segment, std::vector<int32_t>& out) const override {
    thread_local Scratch s;
    if (spec_.byte_level) {
      pre_.split(segment, s.pre, s.words);
      for (const auto& [b, e] : s.words) encode_word(segment.substr(b, e - b), s, out);
      return;
    }
    // Char-level: ' ' -> "▁" (metaspace); words split before each "▁" when asked.
    std::string_view text = segment;
    if (spec_.metaspace) {
      s.text.clear();
      for (char c : segment) {
        if (c == ' ') {
          s.text.append(kMetaspace);
        } else {
          s.text.push_back(c);
        }
      }
      text = s.text;
    }
    if (spec_.metaspace && spec_.metaspace_split) {
      size_t start = 0;
      for (size_t p = text.find(kMetaspace, 1); p != std::string_view::npos; p = text.find(kMetaspace, p + 1)) {
        encode_word(text.substr(start, p - start), s, out);
        start = p;
      }
      encode_word(text.substr(start), s, out);
    } else if (!text.empty()) {
      encode_word(text, s, out);
    }
  }

 private:
  struct Scratch {
    PreTokenizer::Scratch pre;
    std::vector<std::pair<uint32_t, uint32_t>> words;
    std::string text;
    std::string mapped;
    Symbols syms;
    std::vector<int32_t> ranks, results;
    std::vector<int32_t> prev, next;
  };

  void encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (spec_.ignore_merges) {
      int32_t id = -1;
      if (spec_.byte_level) {
        s.mapped.clear();
        const auto& table = byte_to_unicode();
        for (char c : word) s.mapped += table[static_cast<uint8_t>(c)];
        id = index_.find(s.mapped);
      } else {
        id = index_.find(word);
      }
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    Symbols& syms = s.syms;
    syms.clear();
    if (spec_.byte_level) {
      for (size_t i = 0; i < word.size(); ++i) {
        const int32_t id = byte_ids_[static_cast<uint8_t>(word[i])];
        syms.push_back(id >= 0 ? id : -1 - static_cast<int32_t>(i));
      }
    } else {
      size_t i = 0;
      while (i < word.size()) {
        const size_t n = std::min<size_t>(unicode::utf8_sequence_length(static_cast<uint8_t>(word[i])), word.size() - i);
        const int32_t id = index_.find(word.substr(i, n));
        syms.push_back(id >= 0 ? id : -1 - static_cast<int32_t>(i));
        i += n;
      }
    }
    if (syms.size() > 1) {
      if (syms.size() <= 64) {
        merge_small(s);
      } else {
        merge_large(s);
      }
    }
    bool last_unk = false;
    for (int32_t id : syms) {
      if (id >= 0) {
        out.push_back(id);
        last_unk = false;
        continue;
      }
      const size_t off = static_cast<size_t>(-1 - id);
      const size_t n = spec_.byte_level
                           ? 1
                           : std::min<size_t>(unicode::utf8_sequence_length(static_cast<uint8_t>(word[off])),
                                              word.size() - off);
      if (spec_.byte_fallback) {
        for (size_t k = 0; k < n; ++k) out.push_back(fallback_ids_[static_cast<uint8_t>(word[off + k])]);
        last_unk = false;
      } else if (spec_.unk_id >= 0) {
        if (!(spec_.fuse_unk && last_unk)) out.push_back(spec_.unk_id);
        last_unk = true;
      }
      // No unk token and no byte fallback: the character is dropped (as Hugging Face does).
    }
  }

  // O(n^2) scan, fastest for the short words of ordinary text.
  void merge_small(Scratch& s) const {
    Symbols& syms = s.syms;
    size_t n = syms.size();
    s.ranks.resize(n);
    s.results.resize(n);
    auto lookup = [&](size_t i) {
      const auto* m = merges_.find(syms[i], syms[i + 1]);
      s.ranks[i] = m ? m->rank : INT_MAX;
      s.results[i] = m ? m->result : -1;
    };
    for (size_t i = 0; i + 1 < n; ++i) lookup(i);
    while (n > 1) {
      size_t best = 0;
      int32_t best_rank = INT_MAX;
      for (size_t i = 0; i + 1 < n; ++i) {
        if (s.ranks[i] < best_rank) {
          best_rank = s.ranks[i];
          best = i;
        }
      }
      if (best_rank == INT_MAX) break;
      syms[best] = s.results[best];
      syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      s.ranks.erase(s.ranks.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      s.results.erase(s.results.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      --n;
      if (best > 0) lookup(best - 1);
      if (best + 1 < n) {
        lookup(best);
      } else {
        s.ranks[best] = INT_MAX;
      }
    }
  }

  // O(n log n): linked list of symbols and a heap of candidate merges, stale entries skipped.
  void merge_large(Scratch& s) const {
    Symbols& syms = s.syms;
    const auto n = static_cast<int32_t>(syms.size());
    s.prev.resize(static_cast<size_t>(n));
    s.next.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      s.prev[static_cast<size_t>(i)] = i - 1;
      s.next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      int32_t rank, pos, left, right;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
    auto push = [&](int32_t pos) {
      if (pos < 0) return;
      const int32_t nx = s.next[static_cast<size_t>(pos)];
      if (nx < 0) return;
      const int32_t l = syms[static_cast<size_t>(pos)], r = syms[static_cast<size_t>(nx)];
      if (const auto* m = merges_.find(l, r)) heap.push({m->rank, pos, l, r});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    constexpr int32_t kRemoved = INT_MIN;
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      const auto pos = static_cast<size_t>(c.pos);
      const int32_t nx = s.next[pos];
      // Merged tokens only grow, so unchanged ids mean the pair is still there.
      if (syms[pos] != c.left || nx < 0 || syms[static_cast<size_t>(nx)] != c.right) continue;
      syms[pos] = merges_.find(c.left, c.right)->result;
      const int32_t nn = s.next[static_cast<size_t>(nx)];
      syms[static_cast<size_t>(nx)] = kRemoved;
      s.next[pos] = nn;
      if (nn >= 0) s.prev[static_cast<size_t>(nn)] = c.pos;
      push(s.prev[pos]);
      push(c.pos);
    }
    size_t w = 0;
    for (size_t i = 0; i < syms.size(); ++i) {
      if (syms[i] != kRemoved) syms[w++] = syms[i];
    }
    syms.resize(w);
  }

  const TokenizerSpec& spec_;
  const TokenIndex& index_;
  PairMap merges_;
  std::array<int32_t, 256> byte_ids_{};      // byte-level: id of each byte's alphabet character
  std::array<int32_t, 256> fallback_ids_{};  // char-level: id of <0xXX>
  PreTokenizer pre_;
};

}  // namespace

Result<std::vector<const SplitRule*>> spec_split_rules(const TokenizerSpec& spec) {
  if (spec.pre_regexes.empty()) return pretokenizer_preset(spec.pre);
  std::vector<const SplitRule*> rules;
  for (const auto& re : spec.pre_regexes) {
    const SplitRule* r = find_split_rule(re);
    if (r == nullptr) {
      return error(StatusCode::unsupported,
                   "pre-tokenizer regex '{}' is not implemented; lithe implements the GPT-2, Llama-3, Qwen2 and "
                   "digit-splitting patterns (see pretokenizer_regexes())",
                   re);
    }
    rules.push_back(r);
  }
  return rules;
}

Result<std::unique_ptr<Model>> make_bpe_model(const TokenizerSpec& spec, const TokenIndex& index) {
  auto m = std::make_unique<BpeModel>(spec, index);
  LITHE_TRY(m->init());
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace lithe::tok

// SentencePiece BPE as stored in GGUF (`tokenizer.ggml.model = llama`): the segment's spaces
// become "▁"; symbols start as UTF-8 characters; repeatedly the adjacent pair whose concatenation
// is a normal token with the highest score is merged (leftmost on ties); a final symbol that is not
// a token falls back to its bytes as <0xXX> tokens, or to unk when those are missing.
#include <queue>

#include "tokenizer_impl.h"
#include "unicode.h"

namespace lithe::tok {
namespace {

class SpmModel final : public Model {
 public:
  SpmModel(const TokenizerSpec& spec, const TokenIndex& index) : spec_(spec), index_(index) {}

  Status init() {
    if (spec_.scores.size() != spec_.tokens.size()) {
      return error(StatusCode::corrupt_file, "spm tokenizer needs one score per token: {} scores for {} tokens",
                   spec_.scores.size(), spec_.tokens.size());
    }
    for (int b = 0; b < 256; ++b) byte_ids_[b] = index_.find(fmt::format("<0x{:02X}>", b));
    if (spec_.unk_id < 0) {
      for (int b = 0; b < 256; ++b) {
        if (byte_ids_[b] < 0) {
          return error(StatusCode::corrupt_file,
                       "spm tokenizer has neither byte tokens (<0x{:02X}> is missing) nor an unknown token", b);
        }
      }
    }
    return Status::ok();
  }

  void encode(std::string_view segment, std::vector<int32_t>& out) const override {
    thread_local Scratch s;
    s.text.clear();
    for (char c : segment) {
      if (c == ' ') {
        s.text.append(kMetaspace);
      } else {
        s.text.push_back(c);
      }
    }
    const std::string_view text = s.text;
    if (text.empty()) return;
    auto& sym = s.sym;
    sym.clear();
    for (size_t i = 0; i < text.size();) {
      const auto n = static_cast<uint32_t>(
          std::min<size_t>(unicode::utf8_sequence_length(static_cast<uint8_t>(text[i])), text.size() - i));
      const auto idx = static_cast<int32_t>(sym.size());
      sym.push_back({static_cast<uint32_t>(i), n, idx - 1, -1});
      if (idx > 0) sym[static_cast<size_t>(idx) - 1].next = idx;
      i += n;
    }
    std::priority_queue<Bigram> heap;
    auto try_add = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const auto& l = sym[static_cast<size_t>(left)];
      const auto& r = sym[static_cast<size_t>(right)];
      const int32_t id = index_.find(text.substr(l.start, l.n + r.n));
      if (id < 0) return;
      if (!spec_.types.empty() && spec_.types[static_cast<size_t>(id)] != TokenType::normal) return;
      heap.push({spec_.scores[static_cast<size_t>(id)], left, right, l.n + r.n});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
    while (!heap.empty()) {
      const Bigram b = heap.top();
      heap.pop();
      auto& l = sym[static_cast<size_t>(b.left)];
      auto& r = sym[static_cast<size_t>(b.right)];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size || l.next != b.right) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
      const auto& x = sym[static_cast<size_t>(i)];
      const std::string_view piece = text.substr(x.start, x.n);
      const int32_t id = index_.find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      bool all_bytes = true;
      for (char c : piece) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : piece) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      } else {
        out.push_back(spec_.unk_id);
      }
    }
  }

 private:
  struct Symbol {
    uint32_t start, n;  // byte range in the escaped text; n == 0 once merged into its left neighbour
    int32_t prev, next;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    // Highest score first, then leftmost.
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  struct Scratch {
    std::string text;
    std::vector<Symbol> sym;
  };

  const TokenizerSpec& spec_;
  const TokenIndex& index_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

Result<std::unique_ptr<Model>> make_spm_model(const TokenizerSpec& spec, const TokenIndex& index) {
  auto m = std::make_unique<SpmModel>(spec, index);
  LITHE_TRY(m->init());
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace lithe::tok

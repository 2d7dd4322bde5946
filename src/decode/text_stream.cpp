#include "lithe/decode/text_stream.h"

#include <algorithm>

namespace lithe {
namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string: that much
// must be held back while streaming.
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : decoder_(tokenizer), stop_(std::move(stop)) {}

Result<TextStream::Piece> TextStream::feed(int32_t id) {
  LITHE_ASSIGN(std::string piece, decoder_.feed(id));
  pending_ += piece;
  Piece out;
  for (const auto& s : stop_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos) {
      pending_.resize(at);
      out.stopped = true;
    }
  }
  const size_t hold = out.stopped ? 0 : stop_holdback(pending_, stop_);
  out.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, out.text.size());
  return out;
}

std::string TextStream::flush() {
  std::string rest = std::move(pending_) + decoder_.flush();
  pending_.clear();
  return rest;
}

}  // namespace lithe

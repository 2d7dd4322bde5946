// Sampled ids -> text ready to show: complete UTF-8 only (StreamDecoder), cut before the first
// stop string, and holding back any tail that could still grow into one. Used by generate() and
// by the server's scheduler (one per sequence).
#pragma once

#include <string>
#include <vector>

#include "lithe/tokenizer/tokenizer.h"

namespace lithe {

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  struct Piece {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; text ends right before it
  };
  // Feeds one generated id (not an end-of-generation id the caller stops on).
  Result<Piece> feed(int32_t id);
  // At the end (not after a stop): whatever was held back, incomplete UTF-8 included.
  std::string flush();

 private:
  StreamDecoder decoder_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded, not yet emitted
};

}  // namespace lithe

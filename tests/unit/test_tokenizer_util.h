// Shared helpers of the tokenizer tests: data paths and file reading.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lithe/tokenizer/tokenizer.h"

namespace lithe::tok_test {

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::filesystem::path vectors_dir() { return std::filesystem::path(LITHE_TEST_DATA) / "tokenizer-vectors"; }

// The default model (SmolLM2-135M-Instruct Q4_1): $LITHE_TEST_MODEL, else models/ of the checkout
// (scripts/fetch-model.sh puts it there). Empty when absent.
inline std::string default_model_path() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("LITHE_TEST_MODEL"); env != nullptr && fs::exists(env)) return env;
  const fs::path p = fs::path(LITHE_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

// The SOTU corpus directory: $LITHE_SOTU_DIR, else data/sotu of the checkout (extracted by
// scripts/make-data.sh), else ../shared/data/corpora/sotu beside it. Empty when absent.
inline std::string sotu_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("LITHE_SOTU_DIR"); env != nullptr && fs::is_directory(env)) return env;
  for (const fs::path& p : {fs::path(LITHE_SOURCE_DIR) / "data" / "sotu",
                           fs::path(LITHE_SOURCE_DIR) / ".." / "shared" / "data" / "corpora" / "sotu"}) {
    if (fs::is_directory(p)) return p.string();
  }
  return {};
}

// All SOTU files, sorted by name.
inline std::vector<std::filesystem::path> sotu_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".txt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace lithe::tok_test

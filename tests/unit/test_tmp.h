// Scratch paths for unit tests. ctest runs each test in its own process, several at once, so a
// fixed name under the shared temp directory races between tests of one file; the process id in
// the name keeps every process on its own paths.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace lithe_test {

inline std::filesystem::path tmp_path(const std::string& name) {
  return std::filesystem::path(::testing::TempDir()) / ("lithe-" + std::to_string(::getpid()) + "-" + name);
}

// A tiny checkpoint of tests/data/tiny/<family> with the test tokenizer, copied once per process
// into a scratch directory that Model::load takes.
inline std::string tiny_model_dir(const std::string& family) {
  namespace fs = std::filesystem;
  const fs::path data = fs::path(LITHE_TEST_DATA) / "tiny", dir = tmp_path("tiny_model_" + family);
  if (!fs::exists(dir / "config.json")) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const std::string& sub : {family, std::string("tokenizer")})
      for (const auto& e : fs::directory_iterator(data / sub)) fs::copy_file(e.path(), dir / e.path().filename());
  }
  return dir.string();
}

}  // namespace lithe_test

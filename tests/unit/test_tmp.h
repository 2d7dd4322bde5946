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

}  // namespace lithe_test

// Small file helpers shared by the writers: atomic writes (temp file in the same directory,
// fsync, rename) so that a crash never leaves a half-written file under the final name.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "lithe/core/status.h"

namespace lithe {

// Writes `bytes` to `path` atomically.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
Status write_file_atomic(const std::string& path, const std::string& text);
// Streams a file atomically: `fill` receives a FILE* opened on a temporary path next to `path`.
Status write_file_atomic_with(const std::string& path, const std::function<Status(std::FILE*)>& fill);
Result<std::string> read_text_file(const std::string& path, size_t max_bytes = size_t{1} << 30);

}  // namespace lithe

// JSON <-> Value: the render context comes in as JSON, and HF's tojson filter is Python's
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False), byte for byte.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "lithe/core/status.h"
#include "tokenizer/jinja_value.h"

namespace lithe::jinja {

// Objects keep their key order (ordered_json), as a Python dict loaded from JSON would.
Result<Value> value_from_json(const nlohmann::ordered_json& j);

struct JsonFormat {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: one line
  std::string item_separator = ", ";  // Python's defaults: (", ", ": "), or (",", ": ") with indent
  std::string key_separator = ": ";
  bool sort_keys = false;
};

Result<std::string> py_json_dumps(const Value& v, const JsonFormat& f, SrcPos pos);

}  // namespace lithe::jinja

// libFuzzer target: the fuzz input is a config.json. A config that parses must survive
// to_json -> parse unchanged (architectures aside: to_json names the family's class).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>

#include "lithe/formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::json;
  const json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  lithe::Result<lithe::HfLlamaConfig> c = lithe::parse_hf_llama_config(j);
  if (!c.is_ok()) {
    if (c.status().message().empty()) __builtin_trap();
    return 0;
  }
  const json out = lithe::to_json(*c);
  lithe::Result<lithe::HfLlamaConfig> back = lithe::parse_hf_llama_config(out);
  if (!back.is_ok()) __builtin_trap();
  lithe::HfLlamaConfig expect = *c;
  expect.architectures = out["architectures"].get<std::vector<std::string>>();
  if (!(*back == expect)) __builtin_trap();
  (void)out.dump();  // must not throw: every string came from valid UTF-8 JSON
  return 0;
}

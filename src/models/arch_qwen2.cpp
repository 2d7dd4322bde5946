// Qwen2 / Qwen2.5: the Llama block with biases on the q/k/v projections; rotate-half RoPE
// (llama.cpp does not permute its q/k).
#include "lithe/models/architecture.h"

namespace lithe {
namespace {
const Architecture kQwen2{"qwen2", "Qwen2ForCausalLM", false, [](ModelConfig& c) { c.qkv_bias = true; }};
LITHE_REGISTER_ARCHITECTURE(kQwen2);
}  // namespace
}  // namespace lithe

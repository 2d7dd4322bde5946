// Llama 1/2/3 (RoPE scaling none | linear | llama3) and SmolLM2 (Llama with tied embeddings):
// the plain Llama block. GGUF files from llama.cpp store q/k permuted for interleaved RoPE.
#include "lithe/models/architecture.h"

namespace lithe {
namespace {
const Architecture kLlama{"llama", "LlamaForCausalLM", true, [](ModelConfig&) {}};
LITHE_REGISTER_ARCHITECTURE(kLlama);
}  // namespace
}  // namespace lithe

// Mistral: the Llama block with grouped-query attention; llama.cpp writes it as "llama" in GGUF,
// HF checkpoints say model_type "mistral". Sliding-window attention is not applied (contexts up
// to the window behave identically).
#include "lithe/models/architecture.h"

namespace lithe {
namespace {
const Architecture kMistral{"mistral", "MistralForCausalLM", true, [](ModelConfig&) {}};
LITHE_REGISTER_ARCHITECTURE(kMistral);
}  // namespace
}  // namespace lithe

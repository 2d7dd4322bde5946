// Architecture registry. Each family registers itself in its own short file (arch_*.cpp) with
// how to read its hyperparameters from GGUF metadata and from config.json; all of them run the
// shared Llama block (models/transformer.cpp). A model whose architecture is not registered is
// refused with the list of known ones.
#pragma once

#include <string>
#include <vector>

#include "lithe/formats/hf_config.h"
#include "lithe/models/model_config.h"

namespace lithe {
namespace gguf { class File; }

struct Architecture {
  const char* name;              // GGUF general.architecture / HF model_type
  const char* hf_architecture;   // e.g. "LlamaForCausalLM"
  // GGUF q/k rows are stored permuted for interleaved RoPE by llama.cpp's converter (llama, mistral)
  bool gguf_interleaved_rope;
  // Family quirks on top of the shared reading of hyperparameters (qwen2: q/k/v biases).
  void (*adjust)(ModelConfig& c);
};

std::vector<const Architecture*>& architecture_registry();
Result<const Architecture*> find_architecture(std::string_view name);

struct ArchRegistrar {
  explicit ArchRegistrar(const Architecture* a) { architecture_registry().push_back(a); }
};

// Hyperparameters from GGUF metadata ({arch}.block_count, ...) or from config.json.
Result<ModelConfig> config_from_gguf(const gguf::File& f);
Result<ModelConfig> config_from_hf(const HfLlamaConfig& hf);

}  // namespace lithe

#define LITHE_REGISTER_ARCHITECTURE(var) \
  static const ::lithe::ArchRegistrar lithe_arch_registrar_##var(&var)

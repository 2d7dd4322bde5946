// Writes a model's tokenizer as Hugging Face files into `dir`: from GGUF metadata through the
// tokenizer module (tokenizer.json, tokenizer_config.json with the chat template), or by copying
// the tokenizer files of a checkpoint directory. Returns whether a tokenizer was written.
#pragma once

#include <string>

#include "lithe/formats/model_file.h"

namespace lithe {

Result<bool> export_model_tokenizer(const ModelFile& model, const std::string& dir);

}  // namespace lithe

#include "lithe/models/tokenizer_export.h"

#include <filesystem>

#include "lithe/formats/gguf.h"
#include "lithe/tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace lithe {

Result<bool> export_model_tokenizer(const ModelFile& model, const std::string& dir) {
  if (const gguf::File* g = model.gguf()) {
    if (g->find("tokenizer.ggml.model") == nullptr) return false;
    LITHE_ASSIGN(auto tok, load_tokenizer(*g));
    LITHE_TRY(export_hf_tokenizer(*tok, dir, g->get_string_or("tokenizer.chat_template", "")));
    return true;
  }
  const std::string src = model.directory();
  if (src.empty()) return false;
  bool any = false;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"}) {
    std::error_code ec;
    const fs::path from = fs::path(src) / name;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return error(StatusCode::io_error, "cannot copy '{}' to '{}': {}", from.string(), dir, ec.message());
    any = true;
  }
  return any;
}

}  // namespace lithe

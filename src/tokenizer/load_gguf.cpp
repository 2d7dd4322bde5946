// Tokenizer from GGUF metadata (the keys llama.cpp's converters write):
//   tokenizer.ggml.model        gpt2 (byte-level BPE) | llama (spm) | bert (wordpiece)
//   tokenizer.ggml.pre          pre-tokenizer name (gpt2 only; absent or "default" means gpt-2)
//   tokenizer.ggml.tokens       [string]           required
//   tokenizer.ggml.token_type   [int]              optional (normal)
//   tokenizer.ggml.scores       [float]            spm: optional (0)
//   tokenizer.ggml.merges       [string "a b"]     gpt2: required
//   tokenizer.ggml.{bos,eos,eot,eom,unknown,padding,seperator,cls,mask}_token_id
//   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix, tokenizer.chat_template
#include "lithe/formats/gguf.h"
#include "tokenizer_impl.h"

namespace lithe {
namespace {

Result<std::vector<std::string>> string_array(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return error(StatusCode::not_found, "missing key {}", key);
  auto r = v->as_string_array();
  if (!r.is_ok()) return r.status().with_context(key);
  return r;
}

Result<int32_t> optional_id(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return int32_t{-1};
  auto r = v->as_int();
  if (!r.is_ok()) return r.status().with_context(key);
  if (*r < -1 || *r > INT32_MAX) {
    return error(StatusCode::corrupt_file, "{} = {} is not a token id", key, *r);
  }
  return static_cast<int32_t>(*r);
}

Result<bool> optional_bool(const gguf::File& f, const std::string& key, bool def) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return def;
  auto r = v->as_bool();
  if (!r.is_ok()) return r.status().with_context(key);
  return *r;
}

Status fill(const gguf::File& f, TokenizerSpec& spec) {
  const gguf::Value* model_v = f.find("tokenizer.ggml.model");
  if (model_v == nullptr) return error(StatusCode::not_found, "no tokenizer: key tokenizer.ggml.model is missing");
  LITHE_ASSIGN(const std::string model, model_v->as_string());
  if (model == "gpt2") {
    spec.kind = TokenizerKind::bpe;
  } else if (model == "llama") {
    spec.kind = TokenizerKind::spm;
  } else if (model == "bert") {
    spec.kind = TokenizerKind::wordpiece;
  } else {
    return error(StatusCode::unsupported,
                 "tokenizer.ggml.model '{}' is not supported (lithe reads gpt2, llama and bert)", model);
  }
  LITHE_ASSIGN(spec.tokens, string_array(f, "tokenizer.ggml.tokens"));
  const size_t n = spec.tokens.size();

  if (const gguf::Value* v = f.find("tokenizer.ggml.token_type")) {
    LITHE_ASSIGN(const gguf::Value::Array* arr, v->as_array());
    if (arr->size() != n) {
      return error(StatusCode::corrupt_file, "tokenizer.ggml.token_type has {} entries for {} tokens", arr->size(), n);
    }
    spec.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      LITHE_ASSIGN(const int64_t t, (*arr)[i].as_int());
      if (t < 0 || t > 6) {
        return error(StatusCode::corrupt_file, "tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", i, t);
      }
      spec.types[i] = static_cast<TokenType>(t);
    }
  }
  if (const gguf::Value* v = f.find("tokenizer.ggml.scores")) {
    LITHE_ASSIGN(const gguf::Value::Array* arr, v->as_array());
    if (arr->size() != n) {
      return error(StatusCode::corrupt_file, "tokenizer.ggml.scores has {} entries for {} tokens", arr->size(), n);
    }
    spec.scores.resize(n);
    for (size_t i = 0; i < n; ++i) {
      LITHE_ASSIGN(const double s, (*arr)[i].as_float());
      spec.scores[i] = static_cast<float>(s);
    }
  }
  LITHE_ASSIGN(spec.bos_id, optional_id(f, "tokenizer.ggml.bos_token_id"));
  LITHE_ASSIGN(spec.eos_id, optional_id(f, "tokenizer.ggml.eos_token_id"));
  LITHE_ASSIGN(spec.eot_id, optional_id(f, "tokenizer.ggml.eot_token_id"));
  LITHE_ASSIGN(spec.eom_id, optional_id(f, "tokenizer.ggml.eom_token_id"));
  LITHE_ASSIGN(spec.unk_id, optional_id(f, "tokenizer.ggml.unknown_token_id"));
  LITHE_ASSIGN(spec.pad_id, optional_id(f, "tokenizer.ggml.padding_token_id"));
  LITHE_ASSIGN(spec.sep_id, optional_id(f, "tokenizer.ggml.seperator_token_id"));
  LITHE_ASSIGN(spec.cls_id, optional_id(f, "tokenizer.ggml.cls_token_id"));
  LITHE_ASSIGN(spec.mask_id, optional_id(f, "tokenizer.ggml.mask_token_id"));
  if (const gguf::Value* v = f.find("tokenizer.chat_template")) {
    LITHE_ASSIGN(spec.chat_template, v->as_string());
  }

  switch (spec.kind) {
    case TokenizerKind::bpe: {
      spec.byte_level = true;
      spec.pre = "gpt-2";
      if (const gguf::Value* v = f.find("tokenizer.ggml.pre")) {
        LITHE_ASSIGN(spec.pre, v->as_string());
        if (spec.pre == "default") spec.pre = "gpt-2";
      }
      // Llama-3's tokenizer.json sets ignore_merges.
      spec.ignore_merges = spec.pre == "llama-bpe" || spec.pre == "llama3" || spec.pre == "llama-v3";
      if (f.find("tokenizer.ggml.merges") == nullptr) {
        return error(StatusCode::corrupt_file, "gpt2 tokenizer without tokenizer.ggml.merges");
      }
      LITHE_ASSIGN(auto merges, string_array(f, "tokenizer.ggml.merges"));
      spec.merges.reserve(merges.size());
      for (size_t i = 0; i < merges.size(); ++i) {
        const std::string& m = merges[i];
        const size_t sp = m.find(' ', 1);
        if (sp == std::string::npos || sp + 1 >= m.size()) {
          return error(StatusCode::corrupt_file, "tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space",
                       i, m);
        }
        spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
      }
      LITHE_ASSIGN(spec.add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", false));
      LITHE_ASSIGN(spec.add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token", false));
      break;
    }
    case TokenizerKind::spm: {
      if (spec.scores.empty()) spec.scores.assign(n, 0.0f);
      LITHE_ASSIGN(const bool prefix, optional_bool(f, "tokenizer.ggml.add_space_prefix", true));
      spec.space_prefix = prefix ? SpacePrefix::always : SpacePrefix::never;
      spec.byte_fallback = true;
      LITHE_ASSIGN(spec.add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", spec.bos_id >= 0));
      LITHE_ASSIGN(spec.add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token", false));
      break;
    }
    case TokenizerKind::wordpiece: {
      // llama.cpp stores BERT vocabularies with a "phantom space": word starts as "▁word",
      // continuations without "##". Undo that.
      for (auto& t : spec.tokens) {
        if (t.size() >= 2 && t.front() == '[' && t.back() == ']') continue;
        if (t.compare(0, tok::kMetaspace.size(), tok::kMetaspace) == 0) {
          t = t.substr(tok::kMetaspace.size());
        } else {
          t = "##" + t;
        }
      }
      if (spec.bos_id < 0) spec.bos_id = spec.cls_id;
      if (spec.eos_id < 0) spec.eos_id = spec.sep_id;
      LITHE_ASSIGN(spec.add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", spec.bos_id >= 0));
      LITHE_ASSIGN(spec.add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token", spec.eos_id >= 0));
      break;
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const gguf::File& file) {
  TokenizerSpec spec;
  spec.source = file.path();
  if (Status st = fill(file, spec); !st.is_ok()) return st.with_context(file.path());
  return Tokenizer::create(std::move(spec));
}

}  // namespace lithe

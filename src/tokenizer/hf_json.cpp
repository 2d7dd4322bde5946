// Hugging Face tokenizer.json: loading (BPE byte-level or char-level with byte fallback,
// WordPiece) and export. Only the configurations lithe reproduces exactly are accepted; anything
// else is rejected as unsupported, naming the component.
//
// Export layout (what `tokenizers` loads):
//   byte-level BPE  pre_tokenizer Sequence[Split(regex, Isolated)..., ByteLevel(use_regex=false)],
//                   decoder ByteLevel
//   spm             model BPE with merges derived from the scores (as transformers' LlamaConverter
//                   does: every split of a piece into two pieces, ordered by the piece's score),
//                   byte_fallback; normalizer Prepend("▁") + Replace(" ", "▁"); decoder
//                   Replace("▁", " "), ByteFallback, Fuse, Strip(1 leading space)
//   wordpiece       BertNormalizer, BertPreTokenizer, WordPiece, decoder WordPiece (no cleanup)
// Special/added tokens go to `added_tokens`; BOS/EOS to a TemplateProcessing post-processor.
// A token text that occurs twice (possible in GGUF, impossible in a JSON object) is written once,
// for its first id; the later id is left out and reads back as an empty unused token.
// Not supported on loading (rejected, naming the component): Unigram/WordLevel models, BPE dropout,
// continuing_subword_prefix/end_of_word_suffix, split regexes lithe does not implement, NFKC/NFKD.
// Accepted but without effect: NFC normalizer (lithe does not compose), added tokens' `normalized`
// and `single_word` flags (tokens are matched on the raw text), truncation and padding.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "lithe/core/file_util.h"
#include "lithe/formats/gguf.h"
#include "tokenizer_impl.h"
#include "unicode.h"

namespace lithe {
namespace {

using json = nlohmann::json;
// Export uses plain json (keys sorted): ordered_json inserts in linear time, too slow for 100k+ tokens.
using ojson = nlohmann::json;

struct Loader {
  TokenizerSpec& spec;
  std::string unk_name;
  std::string bos_name, eos_name;  // from the post-processor template
  bool saw_byte_level = false;

  Status unsupported(const std::string& what, const json& j) {
    return error(StatusCode::unsupported, "{} is not supported: {}", what, j.dump().substr(0, 200));
  }

  Status normalizer(const json& j) {
    if (j.is_null()) return Status::ok();
    const std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const auto& n : j.at("normalizers")) LITHE_TRY(normalizer(n));
    } else if (type == "Prepend") {
      if (j.at("prepend").get<std::string>() != tok::kMetaspace) return unsupported("Prepend normalizer", j);
      spec.space_prefix = SpacePrefix::always;
      spec.metaspace = true;
    } else if (type == "Replace") {
      const json& pat = j.at("pattern");
      if (!pat.contains("String") || pat.at("String").get<std::string>() != " " ||
          j.at("content").get<std::string>() != tok::kMetaspace) {
        return unsupported("Replace normalizer", j);
      }
      spec.metaspace = true;
    } else if (type == "NFC") {
      // Accepted: lithe does not compose; text that is already NFC (nearly all) is unaffected.
    } else if (type == "BertNormalizer") {
      spec.clean_text = j.value("clean_text", true);
      spec.chinese_chars = j.value("handle_chinese_chars", true);
      spec.lowercase = j.value("lowercase", true);
      const json& sa = j.contains("strip_accents") ? j.at("strip_accents") : json();
      spec.strip_accents = sa.is_null() ? spec.lowercase : sa.get<bool>();
    } else if (type == "Lowercase") {
      spec.lowercase = true;
    } else if (type == "StripAccents" || type == "NFD") {
      spec.strip_accents = true;  // only as the NFD + StripAccents pair of BERT-like tokenizers
    } else {
      return unsupported("normalizer " + type, j);
    }
    return Status::ok();
  }

  Status pre_tokenizer(const json& j) {
    if (j.is_null()) return Status::ok();
    const std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const auto& p : j.at("pretokenizers")) LITHE_TRY(pre_tokenizer(p));
    } else if (type == "ByteLevel") {
      saw_byte_level = true;
      if (j.value("use_regex", true)) spec.pre_regexes.emplace_back(tok::split_rules()[0].regex);
      if (j.value("add_prefix_space", false)) {
        spec.space_prefix = SpacePrefix::always;
        spec.space_prefix_if_missing = true;
      }
    } else if (type == "Split") {
      const json& pat = j.at("pattern");
      const std::string behavior = j.value("behavior", "Isolated");
      if (!pat.contains("Regex") || behavior != "Isolated" || j.value("invert", false)) {
        return unsupported("Split pre-tokenizer (only Regex patterns with behavior Isolated)", j);
      }
      spec.pre_regexes.push_back(pat.at("Regex").get<std::string>());
    } else if (type == "Digits") {
      spec.pre_regexes.emplace_back(j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (type == "Metaspace") {
      if (j.value("replacement", std::string(tok::kMetaspace)) != tok::kMetaspace) {
        return unsupported("Metaspace replacement", j);
      }
      spec.metaspace = true;
      spec.metaspace_split = j.value("split", true);
      std::string scheme = "always";
      if (j.contains("prepend_scheme")) {
        scheme = j.at("prepend_scheme").get<std::string>();
      } else if (j.contains("add_prefix_space")) {
        scheme = j.at("add_prefix_space").get<bool>() ? "always" : "never";
      }
      spec.space_prefix = scheme == "always" ? SpacePrefix::always
                          : scheme == "first" ? SpacePrefix::first
                                              : SpacePrefix::never;
      spec.space_prefix_if_missing = true;
    } else if (type == "BertPreTokenizer") {
      if (spec.kind != TokenizerKind::wordpiece) return unsupported("BertPreTokenizer outside WordPiece", j);
    } else {
      return unsupported("pre-tokenizer " + type, j);
    }
    return Status::ok();
  }

  Status post_processor(const json& j) {
    if (j.is_null()) return Status::ok();
    const std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const auto& p : j.at("processors")) LITHE_TRY(post_processor(p));
    } else if (type == "TemplateProcessing") {
      bool before = true;
      for (const auto& item : j.at("single")) {
        if (item.contains("Sequence")) {
          before = false;
        } else if (item.contains("SpecialToken")) {
          const std::string id = item.at("SpecialToken").at("id").get<std::string>();
          (before ? bos_name : eos_name) = id;
        }
      }
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      bos_name = j.at("cls").at(0).get<std::string>();
      eos_name = j.at("sep").at(0).get<std::string>();
    } else if (type != "ByteLevel") {
      return unsupported("post-processor " + type, j);
    }
    return Status::ok();
  }
};

std::string token_name(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return {};
}

Status fill_from_json(const json& j, const json& config, TokenizerSpec& spec) {
  const json& model = j.at("model");
  std::string type = model.value("type", "");
  if (type.empty()) type = model.contains("merges") ? "BPE" : (model.contains("continuing_subword_prefix") ? "WordPiece" : "");
  Loader L{spec, {}, {}, {}, false};
  if (type == "BPE") {
    spec.kind = TokenizerKind::bpe;
    spec.byte_level = false;
  } else if (type == "WordPiece") {
    spec.kind = TokenizerKind::wordpiece;
    spec.clean_text = spec.chinese_chars = spec.strip_accents = spec.lowercase = false;
  } else {
    return error(StatusCode::unsupported, "model type '{}' is not supported (lithe reads BPE and WordPiece)", type);
  }

  // Vocabulary: model.vocab plus added_tokens; ids must cover 0..n-1.
  std::vector<std::string> tokens;
  std::vector<uint8_t> have;
  auto put = [&](int64_t id, const std::string& text) -> Status {
    if (id < 0 || id > INT32_MAX) return error(StatusCode::corrupt_file, "token '{}' has the invalid id {}", text, id);
    const auto u = static_cast<size_t>(id);
    if (u >= tokens.size()) {
      tokens.resize(u + 1);
      have.resize(u + 1, 0);
    }
    if (have[u] && tokens[u] != text) {
      return error(StatusCode::corrupt_file, "id {} is given to both '{}' and '{}'", id, tokens[u], text);
    }
    tokens[u] = text;
    have[u] = 1;
    return Status::ok();
  };
  for (const auto& [text, id] : model.at("vocab").items()) LITHE_TRY(put(id.get<int64_t>(), text));
  struct AddedInfo {
    int32_t id;
    bool special;
  };
  std::vector<AddedInfo> added;
  if (j.contains("added_tokens")) {
    for (const auto& a : j.at("added_tokens")) {
      const int64_t id = a.at("id").get<int64_t>();
      LITHE_TRY(put(id, a.at("content").get<std::string>()));
      added.push_back({static_cast<int32_t>(id), a.value("special", false)});
      if (a.value("lstrip", false) || a.value("rstrip", false)) {
        spec.added_flags.push_back({static_cast<int32_t>(id), a.value("lstrip", false), a.value("rstrip", false)});
      }
    }
  }
  spec.tokens = std::move(tokens);
  spec.types.assign(spec.tokens.size(), TokenType::normal);
  // Ids no token names (Hugging Face allows them; lithe's export leaves duplicate texts out) become
  // empty unused tokens: never produced by encode, decoded as nothing.
  for (size_t i = 0; i < have.size(); ++i) {
    if (!have[i]) spec.types[i] = TokenType::unused;
  }
  for (const auto& a : added) {
    spec.types[static_cast<size_t>(a.id)] = a.special ? TokenType::control : TokenType::user_defined;
  }
  auto id_of = [&](const std::string& name) -> int32_t {
    for (size_t i = 0; i < spec.tokens.size(); ++i) {
      if (spec.tokens[i] == name) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string unk = model.at("unk_token").get<std::string>();
    spec.unk_id = id_of(unk);
    if (spec.unk_id < 0) return error(StatusCode::corrupt_file, "unk_token '{}' is not in the vocabulary", unk);
    if (spec.types[static_cast<size_t>(spec.unk_id)] == TokenType::normal) {
      spec.types[static_cast<size_t>(spec.unk_id)] = TokenType::unknown;
    }
  }

  if (spec.kind == TokenizerKind::bpe) {
    if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() > 0) {
      return error(StatusCode::unsupported, "BPE dropout is not supported");
    }
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(k) && !model.at(k).is_null() && !model.at(k).get<std::string>().empty()) {
        return error(StatusCode::unsupported, "BPE {} is not supported", k);
      }
    }
    spec.byte_fallback = model.value("byte_fallback", false);
    spec.ignore_merges = model.value("ignore_merges", false);
    spec.fuse_unk = model.value("fuse_unk", false);
    const json& merges = model.at("merges");
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      if (m.is_array() && m.size() == 2) {
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        continue;
      }
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return error(StatusCode::corrupt_file, "merge {} '{}' is not two tokens separated by one space", i, s);
      }
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
    if (spec.byte_fallback) {
      for (size_t i = 0; i < spec.tokens.size(); ++i) {
        if (tok::parse_byte_token(spec.tokens[i]) >= 0) spec.types[i] = TokenType::byte;
      }
    }
  } else {
    spec.continuing_prefix = model.value("continuing_subword_prefix", std::string("##"));
    spec.max_input_chars_per_word = model.value("max_input_chars_per_word", 100);
  }

  LITHE_TRY(L.normalizer(j.value("normalizer", json())));
  LITHE_TRY(L.pre_tokenizer(j.value("pre_tokenizer", json())));
  LITHE_TRY(L.post_processor(j.value("post_processor", json())));
  if (spec.kind == TokenizerKind::bpe) {
    spec.byte_level = L.saw_byte_level;
    if (spec.byte_level && spec.metaspace) {
      return error(StatusCode::unsupported, "a BPE tokenizer with both ByteLevel and the '▁' convention");
    }
    if (!spec.byte_level && !spec.pre_regexes.empty()) {
      return error(StatusCode::unsupported, "Split/Digits pre-tokenizers without ByteLevel");
    }
  }

  // Special ids: post-processor template, then tokenizer_config.json names.
  if (!L.bos_name.empty()) {
    spec.bos_id = id_of(L.bos_name);
    spec.add_bos = spec.bos_id >= 0;
  }
  if (!L.eos_name.empty()) {
    spec.eos_id = id_of(L.eos_name);
    spec.add_eos = spec.eos_id >= 0;
  }
  if (config.is_object()) {
    auto name_id = [&](const char* key, int32_t& id) -> Status {
      if (!config.contains(key)) return Status::ok();
      const std::string name = token_name(config.at(key));
      if (name.empty()) return Status::ok();
      const int32_t found = id_of(name);
      if (found < 0) return error(StatusCode::corrupt_file, "tokenizer_config.json {} '{}' is not a token", key, name);
      id = found;
      return Status::ok();
    };
    LITHE_TRY(name_id("bos_token", spec.bos_id));
    LITHE_TRY(name_id("eos_token", spec.eos_id));
    LITHE_TRY(name_id("pad_token", spec.pad_id));
    LITHE_TRY(name_id("unk_token", spec.unk_id));
    LITHE_TRY(name_id("sep_token", spec.sep_id));
    LITHE_TRY(name_id("cls_token", spec.cls_id));
    LITHE_TRY(name_id("mask_token", spec.mask_id));
    if (config.contains("add_bos_token") && config.at("add_bos_token").is_boolean()) {
      spec.add_bos = config.at("add_bos_token").get<bool>();
    }
    if (config.contains("add_eos_token") && config.at("add_eos_token").is_boolean()) {
      spec.add_eos = config.at("add_eos_token").get<bool>();
    }
    if (config.contains("chat_template")) {
      const json& ct = config.at("chat_template");
      if (ct.is_string()) {
        spec.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {
        for (const auto& t : ct) {
          if (t.value("name", "") == "default") spec.chat_template = t.value("template", "");
        }
      }
    }
  }
  if (spec.kind == TokenizerKind::wordpiece) {
    if (spec.cls_id < 0) spec.cls_id = id_of("[CLS]");
    if (spec.sep_id < 0) spec.sep_id = id_of("[SEP]");
    if (spec.pad_id < 0) spec.pad_id = id_of("[PAD]");
    if (spec.mask_id < 0) spec.mask_id = id_of("[MASK]");
  }
  return Status::ok();
}

// ---- export helpers

// Merges that make Hugging Face's rank-ordered BPE reproduce score-ordered SentencePiece BPE.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const TokenizerSpec& spec, const tok::TokenIndex& index) {
  struct M {
    int32_t l, r;
    float score;
  };
  std::vector<M> merges;
  auto normal = [&](int32_t id) { return id >= 0 && spec.types[static_cast<size_t>(id)] == TokenType::normal; };
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    if (spec.types[id] != TokenType::normal) continue;
    const std::string& piece = spec.tokens[id];
    std::vector<M> local;
    for (size_t k = 1; k < piece.size(); ++k) {
      if ((static_cast<uint8_t>(piece[k]) & 0xC0) == 0x80) continue;  // split at character boundaries
      const int32_t l = index.find(std::string_view(piece).substr(0, k));
      const int32_t r = index.find(std::string_view(piece).substr(k));
      if (normal(l) && normal(r)) local.push_back({l, r, spec.scores[id]});
    }
    std::sort(local.begin(), local.end(), [](const M& a, const M& b) { return a.l != b.l ? a.l < b.l : a.r < b.r; });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& a, const M& b) { return a.score > b.score; });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const auto& m : merges) {
    out.emplace_back(spec.tokens[static_cast<size_t>(m.l)], spec.tokens[static_cast<size_t>(m.r)]);
  }
  return out;
}

ojson template_processor(const TokenizerSpec& spec) {
  if (!spec.add_bos && !spec.add_eos) return nullptr;
  auto special = [&](int32_t id, int type_id) {
    return ojson{{"SpecialToken", {{"id", spec.tokens[static_cast<size_t>(id)]}, {"type_id", type_id}}}};
  };
  auto seq = [](const char* name, int type_id) { return ojson{{"Sequence", {{"id", name}, {"type_id", type_id}}}}; };
  ojson single = ojson::array(), pair = ojson::array(), specials = ojson::object();
  if (spec.add_bos) {
    single.push_back(special(spec.bos_id, 0));
    pair.push_back(special(spec.bos_id, 0));
  }
  single.push_back(seq("A", 0));
  pair.push_back(seq("A", 0));
  if (spec.add_eos) {
    single.push_back(special(spec.eos_id, 0));
    pair.push_back(special(spec.eos_id, 0));
  }
  if (spec.add_bos) pair.push_back(special(spec.bos_id, 1));
  pair.push_back(seq("B", 1));
  if (spec.add_eos) pair.push_back(special(spec.eos_id, 1));
  for (int32_t id : {spec.add_bos ? spec.bos_id : -1, spec.add_eos ? spec.eos_id : -1}) {
    if (id < 0) continue;
    const std::string& t = spec.tokens[static_cast<size_t>(id)];
    specials[t] = {{"id", t}, {"ids", {id}}, {"tokens", {t}}};
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

ojson metaspace_decoder(bool strip) {
  ojson decoders = ojson::array();
  decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", tok::kMetaspace}}}, {"content", " "}});
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (strip) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", decoders}};
}

Result<ojson> build_tokenizer_json(const Tokenizer& tok) {
  const TokenizerSpec& spec = tok.spec();
  const auto& index = tok.impl().index;
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;

  ojson added = ojson::array();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const TokenType t = spec.types[i];
    if (t != TokenType::control && t != TokenType::user_defined && t != TokenType::unknown) continue;
    if (spec.tokens[i].empty() || index.find(spec.tokens[i]) != static_cast<int32_t>(i)) continue;
    bool lstrip = false, rstrip = false;
    for (const auto& f : spec.added_flags) {
      if (f.id == static_cast<int32_t>(i)) {
        lstrip = f.lstrip;
        rstrip = f.rstrip;
      }
    }
    added.push_back({{"id", i},
                     {"content", spec.tokens[i]},
                     {"single_word", false},
                     {"lstrip", lstrip},
                     {"rstrip", rstrip},
                     {"normalized", false},
                     {"special", t != TokenType::user_defined}});
  }
  j["added_tokens"] = added;

  ojson vocab = ojson::object();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (!spec.tokens[i].empty() && index.find(spec.tokens[i]) == static_cast<int32_t>(i)) {
      vocab[spec.tokens[i]] = i;
    }
  }
  const ojson unk = spec.unk_id >= 0 ? ojson(spec.tokens[static_cast<size_t>(spec.unk_id)]) : ojson(nullptr);
  auto bpe_model = [&](const std::vector<std::pair<std::string, std::string>>& merges, bool byte_fallback,
                       bool fuse_unk) {
    bool spaces = false;
    for (const auto& [a, b] : merges) spaces = spaces || a.find(' ') != std::string::npos || b.find(' ') != std::string::npos;
    ojson m = ojson::array();
    for (const auto& [a, b] : merges) {
      if (spaces) {
        m.push_back(ojson::array({a, b}));
      } else {
        m.push_back(a + " " + b);
      }
    }
    return ojson{{"type", "BPE"},         {"dropout", nullptr},         {"unk_token", unk},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", fuse_unk},  {"byte_fallback", byte_fallback}, {"ignore_merges", spec.ignore_merges},
                 {"vocab", vocab},        {"merges", m}};
  };

  const bool prefix = spec.space_prefix != SpacePrefix::never;
  switch (spec.kind) {
    case TokenizerKind::bpe:
      if (spec.byte_level) {
        if (prefix && (spec.space_prefix != SpacePrefix::always || !spec.space_prefix_if_missing)) {
          return error(StatusCode::unsupported, "byte-level space prefix rule cannot be written as tokenizer.json");
        }
        LITHE_ASSIGN(auto rules, tok::spec_split_rules(spec));
        ojson pre = ojson::array();
        for (const auto* r : rules) {
          pre.push_back({{"type", "Split"},
                         {"pattern", {{"Regex", r->regex}}},
                         {"behavior", "Isolated"},
                         {"invert", false}});
        }
        pre.push_back({{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", true}, {"use_regex", false}});
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
        j["post_processor"] = template_processor(spec);
        j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
        j["model"] = bpe_model(spec.merges, false, false);
        break;
      }
      [[fallthrough]];
    case TokenizerKind::spm: {
      const bool metaspace_pre = spec.kind == TokenizerKind::bpe && (spec.space_prefix_if_missing || spec.metaspace_split);
      if (metaspace_pre) {
        const char* scheme = spec.space_prefix == SpacePrefix::always ? "always"
                             : spec.space_prefix == SpacePrefix::first ? "first"
                                                                       : "never";
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", tok::kMetaspace}, {"prepend_scheme", scheme},
                              {"split", spec.metaspace_split}};
      } else {
        if (spec.space_prefix == SpacePrefix::first) {
          return error(StatusCode::unsupported, "space prefix 'first' without Metaspace cannot be written");
        }
        if (spec.kind == TokenizerKind::bpe && !spec.metaspace) {
          j["normalizer"] = nullptr;
        } else {
          ojson norms = ojson::array();
          if (prefix) norms.push_back({{"type", "Prepend"}, {"prepend", tok::kMetaspace}});
          norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", tok::kMetaspace}});
          j["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
        }
        j["pre_tokenizer"] = nullptr;
      }
      j["post_processor"] = template_processor(spec);
      j["decoder"] = metaspace_decoder(prefix);
      if (spec.kind == TokenizerKind::spm) {
        j["model"] = bpe_model(merges_from_scores(spec, index), true, true);
      } else {
        j["model"] = bpe_model(spec.merges, spec.byte_fallback, spec.fuse_unk);
      }
      break;
    }
    case TokenizerKind::wordpiece:
      j["normalizer"] = {{"type", "BertNormalizer"},
                         {"clean_text", spec.clean_text},
                         {"handle_chinese_chars", spec.chinese_chars},
                         {"strip_accents", spec.strip_accents},
                         {"lowercase", spec.lowercase}};
      j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
      j["post_processor"] = template_processor(spec);
      j["decoder"] = {{"type", "WordPiece"}, {"prefix", spec.continuing_prefix}, {"cleanup", false}};
      j["model"] = {{"type", "WordPiece"},
                    {"unk_token", unk},
                    {"continuing_subword_prefix", spec.continuing_prefix},
                    {"max_input_chars_per_word", spec.max_input_chars_per_word},
                    {"vocab", vocab}};
      break;
  }
  return j;
}

ojson name_or_null(const TokenizerSpec& spec, int32_t id) {
  return id >= 0 ? ojson(spec.tokens[static_cast<size_t>(id)]) : ojson(nullptr);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> parse_tokenizer_json(std::string_view tokenizer_json, std::string_view config_json,
                                                        const std::string& source) {
  TokenizerSpec spec;
  spec.source = source;
  try {
    const json j = json::parse(tokenizer_json.begin(), tokenizer_json.end());
    json config;
    if (!config_json.empty()) config = json::parse(config_json.begin(), config_json.end());
    if (Status st = fill_from_json(j, config, spec); !st.is_ok()) return st.with_context(source);
  } catch (const json::exception& e) {
    return error(StatusCode::corrupt_file, "{}: not a valid tokenizer.json: {}", source, e.what());
  }
  return Tokenizer::create(std::move(spec));
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  LITHE_ASSIGN(const std::string text, read_text_file(file.string()));
  std::string config;
  const fs::path config_path = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    LITHE_ASSIGN(config, read_text_file(config_path.string()));
  }
  return parse_tokenizer_json(text, config, file.string());
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer_from_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec) || fs::path(path).extension() == ".json") return load_tokenizer_json(path);
  LITHE_ASSIGN(auto file, gguf::File::open(path));
  return load_tokenizer(file);
}

Result<std::string> hf_tokenizer_json(const Tokenizer& tokenizer) {
  LITHE_ASSIGN(const ojson j, build_tokenizer_json(tokenizer));
  return j.dump(1, ' ', false, ojson::error_handler_t::strict);
}

Status export_hf_tokenizer(const Tokenizer& tokenizer, const std::string& dir, const std::string& chat_template) {
  namespace fs = std::filesystem;
  const TokenizerSpec& spec = tokenizer.spec();
  std::string text;
  try {
    LITHE_ASSIGN(text, hf_tokenizer_json(tokenizer));
  } catch (const ojson::exception& e) {
    return error(StatusCode::invalid_argument, "cannot write tokenizer.json: {}", e.what());
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error(StatusCode::io_error, "cannot create directory '{}': {}", dir, ec.message());

  ojson config;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["add_bos_token"] = spec.add_bos;
  config["add_eos_token"] = spec.add_eos;
  config["bos_token"] = name_or_null(spec, spec.bos_id);
  config["eos_token"] = name_or_null(spec, spec.eos_id);
  config["unk_token"] = name_or_null(spec, spec.unk_id);
  config["pad_token"] = name_or_null(spec, spec.pad_id);
  if (spec.kind == TokenizerKind::wordpiece) {
    config["cls_token"] = name_or_null(spec, spec.cls_id);
    config["sep_token"] = name_or_null(spec, spec.sep_id);
    config["mask_token"] = name_or_null(spec, spec.mask_id);
  }
  config["clean_up_tokenization_spaces"] = false;
  if (!chat_template.empty()) config["chat_template"] = chat_template;

  ojson map = ojson::object();
  for (auto [key, id] : {std::pair{"bos_token", spec.bos_id}, {"eos_token", spec.eos_id}, {"unk_token", spec.unk_id},
                         {"pad_token", spec.pad_id}}) {
    if (id >= 0) map[key] = spec.tokens[static_cast<size_t>(id)];
  }
  if (spec.kind == TokenizerKind::wordpiece) {
    for (auto [key, id] : {std::pair{"cls_token", spec.cls_id}, {"sep_token", spec.sep_id}, {"mask_token", spec.mask_id}}) {
      if (id >= 0) map[key] = spec.tokens[static_cast<size_t>(id)];
    }
  }
  std::string config_text, map_text;
  try {
    config_text = config.dump(2);
    map_text = map.dump(2);
  } catch (const ojson::exception& e) {
    return error(StatusCode::invalid_argument, "cannot write tokenizer_config.json: {}", e.what());
  }
  const fs::path d = dir;
  LITHE_TRY(write_file_atomic((d / "tokenizer.json").string(), text));
  LITHE_TRY(write_file_atomic((d / "tokenizer_config.json").string(), config_text + "\n"));
  LITHE_TRY(write_file_atomic((d / "special_tokens_map.json").string(), map_text + "\n"));
  return Status::ok();
}

}  // namespace lithe

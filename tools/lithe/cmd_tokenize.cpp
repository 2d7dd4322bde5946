// lithe tokenize / lithe detokenize: text <-> token ids with a model's tokenizer.
//
//   lithe tokenize -m MODEL [--ids | --pieces] [--json] [--parse-special] [--bos] [--eos] TEXT
//   lithe tokenize -m MODEL --jsonl [--parse-special] < texts.jsonl   (batch: one JSON string per
//                                     line in, one JSON array of ids per line out)
//   lithe detokenize -m MODEL [--skip-special] IDS...
//
// MODEL is a .gguf file, a tokenizer.json, or a directory holding tokenizer.json. Without TEXT
// (or with "-") the text is read from stdin; without IDS, ids are read from stdin (separated by
// spaces, commas or newlines). detokenize writes exactly the decoded bytes, no newline added.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "lithe/tokenizer/tokenizer.h"

namespace lithe::cli {
namespace {

std::string read_stdin() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

// Readable form of a token's bytes: control characters and bytes that are not UTF-8 escaped.
std::string escape_piece(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      // Copy a whole well-formed multi-byte sequence; escape anything else.
      const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
      bool ok = n > 0 && i + static_cast<size_t>(n) <= s.size();
      for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s.substr(i, static_cast<size_t>(n)));
        i += static_cast<size_t>(n);
        continue;
      }
      out += fmt::format("\\x{:02x}", c);
    }
    ++i;
  }
  return out;
}

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool ids_only = false, pieces_only = false, json = false;
  bool parse_special = false, bos = false, eos = false, add_special = false, replace_invalid = false;
  bool jsonl = false;
};

Status run_jsonl(const Tokenizer& tok, const EncodeOptions& eo) {
  std::string line;
  size_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (line.empty()) continue;
    std::string text;
    try {
      text = nlohmann::json::parse(line).get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      return error(StatusCode::invalid_argument, "stdin line {} is not a JSON string: {}", n, e.what());
    }
    LITHE_ASSIGN(const auto ids, tok.encode(text, eo));
    std::puts(nlohmann::json(ids).dump().c_str());
  }
  return Status::ok();
}

Status run_tokenize(const TokenizeOptions& o) {
  LITHE_ASSIGN(auto tok, load_tokenizer_from_path(o.model));
  EncodeOptions eo = o.add_special ? tok->default_encode_options() : EncodeOptions{};
  eo.add_bos = eo.add_bos || o.bos;
  eo.add_eos = eo.add_eos || o.eos;
  eo.parse_special = o.parse_special;
  eo.invalid_utf8 = o.replace_invalid ? InvalidUtf8::replace : InvalidUtf8::error;
  if (o.jsonl) return run_jsonl(*tok, eo);
  const std::string text = (o.text.empty() || o.text == "-") ? read_stdin() : o.text;
  LITHE_ASSIGN(const auto ids, tok->encode(text, eo));
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    LITHE_ASSIGN(std::string p, tok->token_to_piece(id));
    pieces.push_back(std::move(p));
  }
  if (o.json) {
    using json = nlohmann::json;
    json j;
    if (o.ids_only) {
      j = ids;
    } else if (o.pieces_only) {
      j = pieces;
    } else {
      j = json{{"ids", ids}, {"pieces", pieces}};
    }
    // Pieces of a character split over tokens are not UTF-8 on their own: U+FFFD in JSON.
    std::puts(j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return Status::ok();
  }
  if (o.ids_only) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::puts(line.c_str());
  } else if (o.pieces_only) {
    for (const auto& p : pieces) std::puts(escape_piece(p).c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%d\t%s\n", ids[i], escape_piece(pieces[i]).c_str());
  }
  return Status::ok();
}

void setup_tokenize(CLI::App& sub, Runner& run) {
  auto o = std::make_shared<TokenizeOptions>();
  sub.add_option("-m,--model", o->model, "model: .gguf file, tokenizer.json, or a directory with tokenizer.json")
      ->required();
  sub.add_option("text", o->text, "text to tokenize (default or '-': read stdin)");
  auto* ids = sub.add_flag("--ids", o->ids_only, "print only the ids (one line)");
  sub.add_flag("--pieces", o->pieces_only, "print only the pieces (one per line, escaped)")->excludes(ids);
  sub.add_flag("--json", o->json, "print JSON: {\"ids\": [...], \"pieces\": [...]}, or one array with --ids/--pieces");
  sub.add_flag("--parse-special", o->parse_special, "match special tokens such as <|im_start|> written in the text");
  sub.add_flag("--bos", o->bos, "add the BOS token");
  sub.add_flag("--eos", o->eos, "add the EOS token");
  sub.add_flag("--add-special", o->add_special, "add BOS/EOS as the model's metadata asks");
  sub.add_flag("--jsonl", o->jsonl, "batch: read one JSON string per stdin line, print one JSON array of ids per line");
  sub.add_flag("--replace-invalid", o->replace_invalid,
               "replace invalid UTF-8 in the text with U+FFFD (default: fail naming the byte offset)");
  run = [o] { return run_tokenize(*o); };
}

struct DetokenizeOptions {
  std::string model;
  std::vector<std::string> ids;
  bool skip_special = false;
};

Status parse_ids(const std::vector<std::string>& words, std::vector<int32_t>& out) {
  for (const auto& w0 : words) {
    std::string w = w0;
    for (char& c : w) {
      if (c == ',' || c == '[' || c == ']') c = ' ';
    }
    std::istringstream ss(w);
    std::string item;
    while (ss >> item) {
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) {
        return error(StatusCode::invalid_argument, "'{}' is not a token id", item);
      }
      out.push_back(static_cast<int32_t>(v));
    }
  }
  return Status::ok();
}

Status run_detokenize(const DetokenizeOptions& o) {
  LITHE_ASSIGN(auto tok, load_tokenizer_from_path(o.model));
  std::vector<int32_t> ids;
  if (o.ids.empty()) {
    LITHE_TRY(parse_ids({read_stdin()}, ids));
  } else {
    LITHE_TRY(parse_ids(o.ids, ids));
  }
  DecodeOptions d;
  d.skip_special = o.skip_special;
  LITHE_ASSIGN(const std::string text, tok->decode(ids, d));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return Status::ok();
}

void setup_detokenize(CLI::App& sub, Runner& run) {
  auto o = std::make_shared<DetokenizeOptions>();
  sub.add_option("-m,--model", o->model, "model: .gguf file, tokenizer.json, or a directory with tokenizer.json")
      ->required();
  sub.add_option("ids", o->ids, "token ids (default: read from stdin)");
  sub.add_flag("--skip-special", o->skip_special, "leave special tokens out of the text");
  run = [o] { return run_detokenize(*o); };
}

}  // namespace

LITHE_COMMAND(tokenize, "Turn text into token ids with a model's tokenizer", setup_tokenize);
LITHE_COMMAND(detokenize, "Turn token ids back into text", setup_detokenize);

}  // namespace lithe::cli

#include "lithe/tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer_impl.h"
#include "unicode.h"

namespace lithe {
namespace tok {

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = unicode::to_utf8(printable ? b : 256 + extra++);
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) {
      uint32_t cp2 = 0;
      unicode::decode_utf8(t[static_cast<size_t>(b)], 0, &cp2);
      inv[cp2] = b;
    }
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const int n = unicode::decode_utf8(text, i, &cp);
    if (n == 0) {
      out.push_back(text[i++]);
      continue;
    }
    const int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(i, static_cast<size_t>(n)));
    }
    i += static_cast<size_t>(n);
  }
  return out;
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void TokenIndex::build(const std::vector<std::string>& tokens) {
  map_.clear();
  map_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i].empty()) map_.emplace(tokens[i], static_cast<int32_t>(i));
  }
}

}  // namespace tok

std::string_view tokenizer_kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::bpe: return "bpe";
    case TokenizerKind::spm: return "spm";
    case TokenizerKind::wordpiece: return "wordpiece";
  }
  return "?";
}

std::vector<std::string> pretokenizer_names() { return tok::preset_names(); }

std::vector<std::string> pretokenizer_regexes() {
  std::vector<std::string> out;
  for (const auto& r : tok::split_rules()) out.emplace_back(r.regex);
  return out;
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Texts of end-of-generation tokens that models mark only by name.
constexpr std::string_view kEogNames[] = {"<|eot_id|>", "<|im_end|>",      "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|eom_id|>", "<|end_of_text|>", "<EOT>"};

Status check_id(const char* what, int32_t id, size_t n) {
  if (id == -1 || (id >= 0 && static_cast<size_t>(id) < n)) return Status::ok();
  return error(StatusCode::corrupt_file, "{} token id {} is out of range (vocabulary size {})", what, id, n);
}

bool is_ws_cp(std::string_view s, size_t i, size_t* len) {
  uint32_t cp = 0;
  const int n = unicode::decode_utf8(s, i, &cp);
  *len = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 && unicode::is_whitespace(cp);
}

}  // namespace

void Tokenizer::Impl::append_piece(int32_t id, bool& at_start, const DecodeOptions& options, std::string& out) const {
  const auto uid = static_cast<size_t>(id);
  if (options.skip_special && special[uid]) return;
  std::string_view p = pieces[uid];
  if (at_start) {
    if (p.empty()) return;
    at_start = false;
    if (spec.kind == TokenizerKind::wordpiece && starts_with(spec.tokens[uid], spec.continuing_prefix)) {
      out += spec.tokens[uid];  // as Hugging Face: the first token keeps its "##"
      return;
    }
    if (strip_first_space && p.front() == ' ') p.remove_prefix(1);
  }
  out.append(p);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(TokenizerSpec spec_in) {
  auto impl = std::make_unique<Impl>();
  impl->spec = std::move(spec_in);
  TokenizerSpec& spec = impl->spec;
  const size_t n = spec.tokens.size();
  const std::string where = spec.source.empty() ? std::string("tokenizer") : spec.source;
  auto fail = [&](const Status& st) { return Status(st.code(), where + ": " + st.message()); };
  if (n == 0) return fail(error(StatusCode::corrupt_file, "the vocabulary is empty"));
  if (n > static_cast<size_t>(INT32_MAX)) return fail(error(StatusCode::corrupt_file, "vocabulary too large: {}", n));
  if (spec.types.empty()) spec.types.assign(n, TokenType::normal);
  if (spec.types.size() != n) {
    return fail(error(StatusCode::corrupt_file, "{} token types for {} tokens", spec.types.size(), n));
  }
  for (auto [what, id] : {std::pair{"bos", spec.bos_id}, {"eos", spec.eos_id}, {"eot", spec.eot_id}, {"eom", spec.eom_id},
                          {"padding", spec.pad_id}, {"unknown", spec.unk_id}, {"separator", spec.sep_id},
                          {"cls", spec.cls_id}, {"mask", spec.mask_id}}) {
    if (Status st = check_id(what, id, n); !st.is_ok()) return fail(st);
  }
  for (const auto& f : spec.added_flags) {
    if (Status st = check_id("added", f.id, n); !st.is_ok()) return fail(st);
  }
  if (spec.add_bos && spec.bos_id < 0) {
    return fail(error(StatusCode::corrupt_file, "add_bos is set but there is no bos token id"));
  }
  if (spec.add_eos && spec.eos_id < 0) {
    return fail(error(StatusCode::corrupt_file, "add_eos is set but there is no eos token id"));
  }
  if (spec.kind != TokenizerKind::bpe && !spec.merges.empty()) {
    return fail(error(StatusCode::corrupt_file, "{} tokenizer has merges", tokenizer_kind_name(spec.kind)));
  }
  if (spec.kind == TokenizerKind::bpe && spec.merges.empty() && n > 256) {
    return fail(error(StatusCode::corrupt_file, "bpe tokenizer has no merges"));
  }
  impl->index.build(spec.tokens);

  Result<std::unique_ptr<tok::Model>> model = error(StatusCode::internal, "no model");
  switch (spec.kind) {
    case TokenizerKind::bpe: model = tok::make_bpe_model(spec, impl->index); break;
    case TokenizerKind::spm: model = tok::make_spm_model(spec, impl->index); break;
    case TokenizerKind::wordpiece: model = tok::make_wordpiece_model(spec, impl->index); break;
  }
  if (!model.is_ok()) return fail(model.status());
  impl->model = std::move(model).value();

  // Decoded bytes of every token.
  const bool metaspace = spec.kind == TokenizerKind::spm || (spec.kind == TokenizerKind::bpe && !spec.byte_level);
  impl->pieces.resize(n);
  impl->special.assign(n, 0);
  impl->eog.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = spec.tokens[i];
    const TokenType ty = spec.types[i];
    impl->special[i] = ty == TokenType::control || ty == TokenType::unknown;
    std::string& p = impl->pieces[i];
    if (spec.kind == TokenizerKind::bpe && spec.byte_level) {
      p = tok::byte_level_decode(t);
    } else if (spec.kind == TokenizerKind::wordpiece) {
      p = starts_with(t, spec.continuing_prefix) ? t.substr(spec.continuing_prefix.size()) : " " + t;
    } else if (const int b = tok::parse_byte_token(t); ty == TokenType::byte && b >= 0) {
      p = std::string(1, static_cast<char>(b));
    } else {
      p.reserve(t.size());
      for (size_t k = 0; k < t.size();) {
        if (metaspace && t.compare(k, tok::kMetaspace.size(), tok::kMetaspace) == 0) {
          p.push_back(' ');
          k += tok::kMetaspace.size();
        } else {
          p.push_back(t[k++]);
        }
      }
    }
  }
  impl->strip_first_space = spec.kind == TokenizerKind::wordpiece ||
                            (metaspace && spec.space_prefix != SpacePrefix::never);

  // End of generation.
  for (int32_t id : {spec.eos_id, spec.eot_id, spec.eom_id}) {
    if (id >= 0) impl->eog[static_cast<size_t>(id)] = 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (spec.types[i] != TokenType::control && spec.types[i] != TokenType::user_defined) continue;
    for (auto name : kEogNames) {
      if (spec.tokens[i] == name) impl->eog[i] = 1;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (impl->eog[i]) impl->eog_ids.push_back(static_cast<int32_t>(i));
  }

  // Added tokens: control, user-defined and unknown types, matched longest first.
  for (size_t i = 0; i < n; ++i) {
    const TokenType ty = spec.types[i];
    if (spec.tokens[i].empty()) continue;
    if (ty != TokenType::control && ty != TokenType::user_defined && ty != TokenType::unknown) continue;
    if (impl->index.find(spec.tokens[i]) != static_cast<int32_t>(i)) continue;  // duplicate text
    Impl::Added a{spec.tokens[i], static_cast<int32_t>(i), ty != TokenType::user_defined, false, false};
    for (const auto& f : spec.added_flags) {
      if (f.id == a.id) {
        a.lstrip = f.lstrip;
        a.rstrip = f.rstrip;
      }
    }
    const auto first = static_cast<uint8_t>(spec.tokens[i][0]);
    impl->added[first].push_back(a);
    impl->added_first[first] = true;
  }
  for (auto& group : impl->added) {
    std::stable_sort(group.begin(), group.end(),
                     [](const Impl::Added& x, const Impl::Added& y) { return x.text.size() > y.text.size(); });
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text_in, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  const TokenizerSpec& spec = m.spec;
  std::string fixed;
  std::string_view text = text_in;
  if (const size_t bad = unicode::find_invalid_utf8(text); bad != std::string_view::npos) {
    if (options.invalid_utf8 == InvalidUtf8::error) {
      return error(StatusCode::invalid_argument,
                   "text is not valid UTF-8: the byte 0x{:02x} at offset {} does not start a well-formed sequence "
                   "(encode with invalid_utf8 = replace to substitute U+FFFD)",
                   static_cast<uint8_t>(text[bad]), bad);
    }
    fixed = unicode::replace_invalid_utf8(text);
    text = fixed;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos) {
    if (spec.bos_id < 0) return error(StatusCode::invalid_argument, "add_bos asked, but the tokenizer has no BOS token");
    out.push_back(spec.bos_id);
  }

  std::string buf;
  auto encode_segment = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    std::string_view seg = text.substr(begin, end - begin);
    const bool want = spec.space_prefix == SpacePrefix::always || (spec.space_prefix == SpacePrefix::first && begin == 0);
    if (want && !(spec.space_prefix_if_missing && seg.front() == ' ')) {
      buf.assign(1, ' ');
      buf.append(seg);
      seg = buf;
    }
    m.model->encode(seg, out);
  };

  size_t seg_start = 0, i = 0;
  while (i < text.size()) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (!m.added_first[b]) {
      ++i;
      continue;
    }
    const Impl::Added* hit = nullptr;
    for (const auto& a : m.added[b]) {
      if (a.special && !options.parse_special) continue;
      if (text.compare(i, a.text.size(), a.text) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i;
    if (hit->lstrip) {  // cut the whitespace that ends the segment
      size_t keep = seg_start;
      for (size_t k = seg_start; k < i;) {
        size_t len = 0;
        const bool ws = is_ws_cp(text, k, &len);
        k += len;
        if (!ws) keep = k;
      }
      seg_end = keep;
    }
    encode_segment(seg_start, seg_end);
    out.push_back(hit->id);
    i += hit->text.size();
    if (hit->rstrip) {
      size_t len = 0;
      while (i < text.size() && is_ws_cp(text, i, &len)) i += len;
    }
    seg_start = i;
  }
  encode_segment(seg_start, text.size());

  if (options.add_eos) {
    if (spec.eos_id < 0) return error(StatusCode::invalid_argument, "add_eos asked, but the tokenizer has no EOS token");
    out.push_back(spec.eos_id);
  }
  return out;
}

EncodeOptions Tokenizer::default_encode_options() const {
  EncodeOptions o;
  o.add_bos = impl_->spec.add_bos;
  o.add_eos = impl_->spec.add_eos;
  return o;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  bool at_start = true;
  const auto n = vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      return error(StatusCode::invalid_argument, "token id {} is out of range (vocabulary size {})", id, n);
    }
    impl_->append_piece(id, at_start, options, out);
  }
  return out;
}

Result<std::string> Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return error(StatusCode::invalid_argument, "token id {} is out of range (vocabulary size {})", id, vocab_size());
  }
  return impl_->pieces[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->spec.tokens.size()); }
const std::string& Tokenizer::token_text(int32_t id) const {
  LITHE_CHECK_MSG(id >= 0 && id < vocab_size(), "token id {} out of range ({})", id, vocab_size());
  return impl_->spec.tokens[static_cast<size_t>(id)];
}
TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::undefined;
  return impl_->spec.types[static_cast<size_t>(id)];
}
std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = impl_->index.find(text);
  if (id < 0) return std::nullopt;
  return id;
}
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<size_t>(id)];
}
bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < vocab_size() && impl_->eog[static_cast<size_t>(id)]; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog_ids; }
int32_t Tokenizer::bos_id() const { return impl_->spec.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->spec.eos_id; }
int32_t Tokenizer::pad_id() const { return impl_->spec.pad_id; }
int32_t Tokenizer::unk_id() const { return impl_->spec.unk_id; }
TokenizerKind Tokenizer::kind() const { return impl_->spec.kind; }
const TokenizerSpec& Tokenizer::spec() const { return impl_->spec; }

// ---- StreamDecoder

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options)
    : tok_(&tokenizer), options_(options) {}

Result<std::string> StreamDecoder::feed(int32_t id) {
  const int32_t n = tok_->vocab_size();
  if (id < 0 || id >= n) {
    return error(StatusCode::invalid_argument, "token id {} is out of range (vocabulary size {})", id, n);
  }
  tok_->impl().append_piece(id, at_start_, options_, pending_);
  const size_t hold = unicode::incomplete_utf8_suffix(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

Result<std::string> StreamDecoder::feed(std::span<const int32_t> ids) {
  std::string out;
  for (int32_t id : ids) {
    LITHE_ASSIGN(std::string s, feed(id));
    out += s;
  }
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

void StreamDecoder::reset() {
  pending_.clear();
  at_start_ = true;
}

}  // namespace lithe

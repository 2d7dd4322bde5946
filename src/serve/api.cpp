#include "lithe/serve/api.h"

#include <fmt/format.h>

#include <limits>
#include <random>

namespace lithe::serve {
namespace {

using json = nlohmann::json;

ApiError bad(std::string param, std::string message, std::string code = "invalid_value") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a float";
    default: return "an integer";
  }
}

ApiError wrong_type(const std::string& param, const json& v, const char* want) {
  return bad(param, fmt::format("'{}' must be {}, not {}", param, want, type_name(v)), "invalid_type");
}

// A present, non-null field, or nullptr.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> get_number(const json& body, const char* name, double lo, double hi, float& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(name, *v, "a number");
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) return bad(name, fmt::format("'{}' is {} but must be in [{}, {}]", name, d, lo, hi));
  out = static_cast<float>(d);
  return std::nullopt;
}

std::optional<ApiError> get_int(const json& body, const char* name, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(name, *v, "an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    return bad(name, fmt::format("'{}' is {} but must be in [{}, {}]", name, v->get<uint64_t>(), lo, hi));
  const auto i = v->get<int64_t>();
  if (i < lo || i > hi) return bad(name, fmt::format("'{}' is {} but must be in [{}, {}]", name, i, lo, hi));
  out = i;
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& body, const char* name, bool& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(name, *v, "a boolean");
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, ApiRequest& r) {
  const json* p = field(body, "prompt");
  if (!p) return bad("prompt", "'prompt' is required: a string (or one list of token ids)", "missing_required_parameter");
  auto ids = [&](const json& a) -> std::optional<ApiError> {
    for (const auto& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= std::numeric_limits<int32_t>::max())
        return bad("prompt", "token ids in 'prompt' must be non-negative integers", "invalid_type");
      r.prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return std::nullopt;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return std::nullopt;
  }
  if (p->is_array() && !p->empty()) {
    if (p->size() == 1 && (*p)[0].is_string()) {
      r.prompt_text = (*p)[0].get<std::string>();
      return std::nullopt;
    }
    if ((*p)[0].is_number_integer()) return ids(*p);
    if (p->size() == 1 && (*p)[0].is_array()) return ids((*p)[0]);
    if (p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
      return bad("prompt", fmt::format("'prompt' holds {} prompts: send one per request", p->size()), "unsupported_value");
  }
  if (p->is_array() && p->empty()) return bad("prompt", "'prompt' is an empty list: send a string");
  return wrong_type("prompt", *p, "a string or a list of token ids");
}

std::optional<ApiError> parse_messages(const json& body, ApiRequest& r) {
  const json* m = field(body, "messages");
  if (!m) return bad("messages", "'messages' is required: a list of {role, content}", "missing_required_parameter");
  if (!m->is_array()) return wrong_type("messages", *m, "an array");
  if (m->empty()) return bad("messages", "'messages' is empty: send at least one message");
  static const char* roles[] = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object()) return wrong_type(where, msg, "an object with 'role' and 'content'");
    const json* role = field(msg, "role");
    if (!role || !role->is_string())
      return bad(where + ".role", fmt::format("{}.role must be a string", where), "invalid_type");
    std::string rs = role->get<std::string>();
    if (std::find(std::begin(roles), std::end(roles), rs) == std::end(roles))
      return bad(where + ".role",
                 fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool", where, rs));
    if (rs == "developer") rs = "system";
    std::string text;
    const json* content = field(msg, "content");
    if (content && content->is_string()) {
      text = content->get<std::string>();
    } else if (content && content->is_array()) {  // content parts: text only
      for (const auto& part : *content) {
        const json* type = part.is_object() ? field(part, "type") : nullptr;
        const json* t = part.is_object() ? field(part, "text") : nullptr;
        if (!type || *type != "text" || !t || !t->is_string())
          return bad(where + ".content", fmt::format("{}.content parts must be {{\"type\": \"text\", \"text\": ...}} "
                                                     "(this model reads text only)", where));
        text += t->get<std::string>();
      }
    } else if (content || rs != "assistant") {
      return bad(where + ".content", fmt::format("{}.content must be a string or a list of text parts", where),
                 "invalid_type");
    }
    r.messages.push_back({rs, std::move(text)});
  }
  return std::nullopt;
}

std::optional<ApiError> parse_fields(const json& body, ApiRequest& r) {
  SamplingParams& p = r.gen.sampling;
  p.temperature = 1.0f;  // OpenAI's defaults; no top-k, min-p or repetition penalty
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.repeat_last_n = std::numeric_limits<int>::max();  // the penalties see every generated token
  if (auto e = get_bool(body, "stream", r.stream)) return e;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", *so, "an object");
    if (!r.stream) return bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    if (auto e = get_bool(*so, "include_usage", r.include_usage)) return e;
  }
  std::optional<int64_t> n, max_tokens, seed, logprobs, top_logprobs, best_of;
  if (auto e = get_int(body, "n", 1, 128, n)) return e;
  if (n && *n != 1)
    return bad("n", fmt::format("n = {} is not supported: this server returns one choice per request (n = 1)", *n),
               "unsupported_value");
  if (auto e = get_int(body, "best_of", 1, 128, best_of)) return e;
  if (best_of && *best_of != 1) return bad("best_of", "best_of > 1 is not supported", "unsupported_value");
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  const char* max_name = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const json* v = field(body, max_name); v && v->is_number_integer() && v->get<int64_t>() < 1)
    return bad(max_name, fmt::format("'{}' is {} but must be at least 1", max_name, v->get<int64_t>()));
  if (auto e = get_int(body, max_name, 1, kMaxInt, max_tokens)) return e;
  r.max_tokens = max_tokens;
  if (auto e = get_number(body, "temperature", 0, 2, p.temperature)) return e;
  if (auto e = get_number(body, "top_p", 0, 1, p.top_p)) return e;
  if (p.top_p == 0) p.temperature = 0;  // only the most likely token survives: greedy
  if (p.top_p == 0) p.top_p = 1;
  if (auto e = get_number(body, "presence_penalty", -2, 2, p.presence_penalty)) return e;
  if (auto e = get_number(body, "frequency_penalty", -2, 2, p.frequency_penalty)) return e;
  if (auto e = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed))
    return e;
  p.seed = seed ? static_cast<uint64_t>(*seed) : std::random_device{}() * 0x9e3779b97f4a7c15ull + std::random_device{}();
  if (const json* s = field(body, "stop")) {
    std::vector<std::string> stops;
    if (s->is_string()) {
      stops.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) return wrong_type("stop", x, "a string or a list of strings");
        stops.push_back(x.get<std::string>());
      }
    } else {
      return wrong_type("stop", *s, "a string or a list of strings");
    }
    if (stops.size() > 4) return bad("stop", fmt::format("'stop' has {} strings: at most 4", stops.size()));
    for (const auto& x : stops)
      if (x.empty()) return bad("stop", "stop strings must not be empty");
    r.gen.stop = std::move(stops);
  }
  if (r.endpoint == Endpoint::completions) {
    if (auto e = get_int(body, "logprobs", 0, 5, logprobs)) return e;
    if (logprobs) r.gen.top_logprobs = static_cast<int>(*logprobs);
    bool echo = false;
    if (auto e = get_bool(body, "echo", echo)) return e;
    if (echo) return bad("echo", "echo is not supported: the response holds only the completion", "unsupported_value");
    if (const json* sfx = field(body, "suffix"); sfx && !(sfx->is_string() && sfx->get<std::string>().empty()))
      return bad("suffix", "suffix (fill-in-the-middle) is not supported", "unsupported_value");
  } else {
    bool want = false;
    if (auto e = get_bool(body, "logprobs", want)) return e;
    if (auto e = get_int(body, "top_logprobs", 0, 20, top_logprobs)) return e;
    if (top_logprobs && !want) return bad("top_logprobs", "top_logprobs needs \"logprobs\": true");
    if (want) r.gen.top_logprobs = static_cast<int>(top_logprobs.value_or(0));
    if (const json* t = field(body, "tools"); t && !(t->is_array() && t->empty()))
      return bad("tools", "tools (function calling) are not supported by this server", "unsupported_value");
    if (const json* f = field(body, "response_format"); f && !(f->is_object() && f->value("type", "") == "text"))
      return bad("response_format", "only {\"type\": \"text\"} response_format is supported", "unsupported_value");
  }
  if (const json* lb = field(body, "logit_bias"); lb && !(lb->is_object() && lb->empty()))
    return bad("logit_bias", "logit_bias is not supported", "unsupported_value");
  return std::nullopt;
}

std::string hex_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

json logprobs_json(const ApiRequest& req, const std::vector<TokenLogprob>& lps, size_t text_offset) {
  if (req.gen.top_logprobs < 0) return nullptr;
  if (req.endpoint == Endpoint::chat) {
    json content = json::array();
    for (const auto& lp : lps) {
      json top = json::array();
      for (const auto& [t, l] : lp.top) top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes_of(t)}});
      content.push_back({{"token", lp.token}, {"logprob", lp.logprob}, {"bytes", bytes_of(lp.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    tokens.push_back(lp.token);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [t, l] : lp.top) top[dump(json(t)).substr(1, dump(json(t)).size() - 2)] = l;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += lp.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_json(const Completion& c) {
  return {{"prompt_tokens", c.prompt_tokens},
          {"completion_tokens", c.completion_tokens},
          {"total_tokens", c.prompt_tokens + c.completion_tokens}};
}

json finish_json(const Completion& c) {
  if (c.finish_reason.empty()) return nullptr;
  return c.finish_reason == "stop" ? "stop" : "length";
}

}  // namespace

json ApiError::to_json() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::variant<ApiRequest, ApiError> parse_request(Endpoint endpoint, std::string_view body, const std::string& model_id) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    return bad("", "the request body is not valid JSON (or not valid UTF-8): send a JSON object", "invalid_json");
  if (!j.is_object()) return bad("", fmt::format("the request body must be a JSON object, not {}", type_name(j)),
                                 "invalid_type");
  ApiRequest r;
  r.endpoint = endpoint;
  const json* model = field(j, "model");
  if (!model) return bad("model", "'model' is required: GET /v1/models lists it", "missing_required_parameter");
  if (!model->is_string()) return wrong_type("model", *model, "a string");
  if (model->get<std::string>() != model_id)
    return ApiError{404, fmt::format("the model '{}' does not exist: this server serves '{}'", model->get<std::string>(),
                                     model_id),
                    "invalid_request_error", "model", "model_not_found"};
  if (auto e = endpoint == Endpoint::chat ? parse_messages(j, r) : parse_prompt(j, r)) return *e;
  if (auto e = parse_fields(j, r)) return *e;
  return r;
}

std::optional<ApiError> prepare(ApiRequest& req, const PromptFormat& format, int64_t ctx, bool rolling) {
  const Tokenizer& tok = *format.tokenizer;
  std::string text;
  EncodeOptions eo = tok.default_encode_options();
  if (req.endpoint == Endpoint::chat) {
    if (!format.chat_template)
      return bad("messages", "this model has no chat template: use /v1/completions", "unsupported_value");
    auto rendered = format.chat_template->render(req.messages, format.render);
    if (!rendered) return bad("messages", "the chat template refused the messages: " + rendered.status().message());
    text = std::move(*rendered);
    eo.parse_special = true;  // the template writes the special tokens as text
    const std::string& bos = format.render.bos_token;
    if (!bos.empty() && text.starts_with(bos)) eo.add_bos = false;  // the template printed it
  } else if (req.prompt_text) {
    text = *req.prompt_text;
  }
  if (req.prompt_text || req.endpoint == Endpoint::chat) {
    auto ids = tok.encode(text, eo);
    if (!ids) return bad(req.endpoint == Endpoint::chat ? "messages" : "prompt", ids.status().message());
    req.gen.prompt = std::move(*ids);
  } else {
    for (int32_t id : req.prompt_ids)
      if (id >= tok.vocab_size())
        return bad("prompt", fmt::format("token id {} is outside the vocabulary of {}", id, tok.vocab_size()));
    req.gen.prompt = req.prompt_ids;
  }
  const auto p = static_cast<int64_t>(req.gen.prompt.size());
  if (p == 0) return bad(req.endpoint == Endpoint::chat ? "messages" : "prompt", "the prompt is empty: send some text");
  if (rolling) {
    req.gen.max_tokens = req.max_tokens.value_or(req.endpoint == Endpoint::chat ? ctx : 16);
    return std::nullopt;
  }
  if (p >= ctx)
    return bad(req.endpoint == Endpoint::chat ? "messages" : "prompt",
               fmt::format("this model's context is {} tokens, but the prompt alone has {}: shorten it", ctx, p),
               "context_length_exceeded");
  req.gen.max_tokens = req.max_tokens.value_or(req.endpoint == Endpoint::chat ? ctx - p : std::min<int64_t>(16, ctx - p));
  if (p + req.gen.max_tokens > ctx)
    return bad("max_tokens",
               fmt::format("this model's context is {} tokens, but {} were asked ({} in the prompt + {} max_tokens): "
                           "lower max_tokens or shorten the prompt",
                           ctx, p + req.gen.max_tokens, p, req.gen.max_tokens),
               "context_length_exceeded");
  return std::nullopt;
}

json response_json(const ApiRequest& req, const Completion& c) {
  json choice = {{"index", 0}, {"logprobs", logprobs_json(req, c.logprobs, 0)}, {"finish_reason", finish_json(c)}};
  if (req.endpoint == Endpoint::chat)
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  else
    choice["text"] = c.text;
  return {{"id", c.id},
          {"object", req.endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"system_fingerprint", "lithe"},
          {"choices", json::array({choice})},
          {"usage", usage_json(c)}};
}

json chunk_json(const ApiRequest& req, const Completion& c, bool first) {
  json choice = {{"index", 0}, {"logprobs", logprobs_json(req, c.logprobs, 0)}, {"finish_reason", finish_json(c)}};
  if (req.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!c.text.empty() || first) delta["content"] = c.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = c.text;
  }
  json j = {{"id", c.id},
            {"object", req.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", c.created},
            {"model", c.model},
            {"system_fingerprint", "lithe"},
            {"choices", json::array({choice})}};
  if (req.include_usage) j["usage"] = nullptr;
  return j;
}

json usage_chunk_json(const ApiRequest& req, const Completion& c) {
  return {{"id", c.id},
          {"object", req.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", json::array()},
          {"usage", usage_json(c)}};
}

std::string new_completion_id(Endpoint endpoint) { return hex_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-"); }

}  // namespace lithe::serve

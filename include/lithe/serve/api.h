// The OpenAI-compatible request and response JSON of /v1/completions and /v1/chat/completions:
// parsing and validating a request body into a GenRequest (every error an ApiError with the HTTP
// status and the OpenAI error fields), turning it into prompt tokens (the model's chat template
// for chat), and building responses and server-sent-event chunks.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <variant>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/serve/engine.h"
#include "lithe/tokenizer/chat_template.h"

namespace lithe::serve {

enum class Endpoint { completions, chat };

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  nlohmann::json to_json() const;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  bool stream = false, include_usage = false;
  std::optional<std::string> prompt_text;  // completions: text, or
  std::vector<int32_t> prompt_ids;         // completions: token ids
  std::vector<ChatMessage> messages;       // chat
  std::optional<int64_t> max_tokens;       // absent: 16 for completions, the rest of the context for chat
  GenRequest gen;                          // sampling, stop, logprobs (prompt and max_tokens set by prepare)
};

// Parses and validates a body. model_id: the one model this server serves.
std::variant<ApiRequest, ApiError> parse_request(Endpoint endpoint, std::string_view body,
                                                 const std::string& model_id);

// What turns messages into a prompt: the model's template and its special tokens.
struct PromptFormat {
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;  // none: chat requests are refused
  ChatRenderOptions render;
};
// Fills req.gen.prompt (tokenized text or chat) and req.gen.max_tokens; checks the context.
// rolling: the server's caches are sink / window ones (EngineOptions::cache), which a request may
// run past: ctx bounds neither the prompt nor max_tokens (default: ctx for chat, 16 otherwise).
std::optional<ApiError> prepare(ApiRequest& req, const PromptFormat& format, int64_t ctx, bool rolling = false);

// Response bodies. `id` like "cmpl-..." / "chatcmpl-...", created in Unix seconds.
struct Completion {
  std::string id, model, text, finish_reason;
  int64_t created = 0, prompt_tokens = 0, completion_tokens = 0;
  std::vector<TokenLogprob> logprobs;
};
nlohmann::json response_json(const ApiRequest& req, const Completion& c);
// One streamed chunk: text (and its tokens' logprobs) with finish_reason empty until the last.
nlohmann::json chunk_json(const ApiRequest& req, const Completion& c, bool first);
// The usage-only chunk of stream_options.include_usage.
nlohmann::json usage_chunk_json(const ApiRequest& req, const Completion& c);
std::string new_completion_id(Endpoint endpoint);
// JSON text safe for any bytes (invalid UTF-8 becomes U+FFFD).
std::string dump(const nlohmann::json& j);

}  // namespace lithe::serve

// `lithe serve`: the HTTP front of the engine (cpp-httplib). Routes: POST /v1/completions and
// /v1/chat/completions (JSON or server-sent events), GET /v1/models, /health, /metrics and the
// chat page at /. HTTP threads parse, tokenize and validate, then wait on their request's events
// while the engine's scheduler thread runs the batches. SIGTERM/SIGINT stop accepting
// connections, let in-flight requests finish, then return.
#pragma once

#include <string>

#include "lithe/serve/engine.h"

namespace lithe::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;   // empty: no authentication; else /v1/* need "Authorization: Bearer KEY"
  std::string model_id;  // the name clients put in "model"
  size_t max_body_bytes = size_t{1} << 20;
  int http_threads = 128;  // connections served at once (each streaming client holds one)
  EngineOptions engine;
};

// Serves until SIGTERM or SIGINT; errors when the address cannot be bound.
Status serve(Model& model, const ServerOptions& options);

// The chat page (web/chat.html, embedded at build time).
extern const char* const kChatPage;

}  // namespace lithe::serve

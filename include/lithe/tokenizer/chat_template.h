// Chat templates: a model's `chat_template` (Jinja) rendered the way HF transformers renders it
// (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols; globals
// raise_exception, namespace, dict, strftime_now; HF's tojson), by an interpreter of the Jinja
// subset that chat templates use. Renders match jinja2 byte for byte on the templates in
// tests/data/chat (the test renders them against goldens from Python's jinja2).
//
// Not supported, each reported as StatusCode::unsupported naming the construct and line:
// template inheritance and inclusion (extends/block/include/import/from), {% call %},
// {% filter %}, {% with %}, {% do %}, recursive loops, *args/**kwargs, filters and tests outside
// the list in src/tokenizer/jinja_filters.cpp, '%' string formatting, str.format and the less
// common str methods, integers beyond 64 bits, non-string dict keys.
// Known differences from Python: upper/lower/title map case only for Latin (ASCII, Latin-1,
// Latin Extended-A), Greek, Cyrillic and fullwidth Latin letters (no final-sigma rule); tuples
// and lists print alike except for their brackets.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/core/status.h"

namespace lithe {

namespace jinja {
struct CompiledTemplate;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

// Bounds that keep a hostile template from hanging or exhausting memory; renders that hit one
// fail with invalid_argument. The defaults are far above what real chat templates need (a
// 1000-message conversation through Qwen2.5's template takes about 50k steps).
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{32} << 20;  // the rendered text, and any one string or list built
  uint64_t max_work = uint64_t{1} << 23;       // steps: statements, iterations, calls, operators,
                                               // and one per 32 bytes built or scanned (~1 s at most)
  int max_depth = 128;                         // nesting of blocks and expressions
  int max_call_depth = 64;                     // macro recursion
};

struct ChatRenderOptions {
  bool add_generation_prompt = false;  // end with the header of an assistant turn
  std::string bos_token;               // the template prints these where it wants them
  std::string eos_token;
  // More template variables (tools, documents, date_string, enable_thinking, ...). They override
  // the variables above and `messages` if they share a name.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  ChatTemplateLimits limits;
};

class ChatTemplate {
 public:
  // Parses the template. Syntax errors name the line and column; unsupported constructs fail
  // here too (unsupported), so a template that parses can only fail at render time on its data.
  static Result<ChatTemplate> parse(std::string source, const ChatTemplateLimits& limits = {});

  // Renders messages with the variables HF passes: messages, add_generation_prompt,
  // bos_token, eos_token, tools=None, documents=None, and options.extra.
  // A template's raise_exception(msg) becomes an invalid_argument Status carrying msg.
  Result<std::string> render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const;

  // Lower level: renders with exactly the variables in context (a JSON object). Messages may
  // carry any fields (tool_calls, name, ...); object key order is kept (tojson prints it).
  Result<std::string> render_context(const nlohmann::ordered_json& context,
                                     const ChatTemplateLimits& limits = {}) const;

  const std::string& source() const;

 private:
  ChatTemplate() = default;  // made by parse()
  std::shared_ptr<const jinja::CompiledTemplate> impl_;
};

// The published chat template of a model family: "chatml" (teknium/OpenHermes-2.5-Mistral-7B),
// "llama2" (meta-llama/Llama-2-7b-chat-hf), "llama3" (meta-llama/Meta-Llama-3-8B-Instruct),
// "qwen2.5" (Qwen/Qwen2.5-7B-Instruct), "phi3" (microsoft/Phi-3-mini-4k-instruct, as in
// llama.cpp's ggml-vocab-phi-3.gguf), "smollm2" (HuggingFaceTB/SmolLM2-135M-Instruct, the
// default model). not_found lists the names for any other.
Result<std::string> builtin_chat_template(std::string_view name);
std::vector<std::string> builtin_chat_template_names();

}  // namespace lithe

#include "lithe/tokenizer/chat_template.h"

#include <utility>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace lithe {

namespace jinja {
struct CompiledTemplate {
  std::string source;
  NodeList body;
};
}  // namespace jinja

Result<ChatTemplate> ChatTemplate::parse(std::string source, const ChatTemplateLimits& limits) {
  auto impl = std::make_shared<jinja::CompiledTemplate>();
  impl->source = std::move(source);
  LITHE_ASSIGN(std::vector<jinja::Token> tokens, jinja::lex(jinja::normalize_source(impl->source)));
  LITHE_ASSIGN(impl->body, jinja::parse(tokens, limits.max_depth));
  ChatTemplate t;
  t.impl_ = std::move(impl);
  return t;
}

const std::string& ChatTemplate::source() const { return impl_->source; }

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         const ChatRenderOptions& options) const {
  // The variables HF's apply_chat_template passes (tools and documents are None unless given).
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = options.add_generation_prompt;
  ctx["bos_token"] = options.bos_token;
  ctx["eos_token"] = options.eos_token;
  if (!options.extra.is_object()) {
    return error(StatusCode::invalid_argument, "chat template extra variables must be a JSON object, not {}",
                 options.extra.type_name());
  }
  for (const auto& [k, v] : options.extra.items()) ctx[k] = v;
  return render_context(ctx, options.limits);
}

Result<std::string> ChatTemplate::render_context(const nlohmann::ordered_json& context,
                                                 const ChatTemplateLimits& limits) const {
  if (!context.is_object()) {
    return error(StatusCode::invalid_argument, "chat template context must be a JSON object, not {}",
                 context.type_name());
  }
  jinja::Entries vars;
  vars.reserve(context.size());
  for (const auto& [k, v] : context.items()) {
    LITHE_ASSIGN(jinja::Value value, jinja::value_from_json(v));
    vars.emplace_back(k, std::move(value));
  }
  jinja::Interpreter interp(limits);
  return interp.render(impl_->body, vars);
}

namespace {

struct Builtin {
  std::string_view name;
  std::string_view source;
};

// The templates exactly as their models publish them (tokenizer_config.json's chat_template, or
// the GGUF key tokenizer.chat_template); tests/data/chat/templates holds the same bytes.
constexpr Builtin kBuiltins[] = {
    // teknium/OpenHermes-2.5-Mistral-7B, tokenizer_config.json
    {"chatml", R"TPL({% for message in messages %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})TPL"},
    // meta-llama/Llama-2-7b-chat-hf, tokenizer_config.json
    {"llama2",
     R"TPL({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})TPL"},
    // meta-llama/Meta-Llama-3-8B-Instruct, tokenizer_config.json
    {"llama3",
     R"TPL({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})TPL"},
    // Qwen/Qwen2.5-7B-Instruct, tokenizer_config.json
    {"qwen2.5", R"TPL({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)TPL"},
    // microsoft/Phi-3-mini-4k-instruct, as embedded in llama.cpp's ggml-vocab-phi-3.gguf
    {"phi3", R"TPL({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '
' + message['content'] + '<|end|>' + '
' + '<|assistant|>' + '
'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '
'}}{% endif %}{% endfor %})TPL"},
    // HuggingFaceTB/SmolLM2-135M-Instruct, as embedded in SmolLM2-135M-Instruct.Q4_1.gguf
    {"smollm2",
     R"TPL({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})TPL"},
};

}  // namespace

Result<std::string> builtin_chat_template(std::string_view name) {
  for (const Builtin& b : kBuiltins) {
    if (b.name == name) return std::string(b.source);
  }
  std::string names;
  for (const Builtin& b : kBuiltins) names += (names.empty() ? "" : ", ") + std::string(b.name);
  return error(StatusCode::not_found, "no built-in chat template named '{}' (known: {})", name, names);
}

std::vector<std::string> builtin_chat_template_names() {
  std::vector<std::string> out;
  for (const Builtin& b : kBuiltins) out.emplace_back(b.name);
  return out;
}

}  // namespace lithe

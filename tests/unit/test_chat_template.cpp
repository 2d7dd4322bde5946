// Chat templates of real models rendered by lithe, compared byte for byte with the renders of
// Python's jinja2 configured as HF transformers (tests/gen/gen_chat_golden.py wrote the goldens
// and checked them against transformers' own renderer).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "lithe/tokenizer/chat_template.h"

namespace lithe {
namespace {

using nlohmann::ordered_json;

const std::string kDir = std::string(LITHE_TEST_DATA) + "/chat/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ordered_json& conversations() {
  static const ordered_json c = ordered_json::parse(read_file(kDir + "conversations.json"));
  return c;
}

const ordered_json& find_conversation(const std::string& name) {
  for (const auto& c : conversations()) {
    if (c["name"] == name) return c;
  }
  static const ordered_json none;
  ADD_FAILURE() << "no conversation " << name;
  return none;
}

TEST(ChatTemplate, BuiltinsAreThePublishedTemplates) {
  const std::vector<std::string> names = builtin_chat_template_names();
  EXPECT_EQ(names, (std::vector<std::string>{"chatml", "llama2", "llama3", "qwen2.5", "phi3", "smollm2"}));
  for (const std::string& name : names) {
    auto src = builtin_chat_template(name);
    ASSERT_TRUE(src.is_ok()) << name;
    EXPECT_EQ(*src, read_file(kDir + "templates/" + name + ".jinja")) << name;
    EXPECT_TRUE(ChatTemplate::parse(*src).is_ok()) << name;
  }
  auto missing = builtin_chat_template("vicuna");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("qwen2.5"), std::string::npos);
}

TEST(ChatTemplate, RendersMatchJinja2ByteForByte) {
  const auto manifest = ordered_json::parse(read_file(kDir + "manifest.json"));
  ASSERT_GE(manifest.size(), 150u);
  std::map<std::string, ChatTemplate> templates;
  std::set<std::string> seen_templates;
  int compared = 0, raised = 0;
  for (const auto& e : manifest) {
    const std::string name = e["template"];
    const std::string conv_name = e["conversation"];
    const bool agp = e["add_generation_prompt"];
    SCOPED_TRACE(name + " / " + conv_name + (agp ? " / add_generation_prompt" : ""));
    if (!templates.count(name)) {
      auto t = ChatTemplate::parse(*builtin_chat_template(name));
      ASSERT_TRUE(t.is_ok()) << t.status().to_string();
      templates.emplace(name, *t);
    }
    seen_templates.insert(name);
    const ChatTemplate& tpl = templates.at(name);
    const ordered_json& conv = find_conversation(conv_name);

    // The context HF passes: messages, tools, documents, add_generation_prompt, special tokens.
    ordered_json ctx = {{"messages", conv["messages"]}, {"tools", nullptr},
                        {"documents", nullptr},         {"add_generation_prompt", agp},
                        {"bos_token", e["bos_token"]},  {"eos_token", e["eos_token"]}};
    if (conv.contains("extra")) {
      for (const auto& [k, v] : conv["extra"].items()) ctx[k] = v;
    }
    auto got = tpl.render_context(ctx);

    // The high-level API gives the same result when messages are plain role/content pairs.
    bool plain = !conv.contains("extra");
    std::vector<ChatMessage> msgs;
    for (const auto& m : conv["messages"]) {
      plain = plain && m.size() == 2;
      msgs.push_back({m["role"], m["content"]});
    }
    if (plain) {
      ChatRenderOptions opt;
      opt.add_generation_prompt = agp;
      opt.bos_token = e["bos_token"];
      opt.eos_token = e["eos_token"];
      auto high = tpl.render(msgs, opt);
      ASSERT_EQ(high.is_ok(), got.is_ok());
      if (got.is_ok()) {
        EXPECT_EQ(*high, *got);
      }
    }

    if (e.contains("expected")) {
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      const std::string want = read_file(kDir + e["expected"].get<std::string>());
      EXPECT_EQ(*got, want);
      ++compared;
    } else {
      const std::string err = e["error"];
      ASSERT_FALSE(got.is_ok()) << "jinja2 raised " << err << " but lithe rendered:\n" << *got;
      EXPECT_EQ(got.status().code(), StatusCode::invalid_argument);
      if (err.rfind("TemplateError: ", 0) == 0) {
        EXPECT_NE(got.status().message().find(err.substr(15)), std::string::npos) << got.status().to_string();
      }
      ++raised;
    }
  }
  EXPECT_EQ(seen_templates.size(), 6u);
  EXPECT_GE(compared, 150);
  EXPECT_GE(raised, 4);
}

TEST(ChatTemplate, DefaultModelPrompt) {
  // SmolLM2 adds its default system prompt when the conversation has none.
  auto t = ChatTemplate::parse(*builtin_chat_template("smollm2"));
  ASSERT_TRUE(t.is_ok());
  ChatRenderOptions opt;
  opt.add_generation_prompt = true;
  auto r = t->render({{"user", "Hi"}}, opt);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, BosHandlingFollowsTheTemplate) {
  ChatRenderOptions opt;
  opt.bos_token = "<BOS>";
  opt.eos_token = "<EOS>";
  const std::vector<ChatMessage> conv = {{"user", "q"}, {"assistant", "a"}, {"user", "q2"}};
  // Llama 2 puts BOS before every user turn, Llama 3 once, Phi-3 once at the start, ChatML never.
  auto render = [&](const char* name) {
    auto t = ChatTemplate::parse(*builtin_chat_template(name));
    return *t->render(conv, opt);
  };
  EXPECT_EQ(render("llama2"), "<BOS>[INST] q [/INST] a <EOS><BOS>[INST] q2 [/INST]");
  EXPECT_EQ(render("llama3").rfind("<BOS>", 0), 0u);
  EXPECT_EQ(render("llama3").find("<BOS>", 1), std::string::npos);
  EXPECT_EQ(render("phi3").rfind("<BOS><|user|>", 0), 0u);
  EXPECT_EQ(render("chatml").find("<BOS>"), std::string::npos);
}

TEST(ChatTemplate, ExtraVariablesReachTheTemplate) {
  auto t = ChatTemplate::parse("{{ greeting }} {{ messages|length }} {{ tools is none }} {{ add_generation_prompt }}");
  ASSERT_TRUE(t.is_ok());
  ChatRenderOptions opt;
  opt.extra = {{"greeting", "hey"}};
  EXPECT_EQ(*t->render({{"user", "x"}}, opt), "hey 1 True False");
  opt.extra = {{"tools", ordered_json::array({{{"name", "f"}}})}};
  EXPECT_EQ(*t->render({}, opt), " 0 False False");
  opt.extra = ordered_json::array();
  EXPECT_FALSE(t->render({}, opt).is_ok());
}

TEST(ChatTemplate, RaiseExceptionFromLlama2) {
  auto t = ChatTemplate::parse(*builtin_chat_template("llama2"));
  ASSERT_TRUE(t.is_ok());
  auto r = t->render({{"user", "a"}, {"user", "b"}}, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("Conversation roles must alternate user/assistant/user/assistant/..."),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace lithe

// The Jinja interpreter behind chat templates: each construct against jinja2's own output
// (tests/data/chat/jinja_golden.json, from tests/gen/gen_chat_golden.py), then error reporting
// and the limits that keep hostile templates bounded.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "lithe/tokenizer/chat_template.h"

namespace lithe {
namespace {

using nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<std::string> render(const std::string& src, const ordered_json& ctx = ordered_json::object(),
                           const ChatTemplateLimits& limits = {}) {
  LITHE_ASSIGN(ChatTemplate t, ChatTemplate::parse(src, limits));
  return t.render_context(ctx, limits);
}

std::string render_ok(const std::string& src, const ordered_json& ctx = ordered_json::object()) {
  auto r = render(src, ctx);
  EXPECT_TRUE(r.is_ok()) << src << "\n" << r.status().to_string();
  return r.is_ok() ? *r : std::string();
}

TEST(Jinja, MatchesJinja2OnEveryCase) {
  const std::string dir = std::string(LITHE_TEST_DATA) + "/chat/";
  const auto cases = ordered_json::parse(read_file(dir + "jinja_cases.json"));
  const auto golden = ordered_json::parse(read_file(dir + "jinja_golden.json"));
  ASSERT_GE(cases.size(), 60u);
  int outputs = 0, errors = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto& want = golden.at(name);
    auto got = render(c["template"].get<std::string>(), c["context"]);
    if (want.contains("output")) {
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(*got, want["output"].get<std::string>());
      ++outputs;
    } else {
      const std::string err = want["error"];
      ASSERT_FALSE(got.is_ok()) << "jinja2 raised " << err << " but lithe rendered: " << *got;
      if (err.rfind("TemplateError: ", 0) == 0) {  // raise_exception: the message must come through
        EXPECT_NE(got.status().message().find(err.substr(15)), std::string::npos) << got.status().to_string();
      }
      ++errors;
    }
  }
  EXPECT_GT(outputs, 50);
  EXPECT_GT(errors, 5);
}

TEST(Jinja, RaiseExceptionCarriesTheMessage) {
  auto r = render("line one\n{{ raise_exception('Only user and assistant roles are supported!') }}");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("Only user and assistant roles are supported!"), std::string::npos);
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();
}

void expect_unsupported(const std::string& src, const std::string& construct, int line) {
  auto r = render(src);
  ASSERT_FALSE(r.is_ok()) << src;
  EXPECT_EQ(r.status().code(), StatusCode::unsupported) << r.status().to_string();
  const std::string want =
      fmt::format("chat template uses unsupported Jinja construct '{}' at line {}", construct, line);
  EXPECT_EQ(r.status().message(), want);
}

TEST(Jinja, UnsupportedConstructsAreNamed) {
  expect_unsupported("{% extends 'base.html' %}", "{% extends %}", 1);
  expect_unsupported("a\n{% include 'x' %}", "{% include %}", 2);
  expect_unsupported("{% import 'm' as m %}", "{% import %}", 1);
  expect_unsupported("\n\n{% call foo() %}x{% endcall %}", "{% call %}", 3);
  expect_unsupported("{% filter upper %}x{% endfilter %}", "{% filter %}", 1);
  expect_unsupported("{% with a = 1 %}{{ a }}{% endwith %}", "{% with %}", 1);
  expect_unsupported("{% do x.append(1) %}", "{% do %}", 1);
  expect_unsupported("{{ x | wordwrap(5) }}", "filter 'wordwrap'", 1);
  expect_unsupported("{% if x is escaped %}{% endif %}", "test 'escaped'", 1);
  expect_unsupported("{% for x in y recursive %}{% endfor %}", "recursive for loop", 1);
  expect_unsupported("{{ f(*args) }}", "*args / **kwargs in a call", 1);
  expect_unsupported("{{ '%s' % 1 }}", "'%' string formatting", 1);
  expect_unsupported("{{ '{}'.format(1) }}", "str.format()", 1);
  expect_unsupported("{{ 9223372036854775807 + 1 }}", "integer overflow (beyond 64 bits)", 1);
  expect_unsupported("{{ {1: 'a'} }}", "dict key of type int", 1);
  expect_unsupported("{{ lipsum() }}", "lipsum()", 1);
  // Unsupported filters fail at parse time even in a branch that never runs, as jinja2 does.
  expect_unsupported("{% if false %}{{ x | urlize }}{% endif %}", "filter 'urlize'", 1);
}

void expect_syntax_error(const std::string& src, int line, int col, const std::string& what) {
  auto r = ChatTemplate::parse(src);
  ASSERT_FALSE(r.is_ok()) << src;
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  const std::string where = fmt::format("chat template syntax error at line {}, column {}: ", line, col);
  EXPECT_EQ(r.status().message().substr(0, where.size()), where) << r.status().message();
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  expect_syntax_error("hello {{ name ", 1, 7, "not closed");
  expect_syntax_error("a\nb {% if x %}", 2, 13, "expected 'elif' or 'else' or 'endif'");  // at the end
  expect_syntax_error("{% for x in y %}\n{% endif %}", 2, 4, "unexpected tag 'endif'");
  expect_syntax_error("{# never closed", 1, 1, "comment");
  expect_syntax_error("{{ 'unterminated }}", 1, 4, "unterminated string");
  expect_syntax_error("{{ a + }}", 1, 8, "unexpected end of print statement");
  expect_syntax_error("{{ (a ]) }}", 1, 7, "unexpected ']'");
  expect_syntax_error("{% frobnicate %}", 1, 4, "unknown tag 'frobnicate'");
  expect_syntax_error("{% break %}", 1, 4, "outside a for loop");
  expect_syntax_error("x\n  {{ a $ b }}", 2, 8, "unexpected character '$'");
  expect_syntax_error("{% raw %}never ends", 1, 1, "endraw");
  expect_syntax_error("{{ 'caf\\xZZ' }}", 1, 8, "truncated \\x escape");
  expect_syntax_error("{% set x %}unclosed block", 1, 26, "expected 'endset'");
  // Columns count code points, not bytes.
  expect_syntax_error("é€😀 {{ ! }}", 1, 8, "unexpected character '!'");
}

TEST(Jinja, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(
      render_ok("[{{ missing }}][{{ missing|default('d') }}][{{ missing|length }}][{% for x in missing %}x{% endfor %}]"
                "[{{ missing is defined }}][{{ missing ~ 'c' }}][{{ 'a' in missing }}][{{ not missing }}]"),
      "[][d][0][][False][c][False][True]");
  EXPECT_EQ(render_ok("{{ m.nope }}|{{ m.nope is defined }}|{{ m['x'] }}", {{"m", {{"x", 1}}}}), "|False|1");
  for (const char* src : {"{{ missing.attr }}", "{{ missing['k'] }}", "{{ missing + 1 }}", "{{ missing() }}",
                          "{{ missing < 1 }}", "{{ m.nope.deeper }}"}) {
    auto r = render(src, {{"m", ordered_json::object()}});
    ASSERT_FALSE(r.is_ok()) << src;
    const std::string& msg = r.status().message();
    EXPECT_TRUE(msg.find("is undefined") != std::string::npos || msg.find("has no attribute") != std::string::npos)
        << msg;
  }
  auto r = render("{{ m.nope.deeper }}", {{"m", ordered_json::object()}});
  EXPECT_NE(r.status().message().find("'dict object' has no attribute 'nope'"), std::string::npos);
}

TEST(Jinja, ContextKeepsKeyOrderAndTypes) {
  const auto ctx = ordered_json::parse(R"({"d": {"z": 1, "a": 2.5, "m": [true, null, "s"]}, "big": 9007199254740993})");
  EXPECT_EQ(
      render_ok("{{ d|tojson }}|{{ d }}|{{ big }}", ctx),
      R"({"z": 1, "a": 2.5, "m": [true, null, "s"]}|{'z': 1, 'a': 2.5, 'm': [True, None, 's']}|9007199254740993)");
  auto r = render("{{ x }}", ordered_json::parse(R"({"x": 18446744073709551615})"));
  EXPECT_EQ(r.status().code(), StatusCode::unsupported);
  EXPECT_FALSE(render("{{ x }}", ordered_json::array()).is_ok());
}

TEST(Jinja, FloatsPrintAsPythonRepr) {
  const std::pair<double, const char*> cases[] = {{1.0, "1.0"},
                                                  {0.1, "0.1"},
                                                  {-2.5, "-2.5"},
                                                  {1e16, "1e+16"},
                                                  {1234567890123456.0, "1234567890123456.0"},
                                                  {0.0001, "0.0001"},
                                                  {0.00001, "1e-05"},
                                                  {1.5e-300, "1.5e-300"},
                                                  {123.456, "123.456"},
                                                  {-0.0, "-0.0"},
                                                  {1.0 / 3.0, "0.3333333333333333"},
                                                  {2.5e22, "2.5e+22"}};
  for (const auto& [x, want] : cases) {
    EXPECT_EQ(render_ok("{{ x }}|{{ x|tojson }}", {{"x", x}}), std::string(want) + "|" + want);
  }
}

TEST(Jinja, TemplatesAreReusableAndThreadFree) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t->render_context({{"xs", {1, 2, 3}}}), "6");
  EXPECT_EQ(*t->render_context({{"xs", {10}}}), "10");  // no state leaks between renders
  const ChatTemplate copy = *t;
  EXPECT_EQ(*copy.render_context({{"xs", ordered_json::array()}}), "0");
}

// ---- hostile templates: every one ends quickly with an error, none crashes or hangs ----

Status render_status(const std::string& src, const ChatTemplateLimits& limits = {}) {
  return render(src, ordered_json::object(), limits).status();
}

TEST(JinjaLimits, DeepNestingIsRefused) {
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(render_status(parens).message().find("deeper than the limit"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if true %}";
  EXPECT_NE(render_status(ifs).message().find("deeper than the limit"), std::string::npos);
  std::string chain = "{{ x";
  for (int i = 0; i < 100000; ++i) chain += ".a";
  EXPECT_NE(render_status(chain + " }}").message().find("deeper than the limit"), std::string::npos);
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  EXPECT_NE(render_status(sum + " }}").message().find("deeper than the limit"), std::string::npos);
  std::string nots = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "not ";
    return s;
  }() + "x }}";
  EXPECT_FALSE(render_status(nots).is_ok());
  std::string lists = "{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}";
  EXPECT_FALSE(render_status(lists).is_ok());
  // Nesting within the limit still works.
  std::string ok = "{{ " + std::string(40, '(') + "7" + std::string(40, ')') + " }}";
  EXPECT_EQ(render_ok(ok), "7");
}

TEST(JinjaLimits, UnterminatedTagsFail) {
  for (const char* src : {"{{", "{%", "{# x", "{{ x", "{% if", "{% for x in y %}", "{{ 'a", "{% raw %}x", "{{ [1, 2 }}",
                          "{% if x %}{% else %}", "{% macro m() %}", "{%- ", "{{ x |", "{{ x is }}"}) {
    auto r = ChatTemplate::parse(src);
    EXPECT_FALSE(r.is_ok()) << src;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << src << ": " << r.status().to_string();
    }
  }
}

TEST(Jinja, UnclosedCommentOrRawAtTheVeryEndIsDropped) {
  // jinja2's lexer quirk: "{#" or "{% raw %}" with nothing after them ends the template quietly.
  EXPECT_EQ(render_ok("a \n {#"), "a \n");
  EXPECT_EQ(render_ok("x{% raw %}"), "x");
}

TEST(JinjaLimits, HugeLoopsAreBounded) {
  // 10^10 iterations would hang; the work budget stops it.
  Status st = render_status("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(st.message().find("work limit"), std::string::npos) << st.to_string();
  st = render_status("{{ range(100001)|list|length }}");
  EXPECT_NE(st.message().find("range too big"), std::string::npos) << st.to_string();
}

TEST(JinjaLimits, OutputAndValueSizesAreBounded) {
  ChatTemplateLimits small;
  small.max_output_bytes = 1 << 20;
  Status st = render_status("{% for i in range(40000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", small);
  EXPECT_NE(st.message().find("output exceeds"), std::string::npos) << st.to_string();
  st = render_status("{{ ('x' * 1000000) * 1000000 }}", small);
  EXPECT_NE(st.message().find("over the limit"), std::string::npos) << st.to_string();
  st =
      render_status("{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  EXPECT_NE(st.message().find("over the limit"), std::string::npos) << st.to_string();
  st = render_status("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  EXPECT_NE(st.message().find("over the limit"), std::string::npos) << st.to_string();
}

TEST(JinjaLimits, MacroRecursionIsBounded) {
  Status st = render_status("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(st.message().find("macro calls nest deeper"), std::string::npos) << st.to_string();
}

TEST(JinjaLimits, DeepAndCyclicValuesAreSafe) {
  // A 100000-deep list chain: printing stops at a depth limit, freeing it does not recurse.
  auto r = render(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
      "{{ (ns.l|string)|length > 0 }}");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, "True");
  // A namespace that contains itself: renders, and its cycle is broken afterwards (no leak).
  r = render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me|length }}");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, "1");
  Status st = render_status("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns|tojson }}");
  EXPECT_FALSE(st.is_ok());
  // Deep JSON input is refused cleanly.
  ordered_json deep = 1;
  for (int i = 0; i < 2000; ++i) deep = ordered_json::array({deep});
  EXPECT_FALSE(render("{{ x }}", {{"x", deep}}).is_ok());
}

TEST(JinjaLimits, AdversarialInputsDoNotCrash) {
  // A grab bag of malformed and odd templates: each must return (ok or error), never crash.
  const char* srcs[] = {
      "{{}}",
      "{%%}",
      "{##}",
      "{{-}}",
      "{%- -%}",
      "}}{{",
      "%}",
      "#}",
      "{{ ] }}",
      "{{ ) }}",
      "{{ } }}",
      "{{ 'a'[::0] }}",
      "{{ [][0] }}",
      "{{ ''[5] }}",
      "{{ none.x }}",
      "{{ 1.x }}",
      "{{ x[1:2:3:4] }}",
      "{% for %}{% endfor %}",
      "{% for x in %}{% endfor %}",
      "{% set %}",
      "{% set = 1 %}",
      "{% if %}{% endif %}",
      "{% macro %}{% endmacro %}",
      "{% endfor %}",
      "{% else %}",
      "{{ \xff\xfe }}",
      "\xff{{ 'x' }}\xfe",
      "{{ '\\u12' }}",
      "{{ 1e999 }}",
      "{{ -9223372036854775807 - 1 }}",
      "{{ 2 ** 64 }}",
      "{{ 10 // 0 }}",
      "{{ 1.5 % 0 }}",
      "{{ (-8) ** 0.5 }}",
      "{{ 'a' * -1 }}",
      "{{ [1] * 9223372036854775807 }}",
      "{{ range(0, 10, 0) }}",
      "{{ 'abc'.split('') }}",
      "{{ x.__class__ }}",
      "{% set ns = namespace() %}{% set ns.x.y = 1 %}",
      "{% for a, b in [1, 2] %}{% endfor %}",
      "{{ loop.index }}",
      "{% for x in 5 %}{% endfor %}",
      "{{ namespace(1, 2) }}",
      "{{ dict(1) }}",
      "{{ raise_exception() }}",
      "{{ x|join(1, 2, 3) }}",
      "{{ 'x'|indent(999999999) }}",
      "{{ [1, 'a']|sort }}",
      "{{ {'a': 1}|dictsort(by='nope') }}",
  };
  for (const char* src : srcs) {
    auto r = render(src);
    (void)r;
  }
  SUCCEED();
}

}  // namespace
}  // namespace lithe

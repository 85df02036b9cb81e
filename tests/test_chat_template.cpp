// Chat templates: the real templates of tests/data/chat_templates/ against Hugging Face's JavaScript Jinja
// (tools/make_chat_template_fixtures.sh), the feature suite, and hand-worked tests of each construct, of
// the errors (with line and column) and of the limits.
#include <attend/chat_template.h>
#include <attend/error.h>

#include "tokenize/jinja_value.h"
#include "tokenize/chat_template_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

using attend::ChatMessage;
using attend::ChatRenderOptions;
using attend::ChatTemplate;
using json = nlohmann::ordered_json;

const std::filesystem::path kDir = std::filesystem::path(ATTEND_TEST_DATA) / "chat_templates";

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return json::parse(in);
}

std::string quoted(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

// Compares texts and, when they differ, says where: the byte offset and a little of both around it.
::testing::AssertionResult same_text(const std::string& expected, const std::string& actual) {
  if (expected == actual) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return ::testing::AssertionFailure() << "first difference at byte " << i << " (expected " << expected.size()
                                       << " bytes, got " << actual.size() << ")\n  expected: "
                                       << quoted(expected.substr(from, 120)) << "\n  actual:   " << quoted(actual.substr(from, 120));
}

// Renders in UTC, as the oracle did (strftime_now reads local time).
std::string render(const ChatTemplate& t, const json& messages, ChatRenderOptions options) {
  setenv("TZ", "UTC", 1);
  tzset();
  return t.render_json(messages.dump(), options);
}

// One render of a golden: the expected text, or the error (with the template's own message when it
// raised one), or, for a conversation Attend renders on purpose where the oracle refuses, just a render.
void check_case(const ChatTemplate& t, const json& c, const json& messages, const ChatRenderOptions& options) {
  SCOPED_TRACE(c["name"].get<std::string>());
  if (c.contains("attend_error")) {
    try {
      render(t, messages, options);
      ADD_FAILURE() << "Attend renders; expected the error " << c["attend_error"].get<std::string>();
    } catch (const attend::Error& e) {
      EXPECT_NE(std::string(e.what()).find(c["attend_error"].get<std::string>()), std::string::npos) << e.what() << "\n" << c["why"];
    }
  } else if (c.contains("attend")) {
    EXPECT_TRUE(same_text(c["attend"].get<std::string>(), render(t, messages, options))) << c["why"].get<std::string>();
  } else if (c.contains("attend_renders")) {
    EXPECT_NO_THROW(render(t, messages, options)) << c["attend_renders"].get<std::string>();
  } else if (c.contains("expected")) {
    try {
      EXPECT_TRUE(same_text(c["expected"].get<std::string>(), render(t, messages, options)));
    } catch (const attend::Error& e) {
      ADD_FAILURE() << "the oracle renders, Attend throws: " << e.what();
    }
  } else {
    try {
      render(t, messages, options);
      ADD_FAILURE() << "the oracle fails (" << c["error"].get<std::string>() << "), Attend renders";
    } catch (const attend::Error& e) {
      if (c.value("raised", false)) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
      }
    }
  }
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  if (!std::filesystem::exists(kDir)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(kDir))
    if (entry.path().extension() == ".json" && entry.path().stem() != "features") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, RendersAsTheOracle) {
  const json g = read_json(kDir / (GetParam() + ".json"));
  const ChatTemplate t = ChatTemplate::from_string(g["chat_template"].get<std::string>(), GetParam());
  ASSERT_GE(g["cases"].size(), 10u);
  for (const json& c : g["cases"]) {
    ChatRenderOptions options{.add_generation_prompt = c["add_generation_prompt"].get<bool>(), .now = g["now"].get<int64_t>()};
    if (c.contains("tools")) options.tools_json = c["tools"].dump();
    if (c.contains("extra")) options.extra_json = c["extra"].dump();
    if (!g["bos_token"].get<std::string>().empty()) options.bos_token = g["bos_token"].get<std::string>();
    if (!g["eos_token"].get<std::string>().empty()) options.eos_token = g["eos_token"].get<std::string>();
    check_case(t, c, c["messages"], options);
  }
}

INSTANTIATE_TEST_SUITE_P(Real, ChatTemplateGolden, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

TEST(ChatTemplate, GoldensCoverTheFamilies) {
  const auto names = golden_names();
  for (const char* family : {"llama2", "llama3", "llama3_1", "llama3_2", "smollm2", "mistral_v0_1", "mistral_v0_3",
                             "mistral_nemo", "qwen2", "qwen2_5", "qwen3", "gemma", "gemma3", "chatml", "gpt2"})
    EXPECT_NE(std::find(names.begin(), names.end(), family), names.end()) << family;
}

TEST(ChatTemplate, FeatureSuiteAsTheOracle) {
  const json g = read_json(kDir / "features.json");
  ASSERT_GE(g["cases"].size(), 90u);
  for (const json& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const json context = c.value("context", json::object());
    ChatRenderOptions options{.now = g["now"].get<int64_t>()};
    if (context.contains("tools")) options.tools_json = context["tools"].dump();
    std::unique_ptr<ChatTemplate> t;
    try {
      t = std::make_unique<ChatTemplate>(ChatTemplate::from_string(c["template"].get<std::string>(), c["name"].get<std::string>()));
    } catch (const attend::Error& e) {
      EXPECT_TRUE(c.contains("error")) << "Attend cannot parse what the oracle renders: " << e.what();
      continue;
    }
    check_case(*t, c, context.value("messages", json::array()), options);
  }
}

// ---- hand-worked renders ------------------------------------------------------------------------

std::string run(const std::string& source, const std::string& extra = "") {
  ChatRenderOptions options{.extra_json = extra, .now = 1721995200};
  return render(ChatTemplate::from_string(source, "t"), json::array(), options);
}

// The message of the attend::Error that rendering `source` throws.
std::string error_of(const std::string& source, attend::ChatTemplateLimits limits = {}) {
  try {
    const ChatTemplate t = ChatTemplate::from_string(source, "t", limits);
    render(t, json::array(), {});
  } catch (const attend::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, RendersMessagesWithOptions) {
  const ChatTemplate t = ChatTemplate::from_string(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}{{ tools is none }}{{ documents is none }}{{ flag }}");
  const std::string out = t.render({{"system", "S"}, {"user", "U"}},
                                   {.add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>", .extra_json = R"({"flag": 7})"});
  EXPECT_EQ(out, "<s><system>S</s><user>U</s><assistant>truetrue7");
  // Without bos_token, the variable is undefined and writes nothing.
  EXPECT_EQ(ChatTemplate::from_string("[{{ bos_token }}]{{ bos_token is defined }}").render({}), "[]false");
}

TEST(ChatTemplate, ToolsKeepTheirKeyOrder) {
  const ChatTemplate t = ChatTemplate::from_string("{{ tools[0] | tojson }}");
  EXPECT_EQ(t.render({}, {.tools_json = R"([{"z": 1, "a": {"y": 2, "b": 3}}])"}), R"({"z": 1, "a": {"y": 2, "b": 3}})");
}

TEST(ChatTemplate, Extensions) {
  // What Python's Jinja has and @huggingface/jinja lacks; worked out by hand from Jinja's documentation.
  EXPECT_EQ(run("{{ [1, 2, 3, 4] | select('even') | list }}"), "[2, 4]");
  EXPECT_EQ(run("{{ [1, 2, 3, 4] | reject('odd') | join(',') }}"), "2,4");
  EXPECT_EQ(run("{{ [1, 2, 3] | sum }} {{ [{'n': 2}, {'n': 5}] | sum(attribute='n') }}"), "6 7");
  EXPECT_EQ(run("{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | min }}"), "1 3 A");
  EXPECT_EQ(run("{{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }}"), "2.0 3.14 3.0");
  EXPECT_EQ(run("{{ 'one two  three' | wordcount }}"), "3");
  EXPECT_EQ(run("{{ '<a href=\"x\">&</a>' | e }}"), "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt;");
  EXPECT_EQ(run("{{ [1, 2, 3] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 0) | list }}"), "[[1, 2], [3]] [[1, 2], [3, 0]]");
  EXPECT_EQ(run("{{ ['a', 'b'] | map('upper') | join }}"), "AB");
  EXPECT_EQ(run("{{ '=' * 3 }} {{ [0] * 2 }}"), "=== [0, 0]");
  EXPECT_EQ(run("{% for c in 'héj' %}{{ c }}.{% endfor %}"), "h.é.j.");
  EXPECT_EQ(run("{{ 'a-b-c'.split('-') | join('+') }} {{ ', '.join(['x', 'y']) }} {{ 'banana'.count('an') }} {{ 'banana'.find('n') }}"),
            "a+b+c x, y 2 2");
  EXPECT_EQ(run("{{ 'a' < 'b' }} {{ 'b' >= 'c' }}"), "true false");
  // Python's case mappings, ASCII and beyond (str.upper turns ß into SS; title upper-cases after a non-letter).
  EXPECT_EQ(run("{{ 'ÉCOLE Straße 9Ab' | lower }}|{{ 'école straße 9ab' | upper }}|{{ 'hello wORLD ünï-x 9ab' | title }}|"
                "{{ 'Mixed CASE 42' | upper }}{{ 'Mixed CASE 42' | lower }}"),
            "école straße 9ab|ÉCOLE STRASSE 9AB|Hello World Ünï-X 9Ab|MIXED CASE 42mixed case 42");
  EXPECT_EQ(run("{{ {'a': {'b': [5]}} | attr('a.b.0') }}"), "5");
  EXPECT_EQ(run("{{ 3 is lt(4) }} {{ 3 is in([1, 3]) }} {{ 'x' is sameas('x') }}"), "true true true");
  EXPECT_EQ(run("{{ '\\d' }}"), "\\d");  // Python keeps an unknown escape
  EXPECT_EQ(run("{% for x in [] %}{% else %}none{% endfor %}|{% for x in [1] %}{% break %}{% else %}no{% endfor %}"), "none|");
}

TEST(ChatTemplate, DictsOfAnySizeKeepOrderAndFindEveryKey) {
  // Below 16 entries a dict is scanned, from 16 on it is indexed: both keep insertion order, replace a
  // repeated key in place and find every key.
  for (int n : {3, 15, 16, 17, 40}) {
    std::string literal = "{", expected_keys, expected_values;
    for (int k = 0; k < n; ++k) {
      literal += fmt::format("'k{}': {}, ", k, k);
      expected_keys += fmt::format("k{},", k);
      expected_values += fmt::format("{},", k == 0 ? 99 : k);
    }
    literal += "'k0': 99}";  // repeated: replaces the first entry's value, keeps its place
    std::string lookups;
    for (int k = 0; k < n; ++k) lookups += fmt::format("{{{{ d['k{}'] }}}},", k);
    EXPECT_EQ(run(fmt::format("{{% set d = {} %}}{{% for k in d %}}{{{{ k }}}},{{% endfor %}}|{}|{{{{ d | length }}}}"
                              "{{{{ d['k{}'] is defined }}}}",
                              literal, lookups, n)),
              expected_keys + "|" + expected_values + "|" + std::to_string(n) + "false")
        << n << " keys";
  }
  std::string sets;  // a namespace's attributes, set one by one past the index's threshold
  for (int k = 0; k < 20; ++k) sets += fmt::format("{{% set ns.a{} = {} %}}", k, k * k);
  EXPECT_EQ(run("{% set ns = namespace() %}" + sets + "{% set ns.a3 = -1 %}{{ ns.a0 }} {{ ns.a3 }} {{ ns.a19 }}"), "0 -1 361");
}

TEST(ChatTemplate, LoopIsItsOwnForEachTurnThatKeepsIt) {
  // `loop` is filled again turn by turn only when nothing else holds it.
  EXPECT_EQ(run("{% set ns = namespace(first=none) %}{% for x in 'abc' %}{% if loop.first %}{% set ns.first = loop %}"
                "{% endif %}{{ loop.index }}{{ loop.previtem }}{% endfor %} {{ ns.first.index }}{{ ns.first.last }}"),
            "12a3b 1false");
  EXPECT_EQ(run("{% set ns = namespace(all=[]) %}{% for x in [5, 6] %}{% set ns.all = ns.all + [loop] %}{% endfor %}"
                "{{ ns.all | map(attribute='index0') | list }}"),
            "[0, 1]");
  // A dict the body sets as `loop` is replaced by the next turn's loop, not filled in.
  EXPECT_EQ(run("{% for x in [1, 2] %}{{ loop.index }}{{ loop.extra }}{% set loop = {'extra': 'E'} %}{{ loop.extra }}"
                "{% endfor %}"),
            "1E2E");
}

TEST(ChatTemplate, IntegerEdgesNeitherOverflowNorHang) {
  EXPECT_EQ(error_of("{{ (-9223372036854775807 - 1) // -1 }}"), "t:1:5: integer overflow in '//'");
  EXPECT_EQ(error_of("{{ 2 ** 63 }}"), "t:1:4: integer overflow in '**'");
  EXPECT_EQ(run("{{ 1 ** 9223372036854775807 }} {{ 2 ** 62 }} {{ (-1) ** 3 }} {{ 2 ** -1 }}"), "1 4611686018427387904 -1 0.5");
  EXPECT_EQ(run("{{ [1, 2, 3][2::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"), "[3] [3]");
  EXPECT_EQ(run("{{ range(9223372036854775800, 9223372036854775807, 5) }}"), "[9223372036854775800, 9223372036854775805]");
  EXPECT_EQ(run("[{{ '' * 100000000000 }}]"), "[]");
}

TEST(ChatTemplate, NumbersPrintAsTheOracle) {
  using attend::tokenize::jinja::js_number;
  EXPECT_EQ(js_number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(js_number(1e21), "1e+21");
  EXPECT_EQ(js_number(1.5e-7), "1.5e-7");
  EXPECT_EQ(js_number(0.000001), "0.000001");
  EXPECT_EQ(js_number(123456789012345680000.0), "123456789012345680000");
  EXPECT_EQ(js_number(-2.5), "-2.5");
  EXPECT_EQ(run("{{ 2.0 ** 70 }} {{ -0.0 }} {{ 1.0 * 100 }}"), "1.1805916207174113e+21 -0.0 100.0");
}

// ---- errors -------------------------------------------------------------------------------------

TEST(ChatTemplate, SyntaxErrorsNameLineColumnAndWhatWasExpected) {
  EXPECT_EQ(error_of("ab\n{{ 1 + }}"), "t:2:8: expected an expression, found '}}'");
  EXPECT_EQ(error_of("{% if x %}\nopen"), "t:2:5: expected {% elif %} or {% else %} or {% endif %} to close the 'if' of line 1, column 1, "
                                         "found the end of the template");
  EXPECT_EQ(error_of("{% frob %}"), "t:1:1: unknown statement 'frob' (expected set, if, for, macro, call, filter, break or continue)");
  EXPECT_EQ(error_of("{% endfor %}"), "t:1:1: '{% endfor %}' without the statement it would close");
  EXPECT_EQ(error_of("{{ 'abc }}"), "t:1:4: the string starting here is not closed with '");
  EXPECT_EQ(error_of("x {# never"), "t:1:3: the comment '{#' is not closed with '#}'");
  EXPECT_EQ(error_of("{{ a ? b }}"), "t:1:6: unexpected character '?' inside a tag");
  EXPECT_EQ(error_of("{{ f(a=1, 2) }}"), "t:1:11: a positional argument follows a keyword argument");
  EXPECT_EQ(error_of("{% for 1 in x %}{% endfor %}"), "t:1:8: expected a name or names separated by commas after 'for'");
  EXPECT_EQ(error_of("{% macro m(a=1, b) %}{% endmacro %}"), "t:1:17: parameter 'b' without a default follows one with a default");
  EXPECT_EQ(error_of("{{ '\\x4' }}"), "t:1:5: bad escape \\x: expected 2 hexadecimal digits");
  EXPECT_EQ(error_of("{{ 99999999999999999999 }}"), "t:1:4: the integer 99999999999999999999 is out of range");
}

TEST(ChatTemplate, RuntimeErrorsNameTheOperation) {
  EXPECT_EQ(error_of("\n  {{ 1 + 'a' - 2 }}"), "t:2:6: unsupported operand types for '-': 'str' and 'int'");
  EXPECT_EQ(error_of("{{ x + 1 }}"), "t:1:4: cannot apply '+' to an undefined value");
  EXPECT_EQ(error_of("{{ 'a' ~ none }}"), "t:1:4: cannot apply '~' to none");
  EXPECT_EQ(error_of("{{ [1] | upper }}"), "t:1:4: the filter 'upper' needs a string, got a list");
  EXPECT_EQ(error_of("{{ 'a' | nope }}"), "t:1:4: unknown filter 'nope'");
  EXPECT_EQ(error_of("{{ 1 is nope }}"), "t:1:4: unknown test 'nope'");
  EXPECT_EQ(error_of("{{ foo() }}"), "t:1:4: 'foo' is undefined, not a function");
  EXPECT_EQ(error_of("{{ 1 // 0 }}"), "t:1:4: integer division by zero");
  EXPECT_EQ(error_of("{% for a, b in [[1]] %}{% endfor %}"), "t:1:1: cannot unpack 1 values into 2 loop variables");
  EXPECT_EQ(error_of("{% set d = {} %}{% set d.x = 1 %}"), "t:1:17: cannot set an attribute of a dict: only a namespace() can be changed");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "t:1:34: macro 'm' takes at most 1 argument(s), got 2");
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}"), "t:1:4: integer overflow in '+'");
  EXPECT_EQ(error_of("{% break %}"), "t: '{% break %}' or '{% continue %}' outside a for loop");
}

TEST(ChatTemplate, RaiseExceptionGivesTheTemplatesMessage) {
  EXPECT_EQ(error_of("{% if true %}\n  {{ raise_exception('Roles must alternate') }}{% endif %}"),
            "t:2:6: the template raised an error: Roles must alternate");
}

// ---- limits -------------------------------------------------------------------------------------

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  const attend::ChatTemplateLimits small{.max_nesting = 20, .max_steps = 100000, .max_output = 1 << 16};
  const std::string parens = "{{ " + std::string(30, '(') + "1" + std::string(30, ')') + " }}";
  EXPECT_NE(error_of(parens, small).find("nesting deeper than the limit of 20"), std::string::npos) << error_of(parens, small);
  EXPECT_NE(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", small)
                .find("ran past the limit of 100000 steps"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small).find("macro calls nested deeper than the limit of 20"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", small)
                .find("passes the limit of 65536"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100) %}{{ 'x' * 1000 }}{% endfor %}", small).find("the output passes the limit of 65536 bytes"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000000) | length }}", small).find("passes the limit"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}", small).find("passes the limit"), std::string::npos);
  // Lists nested without end would exhaust the stack when compared, printed or freed.
  EXPECT_NE(error_of("{% set ns = namespace(x=[]) %}{% for i in range(1100) %}{% set ns.x = [ns.x] %}{% endfor %}")
                .find("lists and dicts nested deeper than the limit of 1000"), std::string::npos);
  // A namespace that holds itself renders (and is emptied after the render, so it is freed).
  EXPECT_EQ(run("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"), "true");
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("nested more than 512 deep"), std::string::npos);
}

// ---- tokenizer_config.json ------------------------------------------------------------------------

TEST(ChatTemplate, ReadsTokenizerConfig) {
  const ChatTemplate plain = ChatTemplate::from_tokenizer_config(
      R"({"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false}, "eos_token": "</s>",
          "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"})");
  EXPECT_EQ(plain.bos_token(), "<s>");
  EXPECT_EQ(plain.render({{"user", "hi"}}), "<s>hi</s>");
  const std::string listed = R"({"eos_token": null, "chat_template": [{"name": "default", "template": "D"},
                                  {"name": "tool_use", "template": "T{{ tools | length }}"}]})";
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(listed).render({}), "D");
  const ChatTemplate tool_use = ChatTemplate::from_tokenizer_config(listed, "tokenizer_config.json", "tool_use");
  EXPECT_EQ(tool_use.render({}, {.tools_json = "[1, 2]"}), "T2");
  EXPECT_EQ(tool_use.available(), (std::vector<std::string>{"default", "tool_use"}));
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(listed, "c.json", "rag"), attend::Error);
  try {
    ChatTemplate::from_tokenizer_config(R"({"bos_token": "<s>"})", "c.json");
    ADD_FAILURE() << "no error";
  } catch (const attend::Error& e) {
    EXPECT_EQ(std::string(e.what()), "c.json: has no chat_template (the model may not be a chat model)");
  }
  try {
    ChatTemplate::from_tokenizer_config(R"({"chat_template": [{"name": "x"}]})", "c.json");
    ADD_FAILURE() << "no error";
  } catch (const attend::Error& e) {
    EXPECT_EQ(std::string(e.what()), "c.json: chat_template[0] has no string 'template'");
  }
  EXPECT_THROW(attend::tokenize::special_token_text(nlohmann::json(3), "c.json", "bos_token"), attend::Error);
}

TEST(ChatTemplate, ModelDirectoryPrefersChatTemplateJinja) {
  const auto dir = std::filesystem::temp_directory_path() / "attend_chat_template_dir";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_THROW(ChatTemplate::from_model_dir(dir), attend::Error);
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": "json"})";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render({}), "json");
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "E", "chat_template": "config{{ eos_token }}"})";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render({}), "configE");
  std::ofstream(dir / "chat_template.jinja") << "jinja{{ eos_token }}\n";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render({}), "jinjaE");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, MessagesMustBeAListOfObjects) {
  const ChatTemplate t = ChatTemplate::from_string("x");
  EXPECT_THROW(t.render_json("{}", {}), attend::Error);
  EXPECT_THROW(t.render_json("[1]", {}), attend::Error);
  EXPECT_THROW(t.render_json("[", {}), attend::Error);
  EXPECT_THROW(t.render({}, {.tools_json = "{}"}), attend::Error);
}

}  // namespace

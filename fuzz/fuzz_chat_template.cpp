// Chat templates (tokenizer_config.json's chat_template, Jinja): lexed, parsed and rendered for a small
// fixed conversation with a tool call and a tool. An input that starts with '{' is read as a whole
// tokenizer_config.json instead. The limits are small, so no template can run long or grow large; what
// renders must render again to the same text.
#include "fuzz_util.h"

#include <attend/chat_template.h>

namespace {

const char* kMessages = R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
  {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "22 C"},
  {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is 22 C."}
])";
const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attend;
  const std::string_view input = fuzz::text(data, size);
  const ChatTemplateLimits limits{.max_nesting = 48, .max_steps = 20'000, .max_output = 1u << 16};
  try {
    const ChatTemplate t = !input.empty() && input[0] == '{'
                               ? ChatTemplate::from_tokenizer_config(input, "tokenizer_config.json", "", limits)
                               : ChatTemplate::from_string(std::string(input), "chat_template", limits);
    const ChatRenderOptions options{.add_generation_prompt = true, .tools_json = kTools, .bos_token = "<s>",
                                    .eos_token = "</s>", .now = 1721995200};
    const std::string first = t.render_json(kMessages, options);
    if (first.size() > limits.max_output) fuzz::fail("a render passed the output limit");
    if (t.render_json(kMessages, options) != first) fuzz::fail("two renders of one template differ");
  } catch (const Error&) {
  }
  return 0;
}

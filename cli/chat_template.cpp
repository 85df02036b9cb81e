// `attend chat-template`: renders a model's chat template for a conversation in a JSON file, so a user can
// see the exact text a chat model is given.
#include "commands.h"

#include <attend/chat_template.h>
#include <attend/error.h>
#include <attend/io.h>

#include <fmt/format.h>

#include <iostream>
#include <iterator>

namespace attend::cli {

namespace {

std::string read_input(const std::string& path) {
  if (path != "-") return read_file(path);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat-template", "Render a model's chat template (tokenizer_config.json) for a conversation");
  struct Options {
    std::string model, template_file, config, name, messages, tools, extra;
    std::string bos, eos;
    bool add_generation_prompt = false;
    int64_t now = -1;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Model directory: chat_template.jinja, tokenizer_config.json or chat_template.json");
  cmd->add_option("--config", o->config, "A tokenizer_config.json (instead of --model)")->check(CLI::ExistingFile);
  cmd->add_option("--template", o->template_file, "A template file (Jinja) (instead of --model)")->check(CLI::ExistingFile);
  cmd->add_option("--name", o->name, "Which of a config's named templates (e.g. tool_use; default: default)");
  cmd->add_option("--messages", o->messages,
                  "JSON file (- for standard input): an array of messages {\"role\", \"content\", ...}")->required();
  cmd->add_option("--tools", o->tools, "JSON file with an array of tool schemas");
  cmd->add_option("--extra", o->extra, "JSON object of further template variables, e.g. '{\"enable_thinking\": false}'");
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the start of an assistant turn");
  auto* bos = cmd->add_option("--bos", o->bos, "BOS string (default: the config's)");
  auto* eos = cmd->add_option("--eos", o->eos, "EOS string (default: the config's)");
  cmd->add_option("--now", o->now, "Seconds since the epoch for strftime_now (default: the clock)");
  cmd->callback([o, bos, eos] {
    const int sources = !o->model.empty() + !o->config.empty() + !o->template_file.empty();
    if (sources != 1) throw Error("chat-template: give one of --model, --config or --template");
    ChatTemplate t = !o->model.empty()    ? ChatTemplate::from_model_dir(o->model, o->name)
                     : !o->config.empty() ? ChatTemplate::from_tokenizer_config(read_file(o->config), o->config, o->name)
                                          : ChatTemplate::from_string(read_file(o->template_file), o->template_file);
    ChatRenderOptions options{.add_generation_prompt = o->add_generation_prompt, .extra_json = o->extra};
    if (!o->tools.empty()) options.tools_json = read_file(o->tools);
    if (bos->count() > 0) options.bos_token = o->bos;
    if (eos->count() > 0) options.eos_token = o->eos;
    if (o->now >= 0) options.now = o->now;
    std::cout << t.render_json(read_input(o->messages), options) << std::flush;
  });
}

}  // namespace attend::cli

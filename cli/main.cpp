// `attend`: the command-line tool. Each subcommand is one file in cli/; this file wires them up,
// applies the global options and turns every error into one clear line and a non-zero exit.
#include "commands.h"
#include "signals.h"

#include <attend/error.h>
#include <attend/log.h>
#include <attend/runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Edits (insertions, deletions, substitutions) that turn a into b.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The name among `names` nearest `word` when it is near enough to be a slip (a third of its letters at most), or
// one that starts with it; "" otherwise.
std::string nearest(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& name : names) {
    const size_t d = name.starts_with(word) && word.size() >= 3 ? 1 : edit_distance(word, name);
    if (d < best_distance) best = name, best_distance = d;
  }
  return best;
}

// After a parse error: "did you mean" for a command or an option that is a slip of one.
void suggest(const CLI::App& app, int argc, char** argv) {
  const auto chosen = app.get_subcommands();
  const CLI::App* command = chosen.empty() ? nullptr : chosen.front();
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(sub->get_name());
  std::vector<std::string> options;
  for (const CLI::App* a : {&app, command})
    if (a != nullptr)
      for (const CLI::Option* o : a->get_options())
        for (const std::string& name : o->get_lnames()) options.push_back("--" + name);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--")) {
      const std::string name(arg.substr(0, arg.find('=')));
      if (std::find(options.begin(), options.end(), name) != options.end()) continue;
      if (const std::string near = nearest(name, options); !near.empty())
        fmt::print(stderr, "attend: {} is not an option{}; did you mean {}?\n", name,
                   command != nullptr ? " of '" + command->get_name() + "'" : "", near);
    } else if (command == nullptr && !arg.starts_with("-")) {
      if (const std::string near = nearest(arg, commands); !near.empty())
        fmt::print(stderr, "attend: '{}' is not a command; did you mean '{}'?\n", arg, near);
      else
        fmt::print(stderr, "attend: '{}' is not a command (attend --help lists them)\n", arg);
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  attend::cli::start_signal_thread();  // before any other thread: SIGINT and SIGTERM go to it alone (signals.h)
  CLI::App app{fmt::format(
      "attend {}: train, evaluate and run transformers (encoder, decoder, encoder-decoder) on a CPU.\n"
      "Run `attend COMMAND --help` for the options of one command.",
      attend::version())};
  app.set_version_flag("--version", attend::version());
  app.require_subcommand(1);
  int threads = 0;
  std::string log_level = "info";
  std::string isa = "auto";
  app.add_option("--threads", threads, "Threads for every kernel (default: all cores)")
      ->envname("ATTEND_THREADS")->check(CLI::Range(0, 1024));
  app.add_option("--log-level", log_level, "debug, info, warn, error or off")->capture_default_str();
  app.add_option("--isa", isa,
                 "Instruction set of the per-CPU kernels: auto (the widest this CPU runs), generic, avx2, avx512 or avx512vnni")
      ->envname("ATTEND_ISA")
      ->capture_default_str();

  attend::cli::add_info_command(app);
  attend::cli::add_tokenizer_commands(app);
  attend::cli::add_model_commands(app);
  attend::cli::add_train_commands(app);
  attend::cli::add_generate_command(app);
  attend::cli::add_eval_command(app);
  attend::cli::add_chat_template_command(app);
  attend::cli::add_chat_command(app);
  attend::cli::add_serve_command(app);

  app.parse_complete_callback([&] {
    attend::log::set_level(attend::log::parse_level(log_level));
    attend::set_num_threads(threads);
    attend::set_kernel_isa(isa);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    if (code != 0) suggest(app, argc, argv);
    return code;
  } catch (const std::filesystem::filesystem_error& e) {  // a directory that cannot be made, a file not renamed
    std::string what = e.what();
    if (what.starts_with("filesystem error: ")) what = what.substr(18);
    fmt::print(stderr, "attend: error: {}\n", what);
    return 1;
  } catch (const attend::cli::ExitStatus& e) {
    return e.code;
  } catch (const attend::Error& e) {
    fmt::print(stderr, "attend: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attend: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}

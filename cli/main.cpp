// `attend`: the command-line tool. Each subcommand is one file in cli/; this file wires them up,
// applies the global options and turns every error into one clear line and a non-zero exit.
#include "commands.h"

#include <attend/error.h>
#include <attend/log.h>
#include <attend/runtime.h>

#include <fmt/format.h>

#include <exception>

int main(int argc, char** argv) {
  CLI::App app{fmt::format(
      "attend {}: train, evaluate and run transformers (encoder, decoder, encoder-decoder) on a CPU.\n"
      "Run `attend COMMAND --help` for the options of one command.",
      attend::version())};
  app.set_version_flag("--version", attend::version());
  app.require_subcommand(1);
  int threads = 0;
  std::string log_level = "info";
  std::string isa = "auto";
  app.add_option("--threads", threads, "Threads for every kernel (default: all cores)")->envname("ATTEND_THREADS");
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
    return app.exit(e);
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

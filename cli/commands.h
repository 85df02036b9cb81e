// Each subcommand of `attend` lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace attend::cli {

// Adds `attend info`: version, threads, GEMM backend and CPU features.
void add_info_command(CLI::App& app);
// Adds `attend tokenizer train|info`, `attend tokenize` and `attend detokenize`.
void add_tokenizer_commands(CLI::App& app);
// Adds `attend init` and `attend inspect`.
void add_model_commands(CLI::App& app);
// Adds `attend train`, `attend schedule` and `attend plot`.
void add_train_commands(CLI::App& app);

}  // namespace attend::cli

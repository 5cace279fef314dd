// Each subcommand registers itself on the top-level CLI11 app; its callback sets the exit code.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tachyon::cli {

// Exit code chosen by the command that ran (0 when it succeeded).
int& exit_code();

void add_info_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_detokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_router_command(CLI::App& app);
void add_complete_command(CLI::App& app);
void add_keys_command(CLI::App& app);
void add_usage_command(CLI::App& app);

// The process's arguments after the program name, as given (for `serve --replicas`).
std::vector<std::string>& command_line();

// Prints "tachyon: error: MESSAGE" on stderr and sets the exit code to 1.
void fail(const std::string& message);

}  // namespace tachyon::cli

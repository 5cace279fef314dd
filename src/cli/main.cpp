// The `tachyon` command: one subcommand per job.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "kernels/cpu/kernel_level.h"

namespace tachyon::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

void fail(const std::string& message) {
  std::fprintf(stderr, "tachyon: error: %s\n", message.c_str());
  exit_code() = 1;
}

}  // namespace tachyon::cli

int main(int argc, char** argv) {
  // Decides the kernel level now: a TACHYON_CPU_LEVEL this CPU lacks ends the process here,
  // with a message, instead of at the first kernel call.
  tachyon::kernels::active_kernel_level();
  CLI::App app{"tachyon: LLM inference engine and OpenAI-compatible server"};
  app.require_subcommand(1);
  tachyon::cli::add_info_command(app);
  tachyon::cli::add_tokenize_command(app);
  tachyon::cli::add_detokenize_command(app);
  tachyon::cli::add_template_command(app);
  tachyon::cli::add_generate_command(app);
  tachyon::cli::add_bench_command(app);
  tachyon::cli::add_perplexity_command(app);
  tachyon::cli::add_chat_command(app);
  tachyon::cli::add_serve_command(app);
  tachyon::cli::add_router_command(app);
  tachyon::cli::add_complete_command(app);
  tachyon::cli::add_keys_command(app);
  tachyon::cli::add_usage_command(app);
  tachyon::cli::command_line().assign(argv + 1, argv + argc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  return tachyon::cli::exit_code();
}

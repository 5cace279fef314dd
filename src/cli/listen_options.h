// The listener's flags, the same for `serve` and `router`: where to listen and the limits
// that protect the process from clients.
#pragma once

#include <CLI/CLI.hpp>

#include "server/serve_options.h"

namespace tachyon::cli {

void add_listen_options(CLI::App& command, server::ServeOptions& serve);

}  // namespace tachyon::cli

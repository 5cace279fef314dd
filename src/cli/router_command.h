// `tachyon router` and the router behind `tachyon serve --replicas N`.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "router/router_options.h"

namespace tachyon::cli {

// Serves `options` until SIGINT/SIGTERM (drained like a server).
Status run_router(const router::RouterOptions& options);

// `serve --replicas N`: N `tachyon serve` children with `serve_args` (the serve command's own
// arguments, without --replicas/--host/--port/--routing) behind a router listening where
// `options.listen` says.
Status run_replicated_serve(router::RouterOptions options, std::vector<std::string> serve_args,
                            int count);

// The serve command's arguments as given (after "serve"), minus the flags the router keeps.
std::vector<std::string> serve_args_for_replicas(const std::vector<std::string>& args);

}  // namespace tachyon::cli

// A memory amount as given on the command line: a fraction ("0.25": of free RAM for the KV
// cache, of the experts' bytes for --experts-mem) or a size ("2GiB", "512MiB", "1.5GB",
// "1000000").
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace tachyon {

struct MemoryAmount {
  double fraction = 0;  // set when given as a fraction in (0, 1]
  int64_t bytes = 0;    // set when given as a size

  bool empty() const { return fraction <= 0 && bytes <= 0; }
};

// `what` names the option in the error ("KV cache memory", "--experts-mem") and `fraction_of`
// what a fraction is of ("free memory").
Result<MemoryAmount> parse_memory_amount(std::string_view text,
                                         std::string_view what = "KV cache memory",
                                         std::string_view fraction_of = "free memory");

}  // namespace tachyon

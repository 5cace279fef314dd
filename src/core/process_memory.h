// This process's memory as the kernel counts it (/proc/self/status), for reports and tests.
#pragma once

#include <cstdint>

namespace tachyon {

// RssAnon: resident anonymous memory (heap, weights copied at load, caches), not the pages of
// mapped files. -1 where the kernel does not say.
int64_t anonymous_resident_bytes();

}  // namespace tachyon

#include "core/process_memory.h"

#include <fstream>
#include <string>

namespace tachyon {

int64_t anonymous_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "RssAnon:") {
      int64_t kib = 0;
      if (status >> kib) return kib * 1024;
      return -1;
    }
    status.ignore(1 << 12, '\n');
  }
  return -1;
}

}  // namespace tachyon

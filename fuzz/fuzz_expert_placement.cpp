// Any expert-load file (--expert-placement) gives a placement or a Status, never a crash; a
// placement always puts every expert on at least one rank and no rank past its slots.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/expert_placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  // The first bytes pick the shape: experts 1-64, ranks 1-8, spare slots 0-3.
  const int experts = data[0] % 64 + 1;
  const int ranks = data[1] % 8 + 1;
  const int spare = data[2] % 4;
  const std::string text(reinterpret_cast<const char*>(data) + 3, size - 3);
  tachyon::Result<std::vector<tachyon::ExpertLoad::Layer>> load =
      tachyon::parse_expert_load(text, experts);
  if (!load.ok()) return 0;
  tachyon::Result<tachyon::ExpertPlacement> placement =
      tachyon::ExpertPlacement::balanced(*load, experts, ranks, spare);
  if (!placement.ok()) return 0;
  const int slots = (experts + ranks - 1) / ranks + spare;
  for (const tachyon::ExpertLoad::Layer& layer : *load) {
    std::vector<int> held(ranks, 0);
    for (int e = 0; e < experts; ++e) {
      const std::vector<int>& owners = placement->owners(layer.layer, e);
      if (owners.empty()) __builtin_trap();
      for (const int r : owners) {
        if (r < 0 || r >= ranks || ++held[r] > slots) __builtin_trap();
      }
    }
  }
  return 0;
}

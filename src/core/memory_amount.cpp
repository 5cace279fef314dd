#include "core/memory_amount.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

namespace tachyon {

Result<MemoryAmount> parse_memory_amount(std::string_view text, std::string_view what,
                                         std::string_view fraction_of) {
  const std::string original(text);
  auto bad = [&] {
    return invalid_argument(fmt::format(
        "{} '{}' is neither a fraction of {} in (0, 1] (e.g. 0.25) nor a size (e.g. 2GiB, "
        "512MiB, 1000000)",
        what, original, fraction_of));
  };
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  double number = 0;
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(text.data(), end, number);
  if (error != std::errc() || rest == text.data() || !std::isfinite(number) || number <= 0) {
    return bad();
  }
  std::string unit(rest, end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  MemoryAmount amount;
  if (unit.empty()) {
    if (number <= 1.0) {
      amount.fraction = number;
      return amount;
    }
    if (number != std::floor(number)) return bad();
    amount.bytes = static_cast<int64_t>(number);
    return amount;
  }
  static constexpr std::array<std::pair<const char*, double>, 11> kUnits{{
      {"b", 1.0},
      {"k", 1024.0},
      {"kib", 1024.0},
      {"kb", 1e3},
      {"m", 1048576.0},
      {"mib", 1048576.0},
      {"mb", 1e6},
      {"g", 1073741824.0},
      {"gib", 1073741824.0},
      {"gb", 1e9},
      {"tib", 1099511627776.0},
  }};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      const double bytes = number * scale;
      if (bytes < 1 || bytes > 9.0e18) return bad();
      amount.bytes = static_cast<int64_t>(bytes);
      return amount;
    }
  }
  return bad();
}

}  // namespace tachyon

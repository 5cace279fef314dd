// The streaming tool-call parser on arbitrary output text in every format: never crashes, and
// feeding the text in pieces gives the same merged events as feeding it whole. Input: byte 0
// picks the format, byte 1 the split points' seed, the rest is the model's output.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "chat/tool_call_parser.h"

namespace {

struct Merged {
  std::string text;
  std::vector<std::string> names, arguments, ids;
  bool incomplete = false;
  bool operator==(const Merged&) const = default;
};

Merged run(tachyon::ToolCallFormat format, const std::string& output,
           const std::vector<size_t>& cuts) {
  using tachyon::ToolCallEvent;
  tachyon::ToolCallParser parser(format);
  std::vector<ToolCallEvent> events;
  size_t from = 0;
  for (size_t cut : cuts) {
    parser.push(std::string_view(output).substr(from, cut - from), events);
    from = cut;
  }
  parser.push(std::string_view(output).substr(from), events);
  parser.finish(events);
  Merged merged;
  merged.incomplete = parser.incomplete();
  for (const ToolCallEvent& event : events) {
    switch (event.kind) {
      case ToolCallEvent::Kind::kText: merged.text += event.text; break;
      case ToolCallEvent::Kind::kCallStart:
        if (event.index != static_cast<int>(merged.names.size())) std::abort();
        merged.names.push_back(event.name);
        merged.ids.push_back(event.id);
        merged.arguments.emplace_back();
        break;
      case ToolCallEvent::Kind::kArguments:
        if (event.index + 1 != static_cast<int>(merged.names.size())) std::abort();
        merged.arguments.back() += event.text;
        break;
    }
  }
  return merged;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto format = static_cast<tachyon::ToolCallFormat>(data[0] % 8);
  uint32_t seed = data[1];
  const std::string output(reinterpret_cast<const char*>(data + 2), size - 2);
  const Merged whole = run(format, output, {});
  std::vector<size_t> cuts;
  for (size_t at = 0; at < output.size();) {
    seed = seed * 1103515245u + 12345u;
    at += 1 + (seed >> 16) % 7;
    if (at < output.size()) cuts.push_back(at);
  }
  if (!(run(format, output, cuts) == whole)) std::abort();
  return 0;
}

// The JSON Schema check (src/structured/json_schema_check.cpp) on arbitrary JSON: never
// crashes, recursion through $ref and nesting always ends.
#include <cstdint>
#include <string_view>

#include <boost/json.hpp>

#include "structured/json_schema_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::system::error_code error;
  boost::json::parse_options options;
  options.max_depth = 64;  // as the server parses request bodies
  const boost::json::value schema = boost::json::parse(
      std::string_view(reinterpret_cast<const char*>(data), size), error, {}, options);
  if (error) return 0;
  (void)tachyon::check_json_schema(schema);
  return 0;
}

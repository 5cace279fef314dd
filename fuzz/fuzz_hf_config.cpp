// Any config.json gives a validated ModelConfig or a Status naming the field, never a crash:
// the dense, MoE (experts, groups, shared experts) and MLA fields, RoPE scaling included.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/json.hpp>

#include "models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::system::error_code error;
  boost::json::value json =
      boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), error);
  if (error || !json.is_object()) return 0;
  (void)tachyon::ModelConfig::from_hf_config(json.get_object());
  return 0;
}

// tokenizer_config.json, as Hugging Face folders ship it next to tokenizer.json or Kimi's
// tiktoken.model: the special tokens by role and whether BOS/EOS are added.
#pragma once

#include <string_view>

#include <boost/json/object.hpp>

#include "core/status.h"
#include "tokenizer/vocabulary.h"

namespace tachyon {

// `text` parsed as a JSON object; errors name `what` (e.g. "tokenizer_config.json").
Result<boost::json::object> parse_json_object(std::string_view text, std::string_view what);

// Sets the vocabulary's BOS, EOS, unknown and padding ids from bos_token/eos_token/unk_token/
// pad_token (a string or {"content": ...}; each must be in the vocabulary) and add_bos_token /
// add_eos_token.
Status apply_tokenizer_config(const boost::json::object& config, Vocabulary& vocabulary);

}  // namespace tachyon

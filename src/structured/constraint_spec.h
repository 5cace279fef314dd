// What a request constrains its output to, as native values (the server builds it from
// response_format; the CLI from its flags).
#pragma once

#include <string>

namespace tachyon {

struct ConstraintSpec {
  enum class Kind {
    kJsonObject,  // any JSON object (OpenAI's json_object)
    kJsonSchema,  // `source` is a JSON Schema (checked by check_json_schema first)
    kRegex,       // `source` is a regular expression the whole output must match
    kGrammar,     // `source` is an EBNF grammar (XGrammar's GBNF dialect), rule `root` first
    kStructuralTag,  // `source` is an XGrammar structural tag (JSON): free text with
                     // constrained regions, e.g. tool calls
  };
  Kind kind = Kind::kJsonObject;
  std::string source;

  // Stable text for logs and cache keys: the kind, then the source.
  std::string key() const { return std::to_string(static_cast<int>(kind)) + ":" + source; }
};

const char* constraint_kind_name(ConstraintSpec::Kind kind);

}  // namespace tachyon

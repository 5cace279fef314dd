#include "structured/constraint_spec.h"

namespace tachyon {

const char* constraint_kind_name(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::kJsonObject: return "json_object";
    case ConstraintSpec::Kind::kJsonSchema: return "json_schema";
    case ConstraintSpec::Kind::kRegex: return "regex";
    case ConstraintSpec::Kind::kGrammar: return "grammar";
    case ConstraintSpec::Kind::kStructuralTag: return "tool-call grammar";
  }
  return "unknown";
}

}  // namespace tachyon

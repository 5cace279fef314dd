// Which JSON Schemas constrained decoding enforces in full. XGrammar skips some keywords with
// only a log line (uniqueItems, not, if/then/else, multipleOf on numbers, overlapping oneOf...)
// and reads only one of several sibling keywords in places ($ref, enum, anyOf): an output
// built from such a schema may fail validation. This check refuses those schemas up front,
// naming the keyword and where it is, so a client never gets silently relaxed output.
#pragma once

#include <boost/json.hpp>

#include "core/status.h"

namespace tachyon {

// Ok when every validation keyword in `schema` (and everything it reaches through $ref) is one
// the grammar enforces; kUnsupported naming the first keyword that is not, kInvalidArgument for
// a schema that is malformed (wrong types, a $ref to nowhere, a non-local $ref). Keywords JSON
// Schema itself treats as annotations (title, description, default, unknown ones) are fine.
Status check_json_schema(const boost::json::value& schema);

}  // namespace tachyon

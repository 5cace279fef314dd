#include "structured/json_schema_check.h"

#include <gtest/gtest.h>

#include <string>

namespace tachyon {
namespace {

Status check(const std::string& schema) {
  boost::json::parse_options options;
  options.max_depth = 1000;
  return check_json_schema(boost::json::parse(schema, {}, options));
}

TEST(JsonSchemaCheckTest, EnforcedSchemasPass) {
  for (const char* schema : {
           R"({"type":"object","properties":{"a":{"type":"string","maxLength":3}},)"
           R"("required":["a"],"additionalProperties":false,"title":"T","description":"d"})",
           R"({"type":"array","items":{"type":"integer","minimum":0},"minItems":1,"maxItems":3})",
           R"({"type":"string","enum":["a","b"]})",
           R"({"const":5,"type":"integer","description":"five"})",
           R"({"anyOf":[{"type":"null"},{"$ref":"#/$defs/x"}],"$defs":{"x":{"type":"boolean"}}})",
           R"({"$defs":{"n":{"type":"object","properties":{"c":{"type":"array",)"
           R"("items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"})",
           R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}}})",
           R"({"type":"string","format":"date-time"})",
           R"({"type":"string","pattern":"^a+$"})",
           R"({"type":"integer","multipleOf":3})",
           R"({"oneOf":[{"type":"string"},{"type":"integer"}]})",
           R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},)"
           R"({"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]})",
           R"({"allOf":[{"type":"integer"}]})",
           R"({"x-vendor-annotation":{"anything":1},"type":"boolean"})",
           R"(true)",
       }) {
    EXPECT_TRUE(check(schema).ok()) << schema << ": " << check(schema).message();
  }
}

TEST(JsonSchemaCheckTest, UnenforcedKeywordsAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems' at the schema's root"},
      {R"({"type":"object","properties":{"a":{"not":{"type":"null"}}}})",
       "'not' at '/properties/a'"},
      {R"({"if":{"type":"string"},"then":{"maxLength":2}})", "'if'"},
      {R"({"type":"number","multipleOf":0.5})", "'multipleOf'"},
      {R"({"type":"integer","multipleOf":0.5})", "'multipleOf'"},
      {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", "'oneOf'"},
      {R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}}},)"
       R"({"type":"object","properties":{"k":{"const":"b"}}}]})",
       "'oneOf'"},  // not required: {} matches both
      {R"({"allOf":[{"type":"integer"},{"minimum":2}]})", "'allOf'"},
      {R"({"type":"string","format":"phone"})", "format \"phone\""},
      {R"({"type":"string","pattern":"a+","maxLength":4})", "minLength/maxLength beside 'pattern'"},
      {R"({"minimum":3})", "'minimum' at the schema's root needs a 'type'"},
      {R"({"$ref":"#/$defs/a","minimum":1,"$defs":{"a":{"type":"integer"}}})",
       "'minimum' beside '$ref'"},
      {R"({"enum":[1,2],"anyOf":[{"type":"integer"}]})", "beside"},
      {R"({"$ref":"other.json#/a"})", "only references into the schema itself"},
      {R"({"type":"array","items":{"$defs":{},"contains":{}}})", "'contains' at '/items'"},
  };
  for (const auto& [schema, needle] : cases) {
    const Status status = check(schema);
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << schema;
    EXPECT_NE(status.message().find(needle), std::string::npos)
        << schema << ": " << status.message();
  }
}

TEST(JsonSchemaCheckTest, MalformedSchemasAreInvalid) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"$ref":"#/$defs/missing"})", "points to nothing"},
      {R"({"$ref":"#/$defs/a/items/7","$defs":{"a":{"items":[1]}}})", "points to nothing"},
      {R"({"type":"decimal"})", "must name JSON types"},
      {R"({"type":[]})", "must not be empty"},
      {R"({"type":"object","required":"a"})", "array of property names"},
      {R"({"type":"object","properties":[]})", "must be an object"},
      {R"({"type":"string","enum":["a",1]})", "does not allow"},
      {R"({"anyOf":[]})", "non-empty array"},
      {R"({"enum":[]})", "non-empty array"},
      {R"({"type":"integer","minimum":"3"})", "must be a number"},
      {R"(3)", "must be a schema"},
      {R"({"type":"object","properties":{"a":7}})", "'/properties/a' must be a schema"},
  };
  for (const auto& [schema, needle] : cases) {
    const Status status = check(schema);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << schema << ": " << status.message();
    EXPECT_NE(status.message().find(needle), std::string::npos)
        << schema << ": " << status.message();
  }
}

TEST(JsonSchemaCheckTest, DeepAndRecursiveSchemasEnd) {
  std::string deep = R"({"type":"integer"})";
  for (int i = 0; i < 100; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_EQ(check(deep).code(), StatusCode::kUnsupported);
  // References that only point at each other.
  EXPECT_TRUE(check(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"},)"
                    R"({"type":"null"}]}},"$ref":"#/$defs/a"})")
                  .ok());
  // JSON pointer escapes.
  EXPECT_TRUE(check(R"({"$defs":{"a/b":{"type":"null"},"c~d":{"type":"null"}},)"
                    R"("anyOf":[{"$ref":"#/$defs/a~1b"},{"$ref":"#/$defs/c~0d"}]})")
                  .ok());
}

}  // namespace
}  // namespace tachyon

#include "structured/json_schema_check.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace tachyon {
namespace json = boost::json;
namespace {

// Deeper schemas than this are refused rather than walked (and compiled) recursively.
constexpr int kMaxDepth = 64;

// Validation keywords whose meaning the grammar does not enforce.
const std::set<std::string_view> kUnenforced = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
    "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems",
    "unevaluatedProperties", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
    "$anchor"};

// Keywords that constrain a value of one JSON type (they need that type to be stated).
const std::set<std::string_view> kObjectKeywords = {
    "properties", "required", "additionalProperties", "minProperties", "maxProperties",
    "patternProperties", "propertyNames"};
const std::set<std::string_view> kArrayKeywords = {"items", "prefixItems", "minItems", "maxItems"};
const std::set<std::string_view> kStringKeywords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string_view> kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum",
                                                    "exclusiveMaximum", "multipleOf"};
// Keywords that decide the value alone: XGrammar reads them before anything else.
const std::set<std::string_view> kCombinators = {"$ref", "const", "enum", "anyOf", "oneOf",
                                                 "allOf"};
// String formats with a grammar of their own.
const std::set<std::string_view> kFormats = {
    "email",         "date",         "time",         "date-time", "duration",
    "ipv4",          "ipv6",         "hostname",     "uuid",      "uri",
    "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"};
const std::set<std::string_view> kTypes = {"object", "array",   "string", "integer",
                                           "number", "boolean", "null"};

bool is_validation_keyword(std::string_view key) {
  return kObjectKeywords.count(key) || kArrayKeywords.count(key) || kStringKeywords.count(key) ||
         kNumberKeywords.count(key) || kCombinators.count(key) || key == "type";
}

class SchemaWalker {
 public:
  explicit SchemaWalker(const json::value& root) : root_(root) {}

  Status walk(const json::value& schema, const std::string& path, int depth) {
    if (depth > kMaxDepth) {
      return unsupported(fmt::format("the schema nests deeper than {} levels at {}", kMaxDepth,
                                     at(path)));
    }
    if (schema.is_bool()) return Status();
    const json::object* object = schema.if_object();
    if (object == nullptr) {
      return invalid_argument(
          fmt::format("{} must be a schema (an object or a boolean)", at(path)));
    }
    for (const auto& [key, value] : *object) {
      if (kUnenforced.count(key)) {
        return unsupported(fmt::format("keyword '{}' at {} is not supported", std::string_view(key),
                                       at(path)));
      }
    }
    TACHYON_RETURN_IF_ERROR(check_types(*object, path));
    TACHYON_RETURN_IF_ERROR(check_combinators(*object, path, depth));
    TACHYON_RETURN_IF_ERROR(check_type_keywords(*object, path));
    TACHYON_RETURN_IF_ERROR(check_string(*object, path));
    TACHYON_RETURN_IF_ERROR(check_numbers(*object, path));
    // Subschemas.
    for (const char* key : {"properties", "patternProperties", "$defs", "definitions"}) {
      if (const json::value* map = object->if_contains(key)) {
        if (!map->is_object()) return invalid_argument(fmt::format("{} must be an object", at(path + "/" + key)));
        for (const auto& [name, sub] : map->get_object()) {
          TACHYON_RETURN_IF_ERROR(
              walk(sub, path + "/" + key + "/" + escape(name), depth + 1));
        }
      }
    }
    for (const char* key : {"additionalProperties", "items", "propertyNames"}) {
      if (const json::value* sub = object->if_contains(key)) {
        TACHYON_RETURN_IF_ERROR(walk(*sub, path + "/" + key, depth + 1));
      }
    }
    for (const char* key : {"prefixItems", "anyOf", "oneOf", "allOf"}) {
      if (const json::value* list = object->if_contains(key)) {
        if (!list->is_array() || list->get_array().empty()) {
          return invalid_argument(
              fmt::format("{} must be a non-empty array of schemas", at(path + "/" + key)));
        }
        const json::array& items = list->get_array();
        for (size_t i = 0; i < items.size(); ++i) {
          TACHYON_RETURN_IF_ERROR(
              walk(items[i], fmt::format("{}/{}/{}", path, key, i), depth + 1));
        }
      }
    }
    if (const json::value* required = object->if_contains("required")) {
      if (!required->is_array() ||
          !std::all_of(required->get_array().begin(), required->get_array().end(),
                       [](const json::value& v) { return v.is_string(); })) {
        return invalid_argument(
            fmt::format("{} must be an array of property names", at(path + "/required")));
      }
    }
    return Status();
  }

 private:
  static std::string at(const std::string& path) {
    return path.empty() ? std::string("the schema's root") : "'" + path + "'";
  }
  static std::string escape(std::string_view name) {
    std::string out;
    for (char c : name) {
      if (c == '~') out += "~0";
      else if (c == '/') out += "~1";
      else out += c;
    }
    return out;
  }

  Status check_types(const json::object& object, const std::string& path) {
    const json::value* type = object.if_contains("type");
    if (type == nullptr) return Status();
    std::vector<const json::value*> names;
    if (type->is_array()) {
      for (const json::value& name : type->get_array()) names.push_back(&name);
    } else {
      names.push_back(type);
    }
    if (names.empty()) return invalid_argument(fmt::format("{} must not be empty", at(path + "/type")));
    for (const json::value* name : names) {
      if (!name->is_string() || !kTypes.count(name->get_string())) {
        return invalid_argument(fmt::format(
            "{} must name JSON types (object, array, string, integer, number, boolean, null), "
            "got {}",
            at(path + "/type"), json::serialize(*name)));
      }
    }
    return Status();
  }

  // $ref, const, enum and the *Of combinators decide the value alone in XGrammar: a sibling
  // validation keyword would be dropped, so only annotations (and a matching type beside
  // const/enum) may sit next to them.
  Status check_combinators(const json::object& object, const std::string& path, int depth) {
    std::string_view combinator;
    for (const auto& [key, value] : object) {
      if (!kCombinators.count(key)) continue;
      if (!combinator.empty()) {
        return unsupported(fmt::format("'{}' beside '{}' at {} is not supported",
                                       std::string_view(key), combinator, at(path)));
      }
      combinator = key;
    }
    if (combinator.empty()) return Status();
    for (const auto& [key, value] : object) {
      if (key == combinator || !is_validation_keyword(key)) continue;
      const bool literal = combinator == "const" || combinator == "enum";
      if (literal && key == "type") continue;  // checked against the values below
      return unsupported(fmt::format("'{}' beside '{}' at {} is not supported",
                                     std::string_view(key), combinator, at(path)));
    }
    if (combinator == "$ref") return check_ref(object.at("$ref"), path, depth);
    if (combinator == "enum") {
      const json::value& values = object.at("enum");
      if (!values.is_array() || values.get_array().empty()) {
        return invalid_argument(fmt::format("{} must be a non-empty array", at(path + "/enum")));
      }
      for (const json::value& value : values.get_array()) {
        TACHYON_RETURN_IF_ERROR(check_literal_type(object, value, path + "/enum"));
      }
    }
    if (combinator == "const") {
      TACHYON_RETURN_IF_ERROR(check_literal_type(object, object.at("const"), path + "/const"));
    }
    if (combinator == "allOf" && object.at("allOf").is_array() &&
        object.at("allOf").get_array().size() > 1) {
      return unsupported(
          fmt::format("'allOf' with more than one schema at {} is not supported", at(path)));
    }
    if (combinator == "oneOf" && object.at("oneOf").is_array()) {
      TACHYON_RETURN_IF_ERROR(check_one_of(object.at("oneOf").get_array(), path));
    }
    return Status();
  }

  static std::string_view json_type(const json::value& value) {
    switch (value.kind()) {
      case json::kind::object: return "object";
      case json::kind::array: return "array";
      case json::kind::string: return "string";
      case json::kind::bool_: return "boolean";
      case json::kind::null: return "null";
      case json::kind::double_: {
        const double x = value.get_double();
        return x == static_cast<double>(static_cast<int64_t>(x)) ? "integer" : "number";
      }
      default: return "integer";
    }
  }

  static bool type_allows(const json::value& type, std::string_view kind) {
    const auto allows = [&](const json::value& name) {
      return name.is_string() &&
             (name.get_string() == kind || (name.get_string() == "number" && kind == "integer"));
    };
    if (type.is_array()) {
      return std::any_of(type.get_array().begin(), type.get_array().end(), allows);
    }
    return allows(type);
  }

  Status check_literal_type(const json::object& object, const json::value& value,
                            const std::string& path) {
    const json::value* type = object.if_contains("type");
    if (type == nullptr || type_allows(*type, json_type(value))) return Status();
    return invalid_argument(fmt::format("{} holds {}, which its 'type' {} does not allow",
                                        at(path), json::serialize(value), json::serialize(*type)));
  }

  Status check_ref(const json::value& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return invalid_argument(fmt::format("{} must be a string", at(path + "/$ref")));
    const std::string target(ref.get_string());
    if (target.empty() || target[0] != '#') {
      return unsupported(fmt::format(
          "$ref '{}' at {} is not supported: only references into the schema itself ('#/...')",
          target, at(path)));
    }
    const json::value* node = &root_;
    std::string_view rest = std::string_view(target).substr(1);
    while (!rest.empty()) {
      if (rest[0] != '/') return invalid_argument(fmt::format("$ref '{}' at {} is not a JSON pointer", target, at(path)));
      rest.remove_prefix(1);
      const size_t end = std::min(rest.find('/'), rest.size());
      std::string token;
      for (size_t i = 0; i < end; ++i) {
        if (rest[i] == '~' && i + 1 < end && (rest[i + 1] == '0' || rest[i + 1] == '1')) {
          token += rest[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          token += rest[i];
        }
      }
      rest.remove_prefix(end);
      if (const json::object* object = node->if_object()) {
        node = object->if_contains(token);
      } else if (const json::array* array = node->if_array()) {
        char* parsed_end = nullptr;
        const unsigned long index = std::strtoul(token.c_str(), &parsed_end, 10);
        node = !token.empty() && *parsed_end == '\0' && index < array->size() ? &(*array)[index]
                                                                                : nullptr;
      } else {
        node = nullptr;
      }
      if (node == nullptr) {
        return invalid_argument(
            fmt::format("$ref '{}' at {} points to nothing in the schema", target, at(path)));
      }
    }
    // The target is checked where it lives ($defs are walked); a target outside $defs is walked
    // from here once, so recursion through it ends.
    if (walked_refs_.insert(target).second) {
      return walk(*node, target.substr(1), depth + 1);
    }
    return Status();
  }

  // oneOf means exactly one option matches. The grammar generates "any option", which is the
  // same only when no value can match two options; that is proven here for options that differ
  // in type, or objects told apart by a required property with distinct const / enum values.
  Status check_one_of(const json::array& options, const std::string& path) {
    const auto refuse = [&] {
      return unsupported(fmt::format(
          "'oneOf' at {} is supported only when its options cannot overlap (distinct types, or "
          "objects with a required property of distinct const values); use 'anyOf'",
          at(path)));
    };
    std::vector<const json::object*> objects;
    for (const json::value& option : options) {
      const json::object* object = option.if_object();
      if (object == nullptr) return refuse();
      objects.push_back(object);
    }
    // Distinct single types (integer and number overlap).
    std::set<std::string> types;
    bool by_type = true;
    for (const json::object* object : objects) {
      const json::value* type = object->if_contains("type");
      if (type == nullptr || !type->is_string()) {
        by_type = false;
        break;
      }
      std::string name(type->get_string());
      if (name == "integer") name = "number";
      if (!types.insert(name).second) by_type = false;
    }
    if (by_type) return Status();
    // A discriminating property: required everywhere, const (or enum) values pairwise distinct.
    const json::object* first = objects[0];
    const json::value* properties = first->if_contains("properties");
    if (properties == nullptr || !properties->is_object()) return refuse();
    for (const auto& property : properties->get_object()) {
      const std::string_view name = property.key();
      std::set<std::string> seen;
      bool discriminates = true;
      for (const json::object* object : objects) {
        const json::value* required = object->if_contains("required");
        const json::value* props = object->if_contains("properties");
        const json::value* prop =
            props && props->is_object() ? props->get_object().if_contains(name) : nullptr;
        const bool is_required =
            required && required->is_array() &&
            std::any_of(required->get_array().begin(), required->get_array().end(),
                        [&](const json::value& v) { return v.is_string() && v.get_string() == name; });
        const json::object* prop_object = prop ? prop->if_object() : nullptr;
        if (!is_required || prop_object == nullptr) {
          discriminates = false;
          break;
        }
        std::vector<std::string> values;
        if (const json::value* c = prop_object->if_contains("const")) {
          values.push_back(json::serialize(*c));
        } else if (const json::value* e = prop_object->if_contains("enum"); e && e->is_array()) {
          for (const json::value& v : e->get_array()) values.push_back(json::serialize(v));
        } else {
          discriminates = false;
          break;
        }
        for (const std::string& v : values) {
          if (!seen.insert(v).second) discriminates = false;
        }
        if (!discriminates) break;
      }
      if (discriminates) return Status();
    }
    return refuse();
  }

  // Type-specific keywords on a schema that names no type would be dropped (XGrammar treats it
  // as any value); object and array keywords are fine (they imply their type there).
  Status check_type_keywords(const json::object& object, const std::string& path) {
    if (object.contains("type")) return Status();
    for (const auto& [key, value] : object) {
      if (kStringKeywords.count(key) || kNumberKeywords.count(key)) {
        return unsupported(fmt::format("'{}' at {} needs a 'type' beside it",
                                       std::string_view(key), at(path)));
      }
    }
    return Status();
  }

  Status check_string(const json::object& object, const std::string& path) {
    const json::value* format = object.if_contains("format");
    const json::value* pattern = object.if_contains("pattern");
    if (format != nullptr && object.contains("type") && type_allows(object.at("type"), "string")) {
      if (!format->is_string() || !kFormats.count(format->get_string())) {
        return unsupported(fmt::format("string format {} at {} is not supported (supported: {})",
                                       json::serialize(*format), at(path),
                                       fmt::join(kFormats, ", ")));
      }
    }
    if (pattern != nullptr && !pattern->is_string()) {
      return invalid_argument(fmt::format("{} must be a string", at(path + "/pattern")));
    }
    if ((format != nullptr || pattern != nullptr) &&
        (object.contains("minLength") || object.contains("maxLength"))) {
      return unsupported(fmt::format(
          "minLength/maxLength beside '{}' at {} is not supported",
          pattern != nullptr ? "pattern" : "format", at(path)));
    }
    return Status();
  }

  Status check_numbers(const json::object& object, const std::string& path) {
    for (const auto& [key, value] : object) {
      if (!kNumberKeywords.count(key)) continue;
      if (!value.is_number()) {
        return invalid_argument(fmt::format("{} must be a number", at(path + "/" + std::string(key))));
      }
    }
    if (const json::value* multiple = object.if_contains("multipleOf")) {
      const json::value* type = object.if_contains("type");
      const bool integer_only = type && type->is_string() && type->get_string() == "integer";
      const bool whole = multiple->is_int64() || multiple->is_uint64() ||
                         (multiple->is_double() && json_type(*multiple) == "integer");
      if (!integer_only || !whole) {
        return unsupported(fmt::format(
            "'multipleOf' at {} is supported only for type integer with a whole number",
            at(path)));
      }
    }
    return Status();
  }

  const json::value& root_;
  std::set<std::string> walked_refs_;
};

}  // namespace

Status check_json_schema(const json::value& schema) {
  return SchemaWalker(schema).walk(schema, "", 0);
}

}  // namespace tachyon

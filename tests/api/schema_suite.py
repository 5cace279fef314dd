"""The JSON Schema suite the structured-output tests and benchmarks run: each entry is
(name, schema, prompt). About 35 base schemas cover the OpenAI strict subset and beyond (objects
with required and optional properties, additionalProperties false, arrays with min/maxItems,
prefixItems, enum, const, anyOf, discriminated oneOf, $ref/$defs with recursion, string formats
and patterns, numbers with bounds, multipleOf on integers, type lists, nulls); each also appears
as a property of a wrapping object and as the items of a short array, for 100+ schemas.
UNSUPPORTED holds schemas whose keywords the grammar would not enforce: each must be refused with
a 400 naming the keyword."""
from __future__ import annotations

import copy

S = {"type": "string", "maxLength": 24}  # a short string: small models ramble otherwise


def obj(properties: dict, required: list | None = None, **extra) -> dict:
    schema = {"type": "object", "properties": properties,
              "required": list(properties) if required is None else required,
              "additionalProperties": False}
    schema.update(extra)
    return schema


BASE: list[tuple[str, dict, str]] = [
    ("person", obj({"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 130}}),
     "Describe a person."),
    ("optional_fields", obj({"title": S, "year": {"type": "integer"}, "rating": {"type": "number"}},
                            required=["title"]), "Describe a film."),
    ("enum_color", {"type": "string", "enum": ["red", "green", "blue"]}, "Pick a color."),
    ("enum_mixed", {"enum": ["yes", "no", 1, None, True]}, "Answer."),
    ("const", obj({"kind": {"const": "event"}, "name": S}), "Name an event."),
    ("bool", {"type": "boolean"}, "Is the sky blue?"),
    ("null", {"type": "null"}, "Say nothing."),
    ("integer_bounds", {"type": "integer", "minimum": -5, "maximum": 5}, "A small number."),
    ("integer_exclusive", {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20},
     "A number between 10 and 20."),
    ("integer_multiple", {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100},
     "A multiple of five."),
    ("number_bounds", {"type": "number", "minimum": 0, "maximum": 1}, "A probability."),
    ("number_exclusive", {"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.5},
     "A temperature delta."),
    ("array_bounds", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
     "Some numbers."),
    ("array_of_objects", {"type": "array", "maxItems": 3,
                          "items": obj({"id": {"type": "integer"}, "label": S})},
     "List some items."),
    ("prefix_items", {"type": "array", "prefixItems": [S, {"type": "integer"}, {"type": "boolean"}],
                      "items": False}, "A name, a count and a flag."),
    ("nested", obj({"user": obj({"name": S, "email": {"type": "string", "format": "email"}}),
                    "tags": {"type": "array", "items": S, "maxItems": 3}}), "A user record."),
    ("any_of", {"anyOf": [{"type": "integer"}, S, {"type": "null"}]}, "Anything short."),
    ("any_of_objects", {"anyOf": [obj({"circle": {"type": "number", "minimum": 0}}),
                                  obj({"square": {"type": "number", "minimum": 0}}),
                                  obj({"label": S})]}, "A shape."),
    ("any_of_heavy", obj({"values": {"type": "array", "maxItems": 4, "items": {"anyOf": [
        {"type": "integer", "minimum": 0}, {"type": "boolean"}, {"type": "null"},
        {"type": "string", "enum": ["a", "b"]},
        obj({"x": {"type": "integer"}}), {"type": "array", "items": {"type": "integer"},
                                          "maxItems": 2}]}}}), "Mixed values."),
    ("one_of_discriminated", {"oneOf": [
        obj({"type": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1, "maximum": 9}}),
        obj({"type": {"const": "dog"}, "good": {"type": "boolean"}})]}, "A pet."),
    ("one_of_types", {"oneOf": [{"type": "string", "maxLength": 10}, {"type": "integer"}]},
     "A name or a number."),
    ("type_list", {"type": ["string", "null"], "maxLength": 12}, "A nickname, if any."),
    ("ref_defs", {"$defs": {"point": obj({"x": {"type": "number"}, "y": {"type": "number"}})},
                  **obj({"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}})},
     "A line segment."),
    ("ref_definitions", {"definitions": {"id": {"type": "integer", "minimum": 1}},
                         **obj({"ids": {"type": "array", "items": {"$ref": "#/definitions/id"},
                                        "maxItems": 3}})}, "Some ids."),
    ("recursive_tree", {"$defs": {"node": obj({"value": {"type": "integer"}, "children": {
        "type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}})},
        "$ref": "#/$defs/node"}, "A small tree."),
    ("recursive_list", {"$defs": {"cell": obj({"head": S, "tail": {"anyOf": [
        {"$ref": "#/$defs/cell"}, {"type": "null"}]}})}, "$ref": "#/$defs/cell"}, "A list."),
    ("root_recursion", {"type": "object", "properties": {"name": S, "next": {"anyOf": [
        {"$ref": "#"}, {"type": "null"}]}}, "required": ["name", "next"],
        "additionalProperties": False}, "A chain."),
    ("format_date", {"type": "string", "format": "date"}, "A date."),
    ("format_date_time", {"type": "string", "format": "date-time"}, "A timestamp."),
    ("format_time", {"type": "string", "format": "time"}, "A time."),
    ("format_uuid", {"type": "string", "format": "uuid"}, "A uuid."),
    ("format_ipv4", {"type": "string", "format": "ipv4"}, "An IP address."),
    ("format_ipv6", {"type": "string", "format": "ipv6"}, "An IPv6 address."),
    ("format_hostname", {"type": "string", "format": "hostname"}, "A host name."),
    ("format_uri", {"type": "string", "format": "uri"}, "A link."),
    ("pattern_phone", {"type": "string", "pattern": "^\\+?[0-9]{3}-[0-9]{4}$"}, "A phone number."),
    ("pattern_code", obj({"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"}}),
     "A product code."),
    ("string_lengths", {"type": "string", "minLength": 3, "maxLength": 8}, "A word."),
    ("min_max_properties", {"type": "object", "additionalProperties": {"type": "integer"},
                            "minProperties": 1, "maxProperties": 3}, "Some counts."),
    ("pattern_properties", {"type": "object", "patternProperties": {
        "^n_[a-z]{1,8}$": {"type": "integer"}}, "additionalProperties": False,
        "minProperties": 1, "maxProperties": 2}, "Some named counts."),
    ("property_names", {"type": "object", "propertyNames": {"type": "string",
                                                            "pattern": "^[a-z]{1,6}$"},
                        "additionalProperties": {"type": "boolean"}, "maxProperties": 3},
     "Some flags."),
    ("empty_object", {"type": "object", "properties": {}, "additionalProperties": False},
     "Nothing."),
]


def suite() -> list[tuple[str, dict, str]]:
    """Each base schema as is, wrapped in an object and as array items (defs hoisted)."""
    out = []
    for name, schema, prompt in BASE:
        out.append((name, schema, prompt))
        defs = {key: schema[key] for key in ("$defs", "definitions") if key in schema}
        inner = {k: v for k, v in schema.items() if k not in defs}
        if "$ref" in str(inner) and "'#'" in str(inner):
            continue  # root recursion cannot be moved under another root
        wrapped = obj({"result": copy.deepcopy(inner)})
        wrapped.update(copy.deepcopy(defs))
        out.append((name + "/wrapped", wrapped, prompt + " Reply in JSON."))
        listed = {"type": "array", "items": copy.deepcopy(inner), "minItems": 1, "maxItems": 2}
        listed.update(copy.deepcopy(defs))
        out.append((name + "/list", listed, prompt + " Give one or two."))
    return out


# Keywords the grammar would not enforce, each alone on an otherwise fine schema, and the word
# the 400 must name.
UNSUPPORTED: list[tuple[str, dict]] = [
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    ("contains", {"type": "array", "contains": {"type": "integer"}}),
    ("minContains", {"type": "array", "minContains": 2}),
    ("not", {"not": {"type": "string"}}),
    ("if", {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}),
    ("dependentRequired", {"type": "object", "dependentRequired": {"a": ["b"]}}),
    ("dependentSchemas", {"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}}),
    ("unevaluatedProperties", {"type": "object", "unevaluatedProperties": False}),
    ("multipleOf", {"type": "number", "multipleOf": 0.5}),
    ("allOf", {"allOf": [{"type": "object"}, {"required": ["a"]}]}),
    ("oneOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]}),
    ("format", {"type": "string", "format": "credit-card"}),
    ("minLength", {"type": "string", "pattern": "^a+$", "minLength": 3}),
    ("$ref", {"$ref": "https://example.com/schema.json"}),
    ("$dynamicRef", {"$dynamicRef": "#node"}),
    ("type", {"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {"type": "object"}}}),
]

# Malformed schemas: a 400 too.
MALFORMED: list[tuple[str, dict]] = [
    ("ref to nowhere", {"$ref": "#/$defs/missing"}),
    ("unknown type", {"type": "decimal"}),
    ("required not a list", {"type": "object", "required": "a"}),
    ("properties not an object", {"type": "object", "properties": [1]}),
    ("enum value against its type", {"type": "string", "enum": ["a", 3]}),
    ("empty anyOf", {"anyOf": []}),
]

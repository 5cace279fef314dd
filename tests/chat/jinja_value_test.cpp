// Value: Python str()/repr(), float formatting, equality and json.dumps.
#include "chat/jinja_value.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tachyon::jinja {
namespace {

TEST(JinjaValueTest, FormatsFloatsLikePythonRepr) {
  EXPECT_EQ(format_python_float(1.0), "1.0");
  EXPECT_EQ(format_python_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_python_float(1e16), "1e+16");
  EXPECT_EQ(format_python_float(1e15), "1000000000000000.0");
  EXPECT_EQ(format_python_float(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(format_python_float(0.0001), "0.0001");
  EXPECT_EQ(format_python_float(0.00001), "1e-05");
  EXPECT_EQ(format_python_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_python_float(-0.0), "-0.0");
  EXPECT_EQ(format_python_float(-2.5), "-2.5");
  EXPECT_EQ(format_python_float(1e300), "1e+300");
  EXPECT_EQ(format_python_float(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_python_float(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(format_python_float(std::nan("")), "nan");
}

TEST(JinjaValueTest, StrAndRepr) {
  EXPECT_EQ(to_python_str(Value::none()), "None");
  EXPECT_EQ(to_python_str(Value::boolean(true)), "True");
  EXPECT_EQ(to_python_str(Value()), "");
  EXPECT_EQ(to_python_str(Value::list({Value::integer(1), Value::string("a")})), "[1, 'a']");
  EXPECT_EQ(to_python_str(Value::list({Value::integer(1)}, true)), "(1,)");
  EXPECT_EQ(to_python_str(Value::list({}, true)), "()");
  EXPECT_EQ(to_python_repr(Value::string("it's")), "\"it's\"");
  EXPECT_EQ(to_python_repr(Value::string("it's \"q\"")), "'it\\'s \"q\"'");
  EXPECT_EQ(to_python_repr(Value::string("a\nb\t\x01\\")), "'a\\nb\\t\\x01\\\\'");
  EXPECT_EQ(to_python_repr(Value::string("é\u00a0\u200b🎉")), "'é\\xa0\\u200b🎉'");
  DictData dict;
  dict.set(Value::string("k"), Value::none());
  dict.set(Value::integer(1), Value::floating(2.0));
  EXPECT_EQ(to_python_str(Value::dict(dict)), "{'k': None, 1: 2.0}");
}

TEST(JinjaValueTest, EqualityFollowsPython) {
  EXPECT_TRUE(values_equal(Value::integer(1), Value::floating(1.0)));
  EXPECT_TRUE(values_equal(Value::boolean(true), Value::integer(1)));
  EXPECT_FALSE(values_equal(Value::string("1"), Value::integer(1)));
  EXPECT_FALSE(values_equal(Value::list({}, true), Value::list({})));
  EXPECT_TRUE(values_equal(Value(), Value()));
  EXPECT_FALSE(values_equal(Value(), Value::none()));
  DictData dict;
  dict.set(Value::integer(1), Value::string("a"));
  dict.set(Value::boolean(true), Value::string("b"));  // same key as 1
  EXPECT_EQ(dict.items.size(), 1u);
  EXPECT_EQ(dict.items[0].second.as_string(), "b");
}

TEST(JinjaValueTest, JsonDumpsMatchesPython) {
  boost::json::value json = boost::json::parse(
      R"({"s": "é\"\n\u0001", "n": null, "b": [true, 1, 1.5, 1e20], "o": {}, "l": []})");
  Value value;
  std::string error;
  ASSERT_TRUE(value_from_json(json, value, error)) << error;
  JsonDumpOptions options;
  std::string out;
  ASSERT_TRUE(dump_python_json(value, options, out, error));
  EXPECT_EQ(out,
            "{\"s\": \"é\\\"\\n\\u0001\", \"n\": null, \"b\": [true, 1, 1.5, 1e+20], \"o\": {}, "
            "\"l\": []}");

  options.has_indent = true;
  options.indent = "  ";
  options.item_separator = ",";
  options.sort_keys = true;
  options.ensure_ascii = true;
  out.clear();
  ASSERT_TRUE(dump_python_json(value, options, out, error));
  EXPECT_EQ(out,
            "{\n  \"b\": [\n    true,\n    1,\n    1.5,\n    1e+20\n  ],\n  \"l\": [],\n  \"n\": "
            "null,\n  \"o\": {},\n  \"s\": \"\\u00e9\\\"\\n\\u0001\"\n}");

  out.clear();
  EXPECT_FALSE(dump_python_json(Value(), JsonDumpOptions(), out, error));
  EXPECT_NE(error.find("not JSON serializable"), std::string::npos);
}

}  // namespace
}  // namespace tachyon::jinja

// Python str semantics over UTF-8: strip, split, splitlines, replace, slices, case mapping.
#include "chat/python_text.h"

#include <gtest/gtest.h>

namespace tachyon::jinja {
namespace {

using Strings = std::vector<std::string>;

TEST(PythonTextTest, Strip) {
  EXPECT_EQ(python_strip(" \t\n x \u00a0\u3000", std::nullopt, true, true), "x");
  EXPECT_EQ(python_strip("  x  ", std::nullopt, true, false), "x  ");
  EXPECT_EQ(python_strip("  x  ", std::nullopt, false, true), "  x");
  EXPECT_EQ(python_strip("xyhixy", std::string("yx"), true, true), "hi");
  EXPECT_EQ(python_strip("ééaé", std::string("é"), true, true), "a");
}

TEST(PythonTextTest, Split) {
  EXPECT_EQ(python_split("a,b,,c", std::string(","), -1, false), (Strings{"a", "b", "", "c"}));
  EXPECT_EQ(python_split("a,b,c", std::string(","), 1, false), (Strings{"a", "b,c"}));
  EXPECT_EQ(python_split("a,b,c", std::string(","), 1, true), (Strings{"a,b", "c"}));
  EXPECT_EQ(python_split("", std::string(","), -1, false), (Strings{""}));
  EXPECT_EQ(python_split("  a  b  ", std::nullopt, -1, false), (Strings{"a", "b"}));
  EXPECT_EQ(python_split("  a  b  c  ", std::nullopt, 1, false), (Strings{"a", "b  c  "}));
  EXPECT_EQ(python_split("  a  b  c  ", std::nullopt, 1, true), (Strings{"  a  b", "c"}));
  EXPECT_EQ(python_split("   ", std::nullopt, -1, false), (Strings{}));
  EXPECT_EQ(python_split("x</think>y</think>z", std::string("</think>"), 1, false),
            (Strings{"x", "y</think>z"}));
}

TEST(PythonTextTest, SplitLines) {
  EXPECT_EQ(python_splitlines("a\nb\r\nc\rd\n"), (Strings{"a", "b", "c", "d"}));
  EXPECT_EQ(python_splitlines("a\n\nb"), (Strings{"a", "", "b"}));
  EXPECT_EQ(python_splitlines(""), (Strings{}));
  EXPECT_EQ(python_splitlines("a\u2028b"), (Strings{"a", "b"}));
}

TEST(PythonTextTest, Replace) {
  EXPECT_EQ(python_replace("aaa", "a", "b", -1), "bbb");
  EXPECT_EQ(python_replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(python_replace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(python_replace("éb", "", "-", 2), "-é-b");
}

TEST(PythonTextTest, SliceIndices) {
  std::vector<int64_t> indices;
  ASSERT_TRUE(python_slice_indices(5, std::nullopt, std::nullopt, -1, indices));
  EXPECT_EQ(indices, (std::vector<int64_t>{4, 3, 2, 1, 0}));
  indices.clear();
  ASSERT_TRUE(python_slice_indices(5, -2, std::nullopt, std::nullopt, indices));
  EXPECT_EQ(indices, (std::vector<int64_t>{3, 4}));
  indices.clear();
  ASSERT_TRUE(python_slice_indices(5, 1, 100, 2, indices));
  EXPECT_EQ(indices, (std::vector<int64_t>{1, 3}));
  indices.clear();
  EXPECT_FALSE(python_slice_indices(5, std::nullopt, std::nullopt, 0, indices));
}

TEST(PythonTextTest, CaseMapping) {
  EXPECT_EQ(python_upper("héllo ß"), "HÉLLO SS");
  EXPECT_EQ(python_lower("HÉLLO"), "héllo");
  EXPECT_EQ(python_title("hello wORLD it's"), "Hello World It'S");
  EXPECT_EQ(jinja_title("hello-world (foo) it's"), "Hello-World (Foo) It's");
  EXPECT_EQ(python_capitalize("hELLO World"), "Hello world");
}

TEST(PythonTextTest, Utf8) {
  EXPECT_EQ(utf8_length("héllo🎉"), 6u);
  EXPECT_EQ(utf8_encode(utf8_decode("héllo🎉")), "héllo🎉");
  EXPECT_FALSE(find_invalid_utf8("héllo🎉").has_value());
  EXPECT_EQ(find_invalid_utf8("ab\xc3"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xed\xa0\x80"), 0u);  // surrogate
  EXPECT_EQ(find_invalid_utf8("\xc0\x80"), 0u);      // overlong
}

}  // namespace
}  // namespace tachyon::jinja

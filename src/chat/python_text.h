// Python str semantics over UTF-8 bytes: code-point indexing, Unicode whitespace, case mapping and
// the str methods chat templates call (strip, split, replace, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::jinja {

// Decodes valid UTF-8 (callers validate input once, at the boundary).
std::u32string utf8_decode(std::string_view text);
void utf8_append(char32_t code_point, std::string& out);
std::string utf8_encode(std::u32string_view text);
// Byte offset of the first invalid sequence, or nullopt when `text` is valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view text);
// Number of code points (Python len()).
size_t utf8_length(std::string_view text);

// str.isspace() for one code point; also what regex `\s` matches on str patterns.
bool is_python_space(char32_t code_point);
// str.isprintable() for one code point (used by repr()).
bool is_python_printable(char32_t code_point);

std::string python_upper(std::string_view text);
std::string python_lower(std::string_view text);
std::string python_capitalize(std::string_view text);
// str.title(): a cased letter after an uncased character starts a word.
std::string python_title(std::string_view text);
// jinja2's title filter: words start after '-', whitespace, '(', '{', '[' or '<'.
std::string jinja_title(std::string_view text);

// str.strip/lstrip/rstrip; `chars` absent means whitespace.
std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right);
// str.split/rsplit; `separator` absent means runs of whitespace. `max_split` < 0: no limit.
std::vector<std::string> python_split(std::string_view text,
                                      const std::optional<std::string>& separator,
                                      int64_t max_split, bool from_right);
// str.splitlines() (without keepends).
std::vector<std::string> python_splitlines(std::string_view text);
// str.replace; `count` < 0: all.
std::string python_replace(std::string_view text, std::string_view old_text,
                           std::string_view new_text, int64_t count);
// Python slice resolution: fills the selected indices of a sequence of `length` items.
// Returns false when step is 0 (Python raises ValueError).
bool python_slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                          std::optional<int64_t> step, std::vector<int64_t>& indices);

}  // namespace tachyon::jinja

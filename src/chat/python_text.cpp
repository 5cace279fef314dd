#include "chat/python_text.h"

#include <algorithm>

#include <utf8proc.h>

namespace tachyon::jinja {

std::u32string utf8_decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    char32_t cp = 0;
    size_t length = 1;
    if (byte < 0x80) {
      cp = byte;
    } else if ((byte & 0xE0) == 0xC0) {
      cp = byte & 0x1F;
      length = 2;
    } else if ((byte & 0xF0) == 0xE0) {
      cp = byte & 0x0F;
      length = 3;
    } else {
      cp = byte & 0x07;
      length = 4;
    }
    for (size_t k = 1; k < length && i + k < text.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    out.push_back(cp);
    i += length;
  }
  return out;
}

void utf8_append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) utf8_append(cp, out);
  return out;
}

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    char32_t cp = 0;
    char32_t min_cp = 0;
    if ((byte & 0xE0) == 0xC0) {
      length = 2, cp = byte & 0x1F, min_cp = 0x80;
    } else if ((byte & 0xF0) == 0xE0) {
      length = 3, cp = byte & 0x0F, min_cp = 0x800;
    } else if ((byte & 0xF8) == 0xF0) {
      length = 4, cp = byte & 0x07, min_cp = 0x10000;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += length;
  }
  return std::nullopt;
}

size_t utf8_length(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

bool is_python_space(char32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_python_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

namespace {

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Simple (one code point) case mappings, plus the one full mapping templates may meet: ß → SS.
void append_upper(char32_t cp, std::string& out) {
  if (cp == 0xDF) {
    out += "SS";
    return;
  }
  utf8_append(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))), out);
}
void append_lower(char32_t cp, std::string& out) {
  utf8_append(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), out);
}
void append_title(char32_t cp, std::string& out) {
  utf8_append(static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))), out);
}

bool is_cased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string python_upper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  if (is_ascii(text)) {
    for (char c : text) out.push_back(c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c);
    return out;
  }
  for (char32_t cp : utf8_decode(text)) append_upper(cp, out);
  return out;
}

std::string python_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  if (is_ascii(text)) {
    for (char c : text) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    return out;
  }
  for (char32_t cp : utf8_decode(text)) append_lower(cp, out);
  return out;
}

std::string python_capitalize(std::string_view text) {
  std::string out;
  bool first = true;
  for (char32_t cp : utf8_decode(text)) {
    if (first) {
      append_title(cp, out);
      first = false;
    } else {
      append_lower(cp, out);
    }
  }
  return out;
}

std::string python_title(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t cp : utf8_decode(text)) {
    if (previous_cased) {
      append_lower(cp, out);
    } else {
      append_title(cp, out);
    }
    previous_cased = is_cased(cp);
  }
  return out;
}

std::string jinja_title(std::string_view text) {
  // Split into alternating word / separator runs; each word gets upper first, lower rest.
  std::string out;
  bool at_word_start = true;
  for (char32_t cp : utf8_decode(text)) {
    const bool separator =
        cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_python_space(cp);
    if (separator) {
      utf8_append(cp, out);
      at_word_start = true;
    } else if (at_word_start) {
      append_upper(cp, out);
      at_word_start = false;
    } else {
      append_lower(cp, out);
    }
  }
  return out;
}

std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right) {
  std::u32string code_points = utf8_decode(text);
  std::u32string strip_set;
  if (chars) strip_set = utf8_decode(*chars);
  auto should_strip = [&](char32_t cp) {
    return chars ? strip_set.find(cp) != std::u32string::npos : is_python_space(cp);
  };
  size_t begin = 0;
  size_t end = code_points.size();
  if (left) {
    while (begin < end && should_strip(code_points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && should_strip(code_points[end - 1])) --end;
  }
  return utf8_encode(std::u32string_view(code_points).substr(begin, end - begin));
}

std::vector<std::string> python_split(std::string_view text,
                                      const std::optional<std::string>& separator,
                                      int64_t max_split, bool from_right) {
  std::vector<std::string> parts;
  if (separator) {
    const std::string& sep = *separator;
    if (!from_right) {
      size_t start = 0;
      while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
        const size_t found = text.find(sep, start);
        if (found == std::string_view::npos) break;
        parts.emplace_back(text.substr(start, found - start));
        start = found + sep.size();
      }
      parts.emplace_back(text.substr(start));
    } else {
      size_t end = text.size();
      while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
        if (end < sep.size()) break;
        const size_t found = text.rfind(sep, end - sep.size());
        if (found == std::string_view::npos) break;
        parts.emplace_back(text.substr(found + sep.size(), end - found - sep.size()));
        end = found;
      }
      parts.emplace_back(text.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace runs: no empty parts; the remainder after max_split keeps its inner spacing.
  const std::u32string cps = utf8_decode(text);
  const int64_t n = static_cast<int64_t>(cps.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && is_python_space(cps[static_cast<size_t>(i)])) ++i;
      if (i >= n) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
        parts.push_back(utf8_encode(std::u32string_view(cps).substr(static_cast<size_t>(i))));
        break;
      }
      int64_t j = i;
      while (j < n && !is_python_space(cps[static_cast<size_t>(j)])) ++j;
      parts.push_back(utf8_encode(
          std::u32string_view(cps).substr(static_cast<size_t>(i), static_cast<size_t>(j - i))));
      i = j;
    }
  } else {
    int64_t i = n;
    while (true) {
      while (i > 0 && is_python_space(cps[static_cast<size_t>(i - 1)])) --i;
      if (i <= 0) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
        parts.push_back(utf8_encode(std::u32string_view(cps).substr(0, static_cast<size_t>(i))));
        break;
      }
      int64_t j = i;
      while (j > 0 && !is_python_space(cps[static_cast<size_t>(j - 1)])) --j;
      parts.push_back(utf8_encode(
          std::u32string_view(cps).substr(static_cast<size_t>(j), static_cast<size_t>(i - j))));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> python_splitlines(std::string_view text) {
  std::vector<std::string> lines;
  const std::u32string cps = utf8_decode(text);
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    const char32_t cp = cps[i];
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                          cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    lines.push_back(utf8_encode(std::u32string_view(cps).substr(start, i - start)));
    if (cp == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    ++i;
    start = i;
  }
  if (start < cps.size()) lines.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string python_replace(std::string_view text, std::string_view old_text,
                           std::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new_text` before every code point and at the end.
    int64_t done = 0;
    size_t i = 0;
    while (i < text.size()) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      size_t length = 1;
      while (i + length < text.size() &&
             (static_cast<unsigned char>(text[i + length]) & 0xC0) == 0x80) {
        ++length;
      }
      out += text.substr(i, length);
      i += length;
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(old_text, start);
    if (found == std::string_view::npos) break;
    out += text.substr(start, found - start);
    out += new_text;
    start = found + old_text.size();
    ++done;
  }
  out += text.substr(start);
  return out;
}

bool python_slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                          std::optional<int64_t> step, std::vector<int64_t>& indices) {
  const int64_t s = step.value_or(1);
  if (s == 0) return false;
  auto clamp = [&](std::optional<int64_t> value, int64_t default_value) {
    if (!value) return default_value;
    int64_t v = *value;
    if (v < 0) {
      v += length;
      if (v < 0) v = s < 0 ? -1 : 0;
    } else if (v >= length) {
      v = s < 0 ? length - 1 : length;
    }
    return v;
  };
  const int64_t begin = clamp(start, s < 0 ? length - 1 : 0);
  const int64_t end = clamp(stop, s < 0 ? -1 : length);
  if (s > 0) {
    for (int64_t i = begin; i < end; i += s) indices.push_back(i);
  } else {
    for (int64_t i = begin; i > end; i += s) indices.push_back(i);
  }
  return true;
}

}  // namespace tachyon::jinja

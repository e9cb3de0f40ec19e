// Small text helpers the planning code shares.
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun::text {

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The fields of `s` between separators, empty ones included ("a,,b" gives "a", "", "b").
inline std::vector<std::string> split_on(std::string_view s, char separator) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == separator) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace ringrun::text

// A small JSON writer, shared by the launcher (the plan, doctor) and the runtime (the timeline):
// the shapes they write are fixed, so a streaming writer with correct string escaping is all that
// is needed.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace ringrun::json {

inline void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

inline std::string quote(std::string_view s) {
  std::string out;
  append_string(out, s);
  return out;
}

inline std::string string_array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_string(out, items[i]);
  }
  return out + "]";
}

}  // namespace ringrun::json

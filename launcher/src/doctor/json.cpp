// doctor --json and its inverse: --all-nodes runs `ringrun doctor --json` on every node and reads
// each node's array back, so the reader accepts exactly the fixed shape checks_to_json writes.
#include "doctor/doctor.hpp"

#include <ringrun/json.hpp>

#include <fmt/format.h>

#include <cctype>

namespace ringrun::diagnostics {

std::string checks_to_json(const std::vector<Check>& checks) {
  std::string out = "[";
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const auto& check = checks[i];
    if (i) out += ", ";
    out += fmt::format("{{\"name\": {}, \"status\": {}, \"detail\": {}, \"fix\": {}}}", json::quote(check.name),
                       json::quote(to_string(check.status)), json::quote(check.detail), json::quote(check.fix));
  }
  return out + "]";
}

namespace {
// Reads the fixed shape checks_to_json writes: an array of objects with string values.
class CheckArrayReader {
 public:
  CheckArrayReader(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  std::vector<Check> read() {
    std::vector<Check> checks;
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return checks;
    }
    while (true) {
      checks.push_back(read_check());
      char c = next();
      if (c == ']') break;
      if (c != ',') error("expected ',' or ']'");
    }
    skip_space();
    if (pos_ != text_.size()) error("text after the array");
    return checks;
  }

 private:
  Check read_check() {
    Check check;
    bool has_status = false;
    expect('{');
    if (peek() == '}') error("empty object");
    while (true) {
      std::string key = read_string();
      expect(':');
      std::string value = read_string();
      if (key == "name")
        check.name = value;
      else if (key == "detail")
        check.detail = value;
      else if (key == "fix")
        check.fix = value;
      else if (key == "status") {
        has_status = true;
        if (value == "PASS")
          check.status = Status::pass;
        else if (value == "WARN")
          check.status = Status::warn;
        else if (value == "FAIL")
          check.status = Status::fail;
        else
          error("status '" + value + "' is not PASS, WARN or FAIL");
      }
      char c = next();
      if (c == '}') break;
      if (c != ',') error("expected ',' or '}'");
    }
    if (!has_status) error("an object without \"status\"");
    return check;
  }

  std::string read_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) error("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) error("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u':
          append_utf8(out, read_hex4());
          break;
        default:
          error(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  // The four hex digits after "\u" (checks_to_json writes them for control characters only).
  unsigned read_hex4() {
    if (pos_ + 4 > text_.size()) error("short \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9')
        code |= h - '0';
      else if (h >= 'a' && h <= 'f')
        code |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        code |= h - 'A' + 10;
      else
        error("bad \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80)
      out += static_cast<char>(code);
    else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  char next() {
    char c = peek();
    if (pos_ >= text_.size()) error("unexpected end");
    ++pos_;
    return c;
  }
  void expect(char wanted) {
    if (next() != wanted) error(fmt::format("expected '{}'", wanted));
  }
  [[noreturn]] void error(const std::string& what) {
    throw InputError(fmt::format("{}: not doctor --json output: {} at column {}", origin_, what, pos_ + 1));
  }

  std::string_view text_;
  std::string_view origin_;
  std::size_t pos_ = 0;
};
}  // namespace

std::vector<Check> checks_from_json(std::string_view text, std::string_view origin) {
  return CheckArrayReader(text, origin).read();
}

}  // namespace ringrun::diagnostics

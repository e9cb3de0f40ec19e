// Reading the table's variables (ringrun/variable_read.hpp).
#include <ringrun/variable_read.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace ringrun::variables {
namespace {

// "from 1 to 86400 seconds", with the table's default when there is one.
std::string expectation(const char* what, std::string_view unit, double min, double max, std::string_view fallback) {
  std::string text = fmt::format("expected {} from {:g} to {:g}", what, min, max);
  if (!unit.empty()) text += fmt::format(" ({})", unit);
  text += fallback.empty() ? "; fix it or unset it" : fmt::format("; fix it, or unset it for {}", fallback);
  return text;
}

void check_type(const Variable& v, Type wanted) {
  if (v.type != wanted)
    throw std::logic_error(fmt::format("{}: read as another type than the table's", v.name));
}

std::optional<std::string> value_or_default(const Variable& v, const Values* from) {
  if (auto set = read_set(v, from)) return set;
  if (*v.default_value) return std::string(v.default_value);
  return std::nullopt;
}

long long integer_of(std::string_view name, const std::string& text, double min, double max, std::string_view unit,
                     std::string_view fallback) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || static_cast<double>(value) < min ||
      static_cast<double>(value) > max)
    throw InputError(fmt::format("{}='{}': {}", name, text, expectation("an integer", unit, min, max, fallback)));
  return value;
}

double number_of(std::string_view name, const std::string& text, double min, double max, std::string_view unit,
                 std::string_view fallback) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(value) || !(value >= min && value <= max))
    throw InputError(fmt::format("{}='{}': {}", name, text, expectation("a number", unit, min, max, fallback)));
  return value;
}

}  // namespace

std::optional<std::string> read_set(const Variable& v, const Values* from) {
  if (from == nullptr) {
    const char* value = std::getenv(v.name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  }
  const auto it = from->find(v.name);
  if (it == from->end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::optional<std::string> read_text(const Variable& v, const Values* from) {
  check_type(v, Type::text);
  return value_or_default(v, from);
}

std::optional<long long> read_integer(const Variable& v, const Values* from) {
  check_type(v, Type::integer);
  auto text = value_or_default(v, from);
  if (!text) return std::nullopt;
  return integer_of(v.name, *text, v.min, v.max, v.unit, v.default_value);
}

std::optional<double> read_number(const Variable& v, const Values* from) {
  check_type(v, Type::number);
  auto text = value_or_default(v, from);
  if (!text) return std::nullopt;
  return number_of(v.name, *text, v.min, v.max, v.unit, v.default_value);
}

std::optional<bool> read_flag(const Variable& v, const Values* from) {
  check_type(v, Type::flag);
  auto text = value_or_default(v, from);
  if (!text) return std::nullopt;
  if (*text != "0" && *text != "1")
    throw InputError(fmt::format("{}='{}': expected 1 (on) or 0 (off){}", v.name, *text,
                                 *v.default_value ? fmt::format("; fix it, or unset it for {}", v.default_value)
                                                  : std::string("; fix it or unset it")));
  return *text == "1";
}

long long parse_integer(std::string_view name, const std::string& text, double min, double max) {
  return integer_of(name, text, min, max, "", "");
}

double parse_number(std::string_view name, const std::string& text, double min, double max) {
  return number_of(name, text, min, max, "", "");
}

}  // namespace ringrun::variables

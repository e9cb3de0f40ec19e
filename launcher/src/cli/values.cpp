#include "cli/values.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace ringrun::cli_values {
namespace {

// The spelling users know for options CLI11 knows by their long name.
std::string user_spelling(const std::string& name) {
  if (name == "--num-proc") return "-np";
  if (name == "--env") return "-x";
  if (name == "--hosts") return "-H";
  return name;
}

}  // namespace

CLI::Validator whole_number(std::string option, std::string what, long long min, std::string example,
                            long long max) {
  auto check = [=](const std::string& value) -> std::string {
    long long n = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    const bool whole = ec == std::errc() && end == value.data() + value.size() && !value.empty();
    const std::string range = max == std::numeric_limits<int>::max() ? fmt::format("at least {}", min)
                                                                      : fmt::format("from {} to {}", min, max);
    const bool too_large = (!whole && ec == std::errc::result_out_of_range) || (whole && n > max && max == std::numeric_limits<int>::max());
    if (too_large)
      throw UsageError(fmt::format("{} {} : too large; {} must be {} (e.g. {} {})", option, value, what, range,
                                   option, example));
    if (!whole)
      throw UsageError(fmt::format("{} '{}' : {} must be a whole number, {} (e.g. {} {})", option, value, what, range,
                                   option, example));
    if (n < min || n > max)
      throw UsageError(fmt::format("{} {} : {} must be {} (e.g. {} {})", option, value, what, range, option, example));
    return {};
  };
  return CLI::Validator(check, "", "whole number");
}

CLI::Validator number(std::string option, std::string what, double min, std::string example, bool min_exclusive,
                      double max) {
  auto check = [=](const std::string& value) -> std::string {
    char* end = nullptr;
    const double x = value.empty() ? NAN : std::strtod(value.c_str(), &end);
    std::string bound = fmt::format("{} {}", min_exclusive ? "above" : "at least", min);
    if (std::isfinite(max)) bound += fmt::format(" and at most {}", max);
    if (value.empty() || *end != '\0' || !std::isfinite(x))
      throw UsageError(fmt::format("{} '{}' : {} must be a number, {} (e.g. {} {})", option, value, what, bound, option,
                                   example));
    if (x < min || (min_exclusive && x == min) || x > max)
      throw UsageError(fmt::format("{} {} : {} must be {} (e.g. {} {})", option, value, what, bound, option, example));
    return {};
  };
  return CLI::Validator(check, "", "number");
}

CLI::Validator table_value(std::string option, std::string what, const variables::Variable& v, std::string example) {
  if (example.empty()) example = *v.default_value ? v.default_value : fmt::format("{:g}", v.max);
  if (v.type == variables::Type::integer)
    return whole_number(std::move(option), std::move(what), static_cast<long long>(v.min), example,
                        static_cast<long long>(v.max));
  return number(std::move(option), std::move(what), v.min, example, false, v.max);
}

CLI::Validator one_of(std::string option, std::vector<std::string> choices, std::string meaning) {
  auto check = [=](const std::string& value) -> std::string {
    for (const std::string& c : choices)
      if (c == value) return {};
    throw UsageError(fmt::format("{} '{}' : not a choice; give {}", option, value, meaning));
  };
  return CLI::Validator(check, "", "choice");
}

std::vector<std::string> shell_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (++i == text.size()) throw std::invalid_argument("it ends in a backslash");
      if (text[i] != '\n') word += text[i];
    } else if (c == '\'') {
      const auto close = text.find('\'', i + 1);
      if (close == std::string::npos) throw std::invalid_argument("a single quote is not closed");
      word.append(text, i + 1, close - i - 1);
      i = close;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i == text.size()) throw std::invalid_argument("a double quote is not closed");
        if (text[i] == '"') break;
        constexpr std::string_view kEscaped = "\"\\$`\n";  // what a backslash escapes inside "..."
        if (text[i] == '\\' && i + 1 < text.size() && kEscaped.find(text[i + 1]) != std::string_view::npos) {
          if (text[++i] != '\n') word += text[i];
          continue;
        }
        word += text[i];
      }
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::string describe_parse_error(const CLI::ParseError& error) {
  const std::string what = error.what();
  // "--num-proc: 1 required INT missing": the option was last, with no value after it.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error)) {
    const std::string name = what.substr(0, what.find(':'));
    if (name.starts_with("-")) return fmt::format("{} needs a value after it (see ringrun --help)", user_spelling(name));
  }
  return fmt::format("{} (see ringrun --help)", what);
}

}  // namespace ringrun::cli_values

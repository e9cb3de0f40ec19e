#include "cli/values.hpp"

#include <ringrun/cli.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

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

CLI::Validator number(std::string option, std::string what, double min, std::string example, bool min_exclusive) {
  auto check = [=](const std::string& value) -> std::string {
    char* end = nullptr;
    const double x = value.empty() ? NAN : std::strtod(value.c_str(), &end);
    const std::string bound = fmt::format("{} {}", min_exclusive ? "above" : "at least", min);
    if (value.empty() || *end != '\0' || !std::isfinite(x))
      throw UsageError(fmt::format("{} '{}' : {} must be a number, {} (e.g. {} {})", option, value, what, bound, option,
                                   example));
    if (x < min || (min_exclusive && x == min))
      throw UsageError(fmt::format("{} {} : {} must be {} (e.g. {} {})", option, value, what, bound, option, example));
    return {};
  };
  return CLI::Validator(check, "", "number");
}

CLI::Validator one_of(std::string option, std::vector<std::string> choices, std::string meaning) {
  auto check = [=](const std::string& value) -> std::string {
    for (const std::string& c : choices)
      if (c == value) return {};
    throw UsageError(fmt::format("{} '{}' : not a choice; give {}", option, value, meaning));
  };
  return CLI::Validator(check, "", "choice");
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

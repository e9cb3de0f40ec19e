#include "core/env.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "ringrun/runtime.hpp"

namespace ringrun::core {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long long> env_int(const char* name, long long min, long long max) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  long long value = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0' || value < min || value > max)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("{}='{}': expected an integer from {} to {}", name, *text,
                                                          min, max));
  return value;
}

std::optional<double> env_number(const char* name, double min, double max) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !(value >= min && value <= max))
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("{}='{}': expected a number from {} to {}", name, *text, min, max));
  return value;
}

}  // namespace ringrun::core

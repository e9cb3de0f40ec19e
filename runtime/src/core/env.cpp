#include "core/env.hpp"

#include <cstdlib>

#include "ringrun/runtime.hpp"

namespace ringrun::core {
namespace {

// The reader's InputError as the runtime's error: ringrun_init returns RINGRUN_ERR_BOOTSTRAP.
template <typename Read>
auto bootstrap_error(Read read) {
  try {
    return read();
  } catch (const InputError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, e.what());
  }
}

}  // namespace

std::optional<std::string> env_set(const variables::Variable& v) { return variables::read_set(v); }

std::optional<std::string> env_text(const variables::Variable& v) { return variables::read_text(v); }

std::optional<long long> env_integer(const variables::Variable& v) {
  return bootstrap_error([&] { return variables::read_integer(v); });
}

std::optional<double> env_number(const variables::Variable& v) {
  return bootstrap_error([&] { return variables::read_number(v); });
}

std::optional<bool> env_flag(const variables::Variable& v) {
  return bootstrap_error([&] { return variables::read_flag(v); });
}

std::chrono::milliseconds env_seconds(const variables::Variable& v) {
  return std::chrono::milliseconds(static_cast<long long>(*env_number(v) * 1000));
}

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long long> env_int(const char* name, long long min, long long max) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  return bootstrap_error([&] {
    return variables::parse_integer(name, *text, static_cast<double>(min), static_cast<double>(max));
  });
}

}  // namespace ringrun::core

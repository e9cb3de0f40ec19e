// The message f() throws, or "" when it returns: the launcher tests compare whole messages.
#pragma once

#include <exception>
#include <string>

inline std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

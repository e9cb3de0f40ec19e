// The stall inspector (stall_inspector.hpp): verdicts and wording, from the times it is given.
#include "engine/stall_inspector.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "core/world.hpp"
#include "ringrun/environment_variables.hpp"

namespace ringrun::engine {

namespace {
double seconds(StallInspector::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

StallInspector::Verdict StallInspector::judge(Clock::time_point first_seen, Clock::time_point last_warned,
                                              Clock::time_point now) const {
  const auto age = now - first_seen;
  if (shutdown_.count() > 0 && age >= shutdown_) return Verdict::shut_down;
  const bool warn_now = warning_.count() > 0 && age >= warning_ &&
                        (now - last_warned >= warning_ || last_warned == first_seen);
  return warn_now ? Verdict::warn : Verdict::none;
}

std::string StallInspector::describe(const std::string& name, const std::string& what, Clock::duration waited,
                                     const std::vector<int>& submitted, const std::string& missing) {
  return fmt::format("tensor '{}' ({}) has waited {:.1f} s: submitted by {}, not by {}", name, what, seconds(waited),
                     core::name_ranks(submitted), missing);
}

std::string StallInspector::shutdown_message(const std::string& description) const {
  return fmt::format("stalled: {} ({}={:g})", description, variables::kStallCheckShutdownTimeSeconds.name,
                     seconds(shutdown_));
}

void StallInspector::warn(const std::string& description) {
  std::fprintf(stderr, "ringrun: stall warning: %s\n", description.c_str());
}

}  // namespace ringrun::engine

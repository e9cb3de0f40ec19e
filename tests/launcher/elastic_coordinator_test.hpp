// The elastic coordinator tests' shared helpers (test_elastic_coordinator*.cpp): a fake clock,
// waitpid statuses, configurations and readers of the actions.
#pragma once

#include "elastic/coordinator.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <csignal>
#include <string>
#include <vector>

namespace coordinator_test {

using namespace ringrun;
using namespace std::chrono_literals;
using store::elastic::PublishedWorld;

inline const SteadyTime t0 = SteadyTime{} + 1000h;

// waitpid statuses.
inline constexpr int kExit0 = 0;
inline constexpr int kExit3 = 3 << 8;
inline constexpr int kKilled9 = SIGKILL;

inline ElasticConfig config(int slots, int min_np) {
  ElasticConfig c;
  c.hosts = {HostSlots{"h", slots, {}}};
  c.min_np = min_np;
  c.grace_period_s = 5;
  return c;
}

template <typename T>
std::vector<T> all_of(const ElasticActions& actions) {
  std::vector<T> out;
  for (const ElasticAction& a : actions)
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  return out;
}

// The one world published by `actions` (fails the test when there is not exactly one).
inline PublishedWorld published(const ElasticActions& actions) {
  auto worlds = all_of<PublishWorld>(actions);
  REQUIRE(worlds.size() == 1);
  return worlds[0].world;
}

inline std::string line_of(const ElasticActions& actions) {
  auto worlds = all_of<PublishWorld>(actions);
  return worlds.empty() ? "" : worlds[0].line;
}

inline std::vector<std::uint64_t> ids(std::initializer_list<std::uint64_t> list) { return list; }

inline std::vector<std::uint64_t> terminated(const ElasticActions& actions) {
  std::vector<std::uint64_t> out;
  for (const auto& t : all_of<TerminateMember>(actions)) out.push_back(t.id);
  return out;
}

inline std::vector<std::string> notices(const ElasticActions& actions) {
  std::vector<std::string> out;
  for (const auto& n : all_of<Notice>(actions)) out.push_back(n.line);
  return out;
}

inline std::vector<std::uint64_t> retired(const ElasticActions& actions) {
  std::vector<std::uint64_t> out;
  for (const auto& r : all_of<RetireMember>(actions)) out.push_back(r.id);
  return out;
}

inline DiscoveryResult printed(std::string output) { return DiscoveryResult{true, std::move(output), ""}; }
inline DiscoveryResult failed(std::string error) { return DiscoveryResult{false, "", std::move(error)}; }

}  // namespace coordinator_test

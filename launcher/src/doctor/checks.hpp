// What the diagnostics' pure files share (doctor/checks.cpp, doctor/transports.cpp,
// doctor/render.cpp, doctor/build.cpp): the Check constructors and small readers of the
// environment and of comma lists. Internal to launcher/src.
#pragma once

#include "doctor/doctor.hpp"

#include <ringrun/slurm.hpp>

namespace ringrun::diagnostics {

inline std::optional<std::string> lookup(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

inline std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) items.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

inline std::string join(const std::vector<std::string>& items, std::string_view separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

inline Check pass(std::string name, std::string detail) {
  return {std::move(name), Status::pass, std::move(detail), ""};
}
inline Check warn(std::string name, std::string detail, std::string fix) {
  return {std::move(name), Status::warn, std::move(detail), std::move(fix)};
}
inline Check fail(std::string name, std::string detail, std::string fix) {
  return {std::move(name), Status::fail, std::move(detail), std::move(fix)};
}

inline std::optional<std::string> slurm_job_id(const Environment& env) {
  if (auto id = lookup(env, "SLURM_JOB_ID")) return id;
  return lookup(env, "SLURM_JOBID");
}

// The allocation when SLURM's variables parse; nullopt outside a job or when malformed.
inline std::optional<Allocation> parsed_allocation(const Environment& env) {
  try {
    return allocation_from_slurm_env(env);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

}  // namespace ringrun::diagnostics

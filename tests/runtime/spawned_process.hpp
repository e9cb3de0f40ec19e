// Starting a test's helper processes: a clean environment (none of the launcher variables of
// whatever runs the tests) and a spawn whose stdout and stderr go to one file. Doctest's REQUIRE
// reports a spawn that fails.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

extern char** environ;

namespace ringrun::test {

// This process's environment without RINGRUN_*, OMPI_*, PMIX_*, SLURM_* and MASTER_* entries.
inline std::vector<std::string> clean_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (entry.rfind("RINGRUN_", 0) == 0 || entry.rfind("OMPI_", 0) == 0 || entry.rfind("PMIX_", 0) == 0 ||
        entry.rfind("SLURM_", 0) == 0 || entry.rfind("MASTER_", 0) == 0)
      continue;
    env.push_back(entry);
  }
  return env;
}

// Starts argv (searched in PATH) with exactly env, stdout and stderr into out. process_group:
// -1 keeps the caller's group, 0 starts a new one led by the child, > 0 joins that group.
inline pid_t spawn_to_file(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const std::string& out, pid_t process_group = -1) {
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  if (process_group >= 0) {
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, process_group);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  REQUIRE_MESSAGE(rc == 0, "cannot start ", argv[0], ": ", std::strerror(rc));
  return pid;
}

}  // namespace ringrun::test

// What a process holds, from /proc/self: threads, open descriptors and the sockets among them.
// The reinit and elastic tests compare these before and after a teardown to find leaks.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "sanitizer_build.hpp"

namespace ringrun::test {

#ifdef RINGRUN_TEST_TSAN
// ThreadSanitizer starts a background thread of its own with the process's first thread, and it
// lives as long as the process: start it at load time, so that counts taken before the runtime's
// first thread and after its last compare alike.
inline const bool kSanitizerThreadStarted = [] {
  std::thread([] {}).join();
  return true;
}();
#endif

struct ProcessCounts {
  int threads = 0;
  int fds = 0;
  int sockets = 0;
};

inline ProcessCounts process_counts() {
  ProcessCounts counts;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++counts.threads;
    closedir(d);
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    const int own = dirfd(d);  // the listing's own descriptor is not the program's
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.' || std::atoi(e->d_name) == own) continue;
      ++counts.fds;
      char target[256] = {};
      std::string path = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(path.c_str(), target, sizeof target - 1) > 0 && std::strncmp(target, "socket:", 7) == 0)
        ++counts.sockets;
    }
    closedir(d);
  }
  return counts;
}

}  // namespace ringrun::test

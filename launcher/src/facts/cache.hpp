// Facts about this host or cluster that cost a launch milliseconds to learn (a process to run,
// a 200 MB library to load), remembered in /tmp/ringrun-UID under a key that names everything
// the answer depends on: a changed input is another key, so a stale answer is never read.
#pragma once

#include <ringrun/allocation.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// /tmp/ringrun-UID, created 0700 when missing; nullopt when it is not a directory of ours that
// nobody else may write (then nothing is cached).
std::optional<std::string> private_cache_dir();

// Removes the files of `dir` whose names start with `prefix` and that were last written more
// than `max_age_s` seconds ago: per-job answers (interfaces-JOB-HASH) would otherwise pile up,
// one per job, for as long as /tmp lives.
void remove_stale_cache_files(const std::string& dir, const std::string& prefix, long max_age_s);

// "path inode size mtime" of a file (stat, links followed), or nullopt when it cannot be read.
std::optional<std::string> file_identity(const std::string& path);

// The lines stored under `key` (in the file `file`-HASH of the cache directory) when every line
// passes `valid`; else ask(), stored when it gave at least one line and all of them are valid.
std::vector<std::string> cached_fact_lines(const std::string& key, const std::string& file,
                                           bool (*valid)(const std::string&),
                                           const std::function<std::vector<std::string>()>& ask);

// topology::find_nccl_library's version, cached per loader view: LD_LIBRARY_PATH and the
// identity of each of its directories (a library added there changes the directory's mtime),
// of /etc/ld.so.cache and of /usr/local/cuda/lib64/libnccl.so.2; a cached answer is used only
// while the library file it names is unchanged.
std::optional<int> cached_nccl_version(const Environment& env);

}  // namespace ringrun

// Facts about this host or cluster that cost a launch milliseconds to learn (a process to run,
// a 200 MB library to load), remembered in /tmp/ringrun-UID under a key that names everything
// the answer depends on: a changed input is another key, so a stale answer is never read.
#pragma once

#include <ringrun/allocation.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// /tmp/ringrun-UID, created 0700 when missing; nullopt when it is not a directory of ours that
// nobody else may write (then nothing is cached).
std::optional<std::string> private_cache_dir();

// The bound of the cache directory (ringrun(1), FILES). Per-job answers (interfaces-JOB-HASH)
// would otherwise pile up, one per job, for as long as /tmp lives; the other answers are keyed by
// a configuration (a cluster, LD_LIBRARY_PATH, a boot) and are few, unless that changes often.
struct CacheBound {
  std::size_t max_files = 64;         // every regular file, the oldest removed first
  std::size_t max_job_answers = 32;   // interfaces-*, the newest kept: earlier jobs' go first
  std::int64_t max_job_answer_age_s = 2 * 24 * 3600;  // a job still running then probes once more
  std::int64_t max_temporary_age_s = 3600;  // a writer's FILE.PID that a crash left unrenamed
};
inline constexpr CacheBound kFactCacheBound{};

// A regular file of the cache directory, as pruning sees it.
struct CacheEntry {
  std::string name;
  std::int64_t written_ns = 0;  // its mtime, nanoseconds since the epoch
};

// The names to remove so that `entries` stay within `bound` at `now_ns` (pure): per-job answers
// and writer temporaries past their age, then the per-job answers beyond the newest
// max_job_answers, then the oldest entries beyond max_files. `keep` (the entry just written) is
// never among them.
std::vector<std::string> cache_entries_to_remove(std::vector<CacheEntry> entries, std::int64_t now_ns,
                                                 const CacheBound& bound, const std::string& keep = {});

// Applies cache_entries_to_remove to the regular files of `dir` (links and folders are left
// alone, and a name swapped for a link in between is not followed).
void prune_cache_dir(const std::string& dir, const CacheBound& bound, const std::string& keep = {});

// Writes `text` to `path` of the cache directory (a private temporary file renamed into place),
// then prunes the directory to kFactCacheBound, keeping `path`. False when nothing was written.
bool store_cache_file(const std::string& path, const std::string& text);

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

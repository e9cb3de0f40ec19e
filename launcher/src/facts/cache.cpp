#include "facts/cache.hpp"
#include "facts/python_package.hpp"

#include <ringrun/topology.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <sstream>

namespace ringrun {
namespace {

// The whole file, when it is a regular file of ours that nobody else may write.
std::optional<std::string> read_own_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st{};
  std::optional<std::string> text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 022) == 0 &&
      st.st_size < 4096) {
    std::string buf(static_cast<std::size_t>(st.st_size), '\0');
    if (::read(fd, buf.data(), buf.size()) == static_cast<ssize_t>(buf.size())) text = std::move(buf);
  }
  ::close(fd);
  return text;
}

// A cached NCCL answer: "none", or "VERSION IDENTITY" where IDENTITY is file_identity() of the
// library the loader opened, still the same file now.
bool nccl_answer_current(const std::string& line) {
  if (line == "none") return true;
  const auto space = line.find(' ');
  if (space == std::string::npos || space == 0 || line.find_first_not_of("0123456789") != space) return false;
  const std::string identity = line.substr(space + 1);
  const auto path_end = identity.find(' ');
  return path_end != std::string::npos && file_identity(identity.substr(0, path_end)) == identity;
}

constexpr std::int64_t kNanosecondsPerSecond = 1'000'000'000;

std::int64_t nanoseconds_since_epoch(const timespec& t) {
  return std::int64_t{t.tv_sec} * kNanosecondsPerSecond + t.tv_nsec;
}

}  // namespace

std::optional<std::string> private_cache_dir() {
  std::string dir = fmt::format("/tmp/ringrun-{}", ::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return std::nullopt;
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
    return std::nullopt;
  return dir;
}

std::vector<std::string> cache_entries_to_remove(std::vector<CacheEntry> entries, std::int64_t now_ns,
                                                 const CacheBound& bound, const std::string& keep) {
  auto is_job_answer = [](const CacheEntry& e) { return e.name.starts_with("interfaces-"); };
  // FILE.PID: written, not yet renamed (cache names end in a hex hash, a job id or ".xml").
  auto is_temporary = [](const CacheEntry& e) {
    const auto dot = e.name.rfind('.');
    return dot != std::string::npos && dot + 1 < e.name.size() &&
           e.name.find_first_not_of("0123456789", dot + 1) == std::string::npos;
  };
  auto older_than = [now_ns](const CacheEntry& e, std::int64_t age_s) {
    return e.written_ns < now_ns - age_s * kNanosecondsPerSecond;
  };
  // `keep` first, then newest first (names break ties: the listing's order does not matter).
  std::sort(entries.begin(), entries.end(), [&keep](const CacheEntry& a, const CacheEntry& b) {
    if ((a.name == keep) != (b.name == keep)) return a.name == keep;
    return a.written_ns != b.written_ns ? a.written_ns > b.written_ns : a.name < b.name;
  });
  std::vector<std::string> out;
  std::size_t files = 0, job_answers = 0;
  for (const CacheEntry& e : entries) {
    const bool job_answer = is_job_answer(e);
    const bool expired = job_answer ? older_than(e, bound.max_job_answer_age_s)
                                    : is_temporary(e) && older_than(e, bound.max_temporary_age_s);
    const bool over = files >= bound.max_files || (job_answer && job_answers >= bound.max_job_answers);
    if (e.name != keep && (expired || over)) {
      out.push_back(e.name);
      continue;
    }
    ++files;
    job_answers += job_answer ? 1 : 0;
  }
  return out;
}

void prune_cache_dir(const std::string& dir, const CacheBound& bound, const std::string& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<CacheEntry> entries;
  while (const dirent* e = ::readdir(d)) {
    struct stat st{};
    // Relative to the directory: a name swapped for a link in between is not followed.
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      entries.push_back({e->d_name, nanoseconds_since_epoch(st.st_mtim)});
  }
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  for (const std::string& name : cache_entries_to_remove(std::move(entries), nanoseconds_since_epoch(now), bound, keep))
    ::unlinkat(::dirfd(d), name.c_str(), 0);
  ::closedir(d);
}

bool store_cache_file(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  const auto slash = path.rfind('/');
  if (slash != std::string::npos) prune_cache_dir(path.substr(0, slash), kFactCacheBound, path.substr(slash + 1));
  return true;
}

std::optional<std::string> file_identity(const std::string& path) {
  struct stat st{};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return std::nullopt;
  return fmt::format("{} {} {} {}.{:09}", path, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

std::vector<std::string> cached_fact_lines(const std::string& key, const std::string& file,
                                           bool (*valid)(const std::string&),
                                           const std::function<std::vector<std::string>()>& ask) {
  const auto dir = private_cache_dir();
  if (!dir) return ask();
  const std::string path = fmt::format("{}/{}-{:016x}", *dir, file, std::hash<std::string>{}(key));

  if (auto text = read_own_file(path); text && text->compare(0, key.size() + 1, key + "\n") == 0) {
    std::vector<std::string> lines;
    std::stringstream in(text->substr(key.size() + 1));
    bool all_valid = true;
    for (std::string line; std::getline(in, line);) {
      all_valid = all_valid && valid(line);
      lines.push_back(line);
    }
    if (all_valid && !lines.empty()) return lines;
  }

  std::vector<std::string> lines = ask();
  if (lines.empty()) return lines;  // no answer: ask again next time
  for (const auto& l : lines)
    if (!valid(l)) return lines;
  store_cache_file(path, fmt::format("{}\n{}\n", key, fmt::join(lines, "\n")));
  return lines;
}

std::optional<int> cached_nccl_version(const Environment& env) {
  // Keyed by every file the search would try (ringrun/gpu_libraries.hpp) and the loader's cache:
  // a library installed, removed or replaced in any of them is asked again.
  const gpu::SearchContext context{executable_dir().string(), gpu::variables_of(env)};
  std::string key = "ringrun nccl-version v2";
  for (const auto& file : gpu::candidate_files(gpu::Library::nccl, context))
    key += fmt::format("\nfile {}", file_identity(file).value_or("missing " + file));
  key += fmt::format("\nfile {}", file_identity("/etc/ld.so.cache").value_or("missing /etc/ld.so.cache"));
  std::optional<int> asked;
  const auto lines = cached_fact_lines(key, "nccl-version", nccl_answer_current, [&asked, &context] {
    const topology::NcclLibrary found = topology::find_nccl_library(context);
    asked = found.version;
    if (!found.version) return std::vector<std::string>{"none"};
    auto identity = file_identity(found.path);
    if (!identity) return std::vector<std::string>{};  // nothing to check it by later: not cached
    return std::vector<std::string>{fmt::format("{} {}", *found.version, *identity)};
  });
  if (lines.empty()) return asked;
  if (lines.size() != 1 || lines.front() == "none") return std::nullopt;
  try {
    return std::stoi(lines.front());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ringrun

#include "facts/cache.hpp"

#include <ringrun/topology.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace

std::optional<std::string> private_cache_dir() {
  std::string dir = fmt::format("/tmp/ringrun-{}", ::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return std::nullopt;
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
    return std::nullopt;
  return dir;
}

void remove_stale_cache_files(const std::string& dir, const std::string& prefix, long max_age_s) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const time_t oldest = ::time(nullptr) - max_age_s;
  while (const dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name).substr(0, prefix.size()) != prefix) continue;
    struct stat st{};
    // Relative to the directory: a name swapped for a link in between is not followed.
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        st.st_mtime < oldest)
      ::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
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
  const std::string tmp = fmt::format("{}.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return lines;
  const std::string text = fmt::format("{}\n{}\n", key, fmt::join(lines, "\n"));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
  return lines;
}

std::optional<int> cached_nccl_version(const Environment& env) {
  auto it = env.find("LD_LIBRARY_PATH");
  const std::string library_path = it == env.end() ? std::string() : it->second;
  std::string key = fmt::format("ringrun nccl-version v1\nLD_LIBRARY_PATH {}", library_path);
  std::stringstream dirs(library_path);
  for (std::string dir; std::getline(dirs, dir, ':');)
    key += fmt::format("\ndir {}", file_identity(dir.empty() ? "." : dir).value_or("missing " + dir));
  for (const char* file : {"/etc/ld.so.cache", "/usr/local/cuda/lib64/libnccl.so.2"})
    key += fmt::format("\nfile {}", file_identity(file).value_or(fmt::format("missing {}", file)));
  std::optional<int> asked;
  const auto lines = cached_fact_lines(key, "nccl-version", nccl_answer_current, [&asked] {
    const topology::NcclLibrary found = topology::find_nccl_library();
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

// Start-up (README, Using it): facts that cost a launch milliseconds are remembered under a key
// naming what they depend on, and re-learned when a cached answer no longer holds.
#include "facts/cache.hpp"
#include "facts/python_package.hpp"

#include <ringrun/topology.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace ringrun;

namespace {

// This test's cache files: a name with the pid in it, removed at the end.
struct CacheFiles {
  std::string prefix = "fact-cache-test-" + std::to_string(::getpid());
  ~CacheFiles() {
    std::error_code ec;
    if (auto dir = private_cache_dir())
      for (const auto& e : fs::directory_iterator(*dir, ec))
        if (e.path().filename().string().starts_with(prefix)) fs::remove(e.path(), ec);
  }
};

bool short_word(const std::string& line) { return !line.empty() && line.size() < 16; }

}  // namespace

TEST_CASE("a fact is asked once per key and re-asked when its stored answer is not valid") {
  REQUIRE(private_cache_dir());
  CacheFiles files;
  int asked = 0;
  auto ask = [&] {
    ++asked;
    return std::vector<std::string>{"alpha", "beta"};
  };
  CHECK(cached_fact_lines("key one", files.prefix, short_word, ask) == std::vector<std::string>{"alpha", "beta"});
  CHECK(cached_fact_lines("key one", files.prefix, short_word, ask) == std::vector<std::string>{"alpha", "beta"});
  CHECK(asked == 1);
  CHECK(cached_fact_lines("key two", files.prefix, short_word, ask).size() == 2);  // another key: asked
  CHECK(asked == 2);
  // A stored answer that fails the check (here: a line too long) is asked again.
  auto strict = [](const std::string& line) { return line == "alpha"; };
  CHECK(cached_fact_lines("key one", files.prefix, +strict, ask).size() == 2);
  CHECK(asked == 3);
  // No answer is not stored: asked every time.
  int empty_asked = 0;
  auto nothing = [&] {
    ++empty_asked;
    return std::vector<std::string>{};
  };
  CHECK(cached_fact_lines("key three", files.prefix, short_word, nothing).empty());
  CHECK(cached_fact_lines("key three", files.prefix, short_word, nothing).empty());
  CHECK(empty_asked == 2);
}

TEST_CASE("a cached file is one of ours: another user's or a group-writable one is not read") {
  REQUIRE(private_cache_dir());
  CacheFiles files;
  int asked = 0;
  auto ask = [&] {
    ++asked;
    return std::vector<std::string>{"gamma"};
  };
  cached_fact_lines("key", files.prefix, short_word, ask);
  for (const auto& e : fs::directory_iterator(*private_cache_dir()))
    if (e.path().filename().string().starts_with(files.prefix))
      fs::permissions(e.path(), fs::perms::group_write, fs::perm_options::add);
  cached_fact_lines("key", files.prefix, short_word, ask);
  CHECK(asked == 2);
}

TEST_CASE("the cached NCCL version is the one a dlopen finds, and names the library file it came from") {
  const Environment env;  // no LD_LIBRARY_PATH: the loader's cache and the CUDA directory
  const topology::NcclLibrary direct =
      topology::find_nccl_library({executable_dir().string(), gpu::variables_of(env)});
  const std::optional<int> first = cached_nccl_version(env);
  const std::optional<int> second = cached_nccl_version(env);  // from the file this time
  CHECK(first == direct.version);
  CHECK(second == direct.version);
  if (!direct.version) {
    MESSAGE("no libnccl.so.2 on this host: checked that 'none' is cached and read back");
    return;
  }
  CHECK(file_identity(direct.path).has_value());
  bool named = false;
  for (const auto& e : fs::directory_iterator(*private_cache_dir())) {
    if (!e.path().filename().string().starts_with("nccl-version-")) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    named = named || text.str().find(std::to_string(*direct.version) + " " + direct.path + " ") != std::string::npos;
  }
  CHECK(named);
}

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kNow = 1'800'000'000 * kSecond;

std::size_t count_removed(const std::vector<std::string>& removed, const std::string& prefix) {
  return static_cast<std::size_t>(
      std::count_if(removed.begin(), removed.end(), [&](const std::string& n) { return n.starts_with(prefix); }));
}

}  // namespace

TEST_CASE("pruning keeps the newest per-job answers, drops the expired ones, and never the entry just written") {
  const CacheBound bound;  // 64 files, 32 job answers, 2 days, temporaries 1 hour
  std::vector<CacheEntry> entries;
  for (int job = 1; job <= 40; ++job)  // job 40 the newest, one second apart
    entries.push_back({"interfaces-" + std::to_string(job) + "-00ab", kNow - (41 - job) * kSecond});
  entries.push_back({"topology-n1-boot-20800.xml", kNow - 30 * 24 * 3600 * kSecond});  // old, but no job's
  entries.push_back({"nccl-version-0123456789abcdef", kNow - 5 * kSecond});
  std::vector<std::string> removed = cache_entries_to_remove(entries, kNow, bound);
  CHECK(removed.size() == 8);  // 40 answers, 32 kept: jobs 1 to 8
  for (int job = 1; job <= 8; ++job)
    CHECK(std::find(removed.begin(), removed.end(), "interfaces-" + std::to_string(job) + "-00ab") != removed.end());
  // The entry just written stays even when it is not the newest (a coarse clock, a slow writer).
  removed = cache_entries_to_remove(entries, kNow, bound, "interfaces-1-00ab");
  CHECK(count_removed(removed, "interfaces-1-") == 0);
  CHECK(removed.size() == 8);  // jobs 2 to 9 instead
  // After two days a job's answer goes, however few there are; other answers do not age.
  std::vector<CacheEntry> few{{"interfaces-7-00ab", kNow - 49 * 3600 * kSecond},
                              {"interfaces-8-00ab", kNow - 47 * 3600 * kSecond},
                              {"slurm-task-plugin-00ab", kNow - 90 * 24 * 3600 * kSecond}};
  CHECK(cache_entries_to_remove(few, kNow, bound) == std::vector<std::string>{"interfaces-7-00ab"});
}

TEST_CASE("pruning bounds every file by count, oldest first, and removes abandoned temporary files") {
  CacheBound bound;
  bound.max_files = 3;
  std::vector<CacheEntry> entries{{"nccl-version-a", kNow - 4 * kSecond},
                                  {"nccl-version-b", kNow - 3 * kSecond},
                                  {"srun-mpi-list-c", kNow - 2 * kSecond},
                                  {"topology-n1-x-20800.xml", kNow - 1 * kSecond},
                                  {"nccl-version-d.4242", kNow - 2 * 3600 * kSecond},  // a crashed writer's
                                  {"nccl-version-e.4243", kNow}};                      // a writer at work
  const std::vector<std::string> removed = cache_entries_to_remove(entries, kNow, bound);
  CHECK(removed == std::vector<std::string>{"nccl-version-b", "nccl-version-a", "nccl-version-d.4242"});
  CHECK(cache_entries_to_remove({}, kNow, bound).empty());
}

TEST_CASE("500 jobs' interface answers leave the cache folder within its bound") {
  const fs::path dir = fs::temp_directory_path() / ("ringrun-prune-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  REQUIRE(store_cache_file((dir / "topology-n1-boot-20800.xml").string(), "<topology/>\n"));
  REQUIRE(store_cache_file((dir / "nccl-version-0123456789abcdef").string(), "key\nnone\n"));
  std::ofstream(dir / "other-users-link-target") << "x\n";
  fs::create_symlink(dir / "other-users-link-target", dir / "interfaces-0-link");
  fs::create_directory(dir / "interfaces-0-folder");
  std::size_t most = 0;
  for (int job = 1; job <= 500; ++job) {
    const fs::path answer = dir / fmt::format("interfaces-{}-{:016x}", job, job * 7919);
    REQUIRE(store_cache_file(answer.string(), fmt::format("n{} eth0 10.0.0.{}\n", job, job % 250)));
    REQUIRE(fs::exists(answer));  // the entry just written is kept
    std::size_t files = 0, answers = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file() || e.is_symlink()) continue;
      ++files;
      answers += e.path().filename().string().starts_with("interfaces-") ? 1 : 0;
    }
    REQUIRE(files <= kFactCacheBound.max_files);
    REQUIRE(answers <= kFactCacheBound.max_job_answers);
    most = std::max(most, files);
    if (job == 500) CHECK(answers == kFactCacheBound.max_job_answers);
  }
  MESSAGE("the folder held at most " << most << " files over 500 jobs");
  CHECK(fs::exists(dir / "topology-n1-boot-20800.xml"));     // the job answers went, not these
  CHECK(fs::exists(dir / "nccl-version-0123456789abcdef"));
  CHECK(fs::is_symlink(dir / "interfaces-0-link"));           // links and folders are not the cache's
  CHECK(fs::is_directory(dir / "interfaces-0-folder"));
  fs::remove_all(dir);
}

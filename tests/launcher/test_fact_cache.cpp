// Start-up (README, Using it): facts that cost a launch milliseconds are remembered under a key
// naming what they depend on, and re-learned when a cached answer no longer holds.
#include "facts/cache.hpp"

#include <ringrun/topology.hpp>

#include <doctest/doctest.h>

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
  const topology::NcclLibrary direct = topology::find_nccl_library();
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

TEST_CASE("stale per-job answers are removed by age and prefix; other files and links are left") {
  const fs::path dir = fs::temp_directory_path() / ("ringrun-prune-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name) { std::ofstream(dir / name) << "x\n"; };
  write("interfaces-7-old");
  write("interfaces-8-new");
  write("topology-old");
  const auto three_days_ago = fs::file_time_type::clock::now() - std::chrono::hours(72);
  fs::last_write_time(dir / "interfaces-7-old", three_days_ago);
  fs::last_write_time(dir / "topology-old", three_days_ago);
  fs::create_symlink(dir / "topology-old", dir / "interfaces-9-link");
  remove_stale_cache_files(dir.string(), "interfaces-", 2 * 24 * 3600);
  CHECK_FALSE(fs::exists(dir / "interfaces-7-old"));
  CHECK(fs::exists(dir / "interfaces-8-new"));
  CHECK(fs::exists(dir / "topology-old"));                 // another prefix
  CHECK(fs::is_symlink(dir / "interfaces-9-link"));        // a link, not followed nor removed
  remove_stale_cache_files((dir / "missing").string(), "interfaces-", 0);  // no folder: nothing
  fs::remove_all(dir);
}

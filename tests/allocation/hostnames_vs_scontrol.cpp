// slurm_hostnames_vs_scontrol: expand_hostlist() against the real `scontrol show hostnames` on a
// generated corpus (ranges, padding, several brackets, duplicates, separators, invalid forms).
// scontrol needs only a slurm.conf for this (no daemon): a minimal one is written to a temp dir.
// Exit 0 = all equal, 1 = a difference (printed), 77 = scontrol not installed (ctest SKIP).
//
// Left out on purpose, because the parser follows newer Slurm there (shared/fixtures/slurm-env.md):
// the 23.11 suffix form (22.05 rejects it) and a '[' without ']' (22.05 prints garbage).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ringrun/slurm.hpp"

namespace {

struct Result {
  bool error = false;
  std::vector<std::string> names;
};

// Runs `scontrol show hostnames LIST` without a shell; stdout and stderr together.
Result scontrol_hostnames(const std::string& scontrol, const std::string& list) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl(scontrol.c_str(), "scontrol", "show", "hostnames", list.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  Result r;
  // scontrol exits 0 even for an invalid list; it says so on stderr.
  r.error = !WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.find("Invalid hostlist") != std::string::npos ||
            out.find("error:") != std::string::npos;
  std::size_t start = 0;
  while (start < out.size()) {
    auto end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    if (end > start) r.names.push_back(out.substr(start, end - start));
    start = end + 1;
  }
  return r;
}

Result ours(const std::string& list) {
  Result r;
  try {
    r.names = ringrun::expand_hostlist(list);
  } catch (const ringrun::InputError&) {
    r.error = true;
  }
  return r;
}

class Corpus {
 public:
  explicit Corpus(unsigned seed) : rng_(seed) {}

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string word() {
    static const std::string letters = "abcdefghijklmnopqrstuvwxyz";
    std::string w;
    const int n = pick(1, 6);
    for (int i = 0; i < n; ++i) w += letters[static_cast<std::size_t>(pick(0, 25))];
    if (pick(0, 3) == 0) w += "-";
    if (pick(0, 4) == 0) w += std::to_string(pick(0, 99));
    return w;
  }

  std::string number(int value, int pad) { return fmt::format("{:0{}}", value, pad); }

  // One item of a bracket: N or N-M, padded by the low bound (sometimes by the high bound only).
  std::string item(int& count) {
    const int lo = pick(0, 120);
    const int pad = pick(0, 3) == 0 ? pick(1, 4) : 0;
    if (pick(0, 2) == 0) {
      count += 1;
      return number(lo, pad);
    }
    const int hi = lo + pick(0, 9);
    count += hi - lo + 1;
    const int hi_pad = pick(0, 4) == 0 ? pick(1, 5) : 0;
    return number(lo, pad) + "-" + number(hi, hi_pad);
  }

  std::string bracket(int& count) {
    std::string b = "[";
    const int items = pick(1, 3);
    count = 0;
    for (int i = 0; i < items; ++i) {
      if (i) b += ",";
      b += item(count);
    }
    return b + "]";
  }

  // One entry: plain name, or a prefix with 1-3 bracket groups (the last one ends the entry).
  std::string entry() {
    if (pick(0, 4) == 0) return word();
    std::string e = word();
    const int groups = pick(0, 2) == 0 ? pick(2, 3) : 1;
    long total = 1;
    for (int g = 0; g < groups; ++g) {
      int count = 0;
      e += bracket(count);
      total *= count;
      if (g + 1 < groups) e += pick(0, 1) ? "-" : word();
    }
    if (total > 3000) return word();  // keep scontrol's output small
    return e;
  }

  std::string list() {
    std::string l;
    const int entries = pick(1, 4);
    static const char* separators[] = {",", ",", ",", " ", "\t", ", "};
    for (int i = 0; i < entries; ++i) {
      if (i) l += separators[pick(0, 5)];
      l += entry();
    }
    return l;
  }

  // A list with one invalid bracket item.
  std::string invalid() {
    static const char* bad[] = {"5-3", "-1", "a-c", "1x2", "", "1--2", "-", ",1", "1,", "1-2 ", "1-65537", "0-99999"};
    return word() + "[" + bad[pick(0, 11)] + "]" + (pick(0, 1) ? "," + word() : "");
  }

 private:
  std::mt19937 rng_;
};

}  // namespace

int main() {
  std::string scontrol;
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
    const auto p = std::filesystem::path(dir) / "scontrol";
    if (std::filesystem::exists(p)) scontrol = p.string();
  }
  if (scontrol.empty()) {
    std::puts("SKIP: scontrol is not installed (Debian: apt-get install slurm-client)");
    return 77;
  }

  // A minimal configuration: scontrol reads it but needs no controller for hostnames.
  char tmpl[] = "/tmp/ringrun-scontrol-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string conf = std::string(dir) + "/slurm.conf";
  std::ofstream(conf) << "ClusterName=ringrun-test\nSlurmctldHost=localhost\nSlurmctldPort=16899\n"
                         "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=ALL Default=YES\n";
  setenv("SLURM_CONF", conf.c_str(), 1);

  std::vector<std::string> corpus = {
      // fixture examples and edge cases checked by hand
      "gpu[001-004,010],cpu-a[1-2]", "nid0[0001-0003]", "nid00[111,169-170,174]", "rack[1-2]-node[01-02]",
      "foo-[10-20]-[01-02]", "a[1-2]b[3-4]c[5-6]", "b04-[09-10]", "ml-16-node-[001-002,004],ml-17-node-[001-003]",
      "linux[1,2]", "alpha,beta,gamma", "nodeA,nodeB[001,003],nodeC", "node[8-011]", "node[098-101]",
      "host[5-9,1]", "node[1-3],node[2-4]", "n[[1-2]", "a]b", "x,[1,2]", "[1-3]", "n[1-]", "n[ 1-2]",
      "n[+1-+3]", "n[1- 2]", "n[1-2][3]", "a[1]b[c[2]", "a[1-2]x]y[3]", "n[00-1]", "n[0-0]", " a , b ",
      "a[1-2],,b", "x[1-65536]", "n{a}", "node9,node010", "a[1-300]b[1-300]c[1]",
  };
  Corpus gen(20240611);
  for (int i = 0; i < 500; ++i) corpus.push_back(gen.list());
  for (int i = 0; i < 100; ++i) corpus.push_back(gen.invalid());

  int failures = 0;
  std::size_t names = 0, rejected = 0;
  for (const auto& list : corpus) {
    const Result want = scontrol_hostnames(scontrol, list);
    const Result got = ours(list);
    names += want.names.size();
    rejected += want.error ? 1 : 0;
    const bool same = want.error == got.error && (want.error || want.names == got.names);
    if (!same) {
      ++failures;
      if (failures <= 20) {
        fmt::print("DIFF for '{}':\n  scontrol: {}{}\n  ringrun:  {}{}\n", list, want.error ? "error " : "",
                   fmt::join(want.names.begin(), want.names.begin() + std::min<std::size_t>(want.names.size(), 12), " "),
                   got.error ? "error " : "",
                   fmt::join(got.names.begin(), got.names.begin() + std::min<std::size_t>(got.names.size(), 12), " "));
      }
    }
  }
  std::filesystem::remove_all(dir);
  fmt::print("{} lists ({} names from scontrol, {} lists rejected by both): {} differ\n", corpus.size(), names,
             rejected, failures);
  // The invalid part of the corpus must really have been invalid for scontrol.
  if (rejected < 100) {
    fmt::print("only {} lists were rejected; the corpus no longer tests invalid forms\n", rejected);
    return 1;
  }
  return failures == 0 ? 0 : 1;
}

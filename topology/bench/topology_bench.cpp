// ringrun-topology-bench: how long `ringrun --dry-run --json --topology FILE -np N` takes on a
// 100k-core machine with the native topology reader and with hwloc's (RINGRUN_TOPOLOGY_LOADER=
// hwloc), both measured in the same run so the machine's load is shared, plus the same for the
// synthetic description itself. The export is made once with lstopo in /tmp (it is ~700 MB; never
// in the repository). Not a test: it takes about a minute, most of it hwloc's.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringrun/environment_variables.hpp"
#include "ringrun/topology.hpp"

namespace {

struct Run {
  double seconds = 0;
  long max_rss_kb = 0;
};

[[noreturn]] void die(const std::string& message) {
  fmt::print(stderr, "ringrun-topology-bench: {}\n", message);
  std::exit(2);
}

// argv run with stdout to /dev/null and RINGRUN_TOPOLOGY_LOADER=loader ("" leaves it unset);
// wall time and the child's peak RSS.
Run run(const std::vector<std::string>& argv, const std::string& loader) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) die(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    if (loader.empty()) ::unsetenv(ringrun::variables::kTopologyLoader.name);
    else ::setenv(ringrun::variables::kTopologyLoader.name, loader.c_str(), 1);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    fmt::print(stderr, "ringrun-topology-bench: cannot run {}: {}\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (::wait4(pid, &status, 0, &usage) < 0) die(fmt::format("wait4: {}", std::strerror(errno)));
  Run r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.max_rss_kb = usage.ru_maxrss;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die(fmt::format("{} failed (status {:#x})", argv[0], status));
  return r;
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return fmt::format("{} {} {}", a, b, c);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void usage() {
  fmt::print(
      "usage: ringrun-topology-bench [--desc 'pack:16 numa:8 l3:25 core:32 pu:1'] [--xml FILE] [--np N]\n"
      "                              [--reps N] [--ringrun PATH] [--no-hwloc] [--no-synthetic]\n"
      "Times `ringrun --dry-run --json --topology FILE -np N` with the native reader (median of --reps)\n"
      "and with {}=hwloc (once: ~25 s), then the same for synthetic:DESC.\n"
      "FILE (default /tmp/ringrun-topology-<desc>.xml) is made with lstopo when absent.\n",
      ringrun::variables::kTopologyLoader.name);
}

}  // namespace

int main(int argc, char** argv) {
  std::string desc = "pack:16 numa:8 l3:25 core:32 pu:1";
  std::string xml;
  std::string np = "64";
  int reps = 5;
  bool hwloc = true, synthetic = true;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  std::string ringrun = (self.parent_path() / "ringrun").string();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    if (arg == "--desc") desc = value();
    else if (arg == "--xml") xml = value();
    else if (arg == "--np") np = value();
    else if (arg == "--reps") reps = std::max(1, std::atoi(value().c_str()));
    else if (arg == "--ringrun") ringrun = value();
    else if (arg == "--no-hwloc") hwloc = false;
    else if (arg == "--no-synthetic") synthetic = false;
    else if (arg == "-h" || arg == "--help") { usage(); return 0; }
    else die(fmt::format("unknown option '{}'; see --help", arg));
  }
  if (xml.empty()) {
    std::string name = desc;
    for (char& c : name) if (c == ' ' || c == ':') c = '_';
    xml = fmt::format("/tmp/ringrun-topology-{}.xml", name);
  }
  fmt::print("load before: {}\n", loadavg());
  if (!std::filesystem::exists(xml)) {
    const Run made = run({"lstopo", "--of", "xml", "-i", desc, xml + ".tmp"}, "");
    std::filesystem::rename(xml + ".tmp", xml);
    fmt::print("made {} with lstopo -i '{}': {:.2f} s, {} MB peak\n", xml, desc, made.seconds, made.max_rss_kb / 1024);
  }
  fmt::print("{}: {} MB\n", xml, std::filesystem::file_size(xml) >> 20);

  // In-process: the native reader alone, and what it found.
  const auto t0 = std::chrono::steady_clock::now();
  const auto topo = ringrun::topology::load_xml_native(xml);
  const double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!topo) die(fmt::format("{}: the native reader does not take it (it would fall back to hwloc)", xml));
  fmt::print("native reader alone: {:.3f} s ({} cores, {} NUMA nodes)\n", read_s, topo->cores.size(),
             topo->numa_nodes.size());

  auto compare = [&](const std::string& what, const std::string& topology) {
    const std::vector<std::string> cmd = {ringrun, "--dry-run", "--json", "--topology", topology, "-np", np};
    std::vector<double> times;
    long rss = 0;
    for (int r = 0; r < reps; ++r) {
      const Run n = run(cmd, "native");
      times.push_back(n.seconds);
      rss = std::max(rss, n.max_rss_kb);
    }
    const double native_s = median(times);
    fmt::print("{:<10} native: {:8.3f} s median of {} (min {:.3f}, max {:.3f}), peak RSS {} MB\n", what, native_s,
               reps, *std::min_element(times.begin(), times.end()), *std::max_element(times.begin(), times.end()),
               rss / 1024);
    if (!hwloc) return;
    const Run h = run(cmd, "hwloc");
    fmt::print("{:<10} hwloc:  {:8.3f} s (1 run), peak RSS {} MB; hwloc/native = {:.0f}x\n", what, h.seconds,
               h.max_rss_kb / 1024, h.seconds / native_s);
  };
  fmt::print("ringrun --dry-run --json --topology T -np {}\n", np);
  compare("xml", xml);
  if (synthetic) compare("synthetic", "synthetic:" + desc);
  fmt::print("load after: {}\n", loadavg());
  return 0;
}

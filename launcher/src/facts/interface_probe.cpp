#include "facts/interface_probe.hpp"

#include "common/subprocess.hpp"
#include "facts/cache.hpp"
#include "facts/python_package.hpp"

#include <ringrun/process.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

namespace ringrun::netprobe {
namespace {

constexpr const char* kLineTag = "ringrun-interfaces";
constexpr int kProbeTimeoutS = 60;

bool excluded_name(const std::string& name) {
  return name == "lo" || name.starts_with("docker") || name.starts_with("veth") || name.starts_with("virbr");
}

struct Cidr {
  std::uint32_t addr = 0;  // host order
  int len = 0;
};

std::optional<Cidr> parse_cidr(const std::string& text) {
  auto slash = text.find('/');
  std::string ip = text.substr(0, slash);
  in_addr a{};
  if (::inet_pton(AF_INET, ip.c_str(), &a) != 1) return std::nullopt;
  Cidr c{ntohl(a.s_addr), 32};
  if (slash != std::string::npos) {
    try {
      c.len = std::stoi(text.substr(slash + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (c.len < 0 || c.len > 32) return std::nullopt;
  }
  return c;
}

bool routable(const Cidr& c) {
  return (c.addr >> 16) != 0xA9FEu /* 169.254/16 link-local */ && (c.addr >> 24) != 127u;
}

std::uint32_t mask_of(int len) { return len == 0 ? 0u : ~0u << (32 - len); }

std::string format_subnet(const Cidr& c) {
  std::uint32_t net = c.addr & mask_of(c.len);
  return fmt::format("{}.{}.{}.{}/{}", net >> 24, (net >> 16) & 255, (net >> 8) & 255, net & 255, c.len);
}

const Interface* find(const NodeInterfaces& node, const std::string& name) {
  for (const auto& i : node.interfaces)
    if (i.name == name) return &i;
  return nullptr;
}

std::vector<Cidr> routable_addresses(const Interface& i) {
  std::vector<Cidr> out;
  for (const auto& a : i.ipv4)
    if (auto c = parse_cidr(a); c && routable(*c)) out.push_back(*c);
  return out;
}

// The subnet every node's `name` shares, if one does (each node's own prefix length).
std::optional<std::string> common_subnet(const std::vector<NodeInterfaces>& nodes, const std::string& name) {
  for (const Cidr& first : routable_addresses(*find(nodes.front(), name))) {
    std::uint32_t mask = mask_of(first.len);
    bool all = true;
    for (const auto& node : nodes) {
      bool here = false;
      for (const Cidr& c : routable_addresses(*find(node, name)))
        here = here || (c.len == first.len && (c.addr & mask) == (first.addr & mask));
      all = all && here;
    }
    if (all) return format_subnet(first);
  }
  return std::nullopt;
}

std::string describe_node(const NodeInterfaces& node) {
  std::vector<std::string> usable;
  for (const auto& i : node.interfaces)
    if (i.up && !i.loopback && !excluded_name(i.name) && !routable_addresses(i).empty()) usable.push_back(i.name);
  return fmt::format("{} has {}", node.host, usable.empty() ? "none" : fmt::format("{}", fmt::join(usable, ",")));
}

// Runs argv (never through a shell) with env, returns its exit status and stdout; stderr passes
// through. Kills it after kProbeTimeoutS; 127 when it cannot be started.
std::pair<int, std::string> run_capture(const std::vector<std::string>& argv, const Environment& env) {
  auto result = run_program({resolve_program(argv.at(0), search_path(env)), argv, env,
                             std::chrono::seconds(kProbeTimeoutS), ErrorOutput::inherited});
  if (!result) return {127, ""};
  if (result->timed_out)
    throw LaunchError(fmt::format("ringrun: the network interface probe ({}) did not finish in {} s; pass "
                                  "--network-interface NAME to skip it",
                                  argv.at(0), kProbeTimeoutS),
                      1);
  return {exit_code_of(result->wait_status), std::move(result->output)};
}

}  // namespace

std::string shell_words(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                   "_-./=:,@%+") == std::string::npos;
    if (plain) {
      s += a;
    } else {
      s += '\'';
      for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
      s += '\'';
    }
  }
  return s;
}

namespace {

// /tmp/ringrun-UID/interfaces-JOB-HASH: the probe output of one job's host list.
std::optional<std::string> cache_path(const std::vector<std::string>& hosts, const Environment& env) {
  auto job = env.find("SLURM_JOB_ID");
  if (job == env.end() || job->second.find_first_not_of("0123456789_") != std::string::npos) return std::nullopt;
  const auto dir = private_cache_dir();
  if (!dir) return std::nullopt;
  // Job ids restart when a controller starts from empty state (test clusters do): the cluster's
  // name and configuration file are part of the key, so another cluster's answer is never used.
  auto value = [&env](const char* name) { return env.count(name) ? env.at(name) : std::string(); };
  std::size_t h = std::hash<std::string>{}(
      fmt::format("{}\n{}\n{}", value("SLURM_CLUSTER_NAME"), value("SLURM_CONF"), fmt::join(hosts, ",")));
  return fmt::format("{}/interfaces-{}-{:016x}", *dir, job->second, h);
}

}  // namespace

std::vector<Interface> local_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_name) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const Interface& i) { return i.name == a->ifa_name; });
    if (it == out.end()) {
      out.push_back(Interface{a->ifa_name, false, false, {}});
      it = out.end() - 1;
    }
    it->up = (a->ifa_flags & IFF_UP) && (a->ifa_flags & IFF_RUNNING);
    it->loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
      char ip[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, ip, sizeof ip);
      int len = 32;
      if (a->ifa_netmask) {
        std::uint32_t m = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
        len = __builtin_popcount(m);
      }
      it->ipv4.push_back(fmt::format("{}/{}", ip, len));
    }
  }
  ::freeifaddrs(list);
  return out;
}

std::string format_probe_line(const std::string& host, const std::vector<Interface>& interfaces) {
  std::string line = fmt::format("{} {}", kLineTag, host);
  for (const auto& i : interfaces)
    line += fmt::format(" {}|{}|{}", i.name, i.loopback ? "loopback" : i.up ? "up" : "down", fmt::join(i.ipv4, ","));
  return line + "\n";
}

std::vector<NodeInterfaces> parse_probe_output(const std::string& text) {
  std::vector<NodeInterfaces> nodes;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string tag, host;
    words >> tag;
    if (tag != kLineTag) continue;
    if (!(words >> host))
      throw InputError(fmt::format("interface probe line '{}' : no host name; is every node running the same ringrun?",
                                   line));
    NodeInterfaces node{host, {}};
    for (std::string word; words >> word;) {
      auto bar1 = word.find('|');
      auto bar2 = bar1 == std::string::npos ? bar1 : word.find('|', bar1 + 1);
      if (bar2 == std::string::npos)
        throw InputError(fmt::format("interface probe line '{}' : '{}' is not NAME|STATE|ADDRS; is every node "
                                     "running the same ringrun?",
                                     line, word));
      Interface i;
      i.name = word.substr(0, bar1);
      std::string state = word.substr(bar1 + 1, bar2 - bar1 - 1);
      if (state != "up" && state != "down" && state != "loopback")
        throw InputError(fmt::format("interface probe line '{}' : state '{}' of {} is not up, down or loopback", line,
                                     state, i.name));
      i.up = state != "down";
      i.loopback = state == "loopback";
      std::stringstream addrs(word.substr(bar2 + 1));
      for (std::string a; std::getline(addrs, a, ',');)
        if (!a.empty()) i.ipv4.push_back(a);
      node.interfaces.push_back(std::move(i));
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

SharedChoice choose_shared_interface(const std::vector<NodeInterfaces>& nodes) {
  if (nodes.empty()) return {std::nullopt, "no node answered the interface probe"};
  // Candidates in the first node's order: usable there and on every other node.
  std::vector<std::string> candidates;
  for (const auto& i : nodes.front().interfaces) {
    bool ok = true;
    for (const auto& node : nodes) {
      const Interface* here = find(node, i.name);
      ok = ok && here && here->up && !here->loopback && !excluded_name(here->name) &&
           !routable_addresses(*here).empty();
    }
    if (ok) candidates.push_back(i.name);
  }
  const std::string count = nodes.size() == 1 ? "the 1 node" : fmt::format("all {} nodes", nodes.size());
  if (candidates.empty()) {
    std::vector<std::string> each;
    for (const auto& node : nodes) each.push_back(describe_node(node));
    return {std::nullopt, fmt::format("no interface is up with an IPv4 address on {} ({})", count,
                                      fmt::join(each, "; "))};
  }
  for (const auto& name : candidates)
    if (name.starts_with("ib"))
      return {name, fmt::format("InfiniBand (IPoIB) interface, up with an IPv4 address on {}", count)};
  for (const auto& name : candidates)
    if (auto subnet = common_subnet(nodes, name))
      return {name, fmt::format("up on {}, every node's address in one subnet {}", count, *subnet)};
  return {candidates.front(),
          fmt::format("up with an IPv4 address on {} (no shared interface puts every node in one subnet)", count)};
}

std::optional<std::string> local_ipv4_of(const std::string& name) {
  for (const auto& i : local_interfaces())
    if (i.name == name)
      for (const auto& a : i.ipv4)
        if (auto c = parse_cidr(a); c && routable(*c)) return a.substr(0, a.find('/'));
  return std::nullopt;
}

std::vector<std::string> probe_argv(const std::vector<std::string>& hosts, bool in_slurm, const std::string& self) {
  std::vector<std::string> argv;
  if (in_slurm) {
    argv = {"srun",
            fmt::format("--nodes={}", hosts.size()),
            fmt::format("--ntasks={}", hosts.size()),
            "--ntasks-per-node=1",
            fmt::format("--nodelist={}", fmt::join(hosts, ",")),
            "--kill-on-bad-exit=1",
            "--mpi=none"};
  } else {
    std::string slots;
    for (const auto& h : hosts) slots += (slots.empty() ? "" : ",") + h + ":1";
    argv = {"mpirun"};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"-np", std::to_string(hosts.size()), "-H", slots, "--map-by", "node", "--bind-to", "none"});
  }
  argv.insert(argv.end(), {self, "task", "--probe-interfaces"});
  return argv;
}

SharedChoice probe_shared_interface(const std::vector<std::string>& hosts, bool in_slurm, const Environment& env,
                                    bool verbose) {
  std::vector<std::string> argv = probe_argv(hosts, in_slurm, executable_path().string());
  std::optional<std::string> cache = in_slurm ? cache_path(hosts, env) : std::nullopt;
  std::string output;
  bool cached = false;
  if (cache) {
    std::ifstream in(*cache);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      output = text.str();
      cached = parse_probe_output(output).size() == hosts.size();
    }
  }
  if (!cached) {
    if (verbose) std::cerr << "ringrun: interface probe: " << shell_words(argv) << "\n";
    auto [rc, out] = run_capture(argv, env);
    if (rc != 0)
      throw LaunchError(fmt::format("ringrun: the network interface probe step ({}) exited with code {}; pass "
                                    "--network-interface NAME to skip it",
                                    argv.at(0), rc),
                        1);
    output = out;
  }
  std::vector<NodeInterfaces> nodes = parse_probe_output(output);
  if (nodes.size() != hosts.size())
    throw LaunchError(fmt::format("ringrun: the network interface probe answered for {} of {} hosts; pass "
                                  "--network-interface NAME to skip it",
                                  nodes.size(), hosts.size()),
                      1);
  // Earlier jobs' answers are pruned as it is written (kFactCacheBound).
  if (cache && !cached) store_cache_file(*cache, output);
  SharedChoice choice = choose_shared_interface(nodes);
  if (verbose) {
    if (cached) std::cerr << "ringrun: interface probe: this job's earlier answer from " << *cache << "\n";
  }
  if (!choice.name) {
    std::cerr << fmt::format("ringrun: warning: {}; NCCL and the runtime choose by themselves (name one with "
                             "--network-interface)\n",
                             choice.reason);
  }
  return choice;
}

}  // namespace ringrun::netprobe

// The renderings of doctor's checks: the PASS/WARN/FAIL rows with their fixes, --all-nodes'
// per-node tables with their closing summary, and the --report markdown. The JSON form is in
// doctor/json.cpp.
#include "doctor/checks.hpp"

#include <ringrun/environment_variables.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace ringrun::diagnostics {

// ---- renderings -------------------------------------------------------------------------------

namespace {
std::string render_rows(const std::vector<Check>& checks) {
  std::size_t width = 0;
  for (const auto& check : checks) width = std::max(width, check.name.size());
  std::string out;
  for (const auto& check : checks) {
    out += fmt::format("{}  {:<{}}  {}\n", to_string(check.status), check.name, width, check.detail);
    if (check.status != Status::pass && !check.fix.empty())
      out += fmt::format("      {:<{}}  fix: {}\n", "", width, check.fix);
  }
  return out;
}

std::string summary(const std::vector<Check>& checks) {
  int counts[3] = {0, 0, 0};
  for (const auto& check : checks) ++counts[static_cast<int>(check.status)];
  return fmt::format("{} checks: {} PASS, {} WARN, {} FAIL", checks.size(), counts[0], counts[1], counts[2]);
}
}  // namespace

std::string render_checks(const std::vector<Check>& checks) {
  return render_rows(checks) + "\nringrun doctor: " + summary(checks) + "\n";
}

// ---- --all-nodes ------------------------------------------------------------------------------

namespace {
// Hostname (from each node's "hostname" check) -> the nodes that report it, for names reported twice.
std::map<std::string, std::vector<std::string>> shared_hostnames(const std::vector<NodeChecks>& nodes) {
  std::map<std::string, std::vector<std::string>> nodes_by_hostname;
  for (const auto& node : nodes)
    for (const auto& check : node.checks)
      if (check.name == "hostname") nodes_by_hostname[check.detail].push_back(node.node);
  std::erase_if(nodes_by_hostname, [](const auto& entry) { return entry.second.size() < 2; });
  return nodes_by_hostname;
}
}  // namespace

bool any_node_failed(const std::vector<NodeChecks>& nodes) {
  return !shared_hostnames(nodes).empty() || std::any_of(nodes.begin(), nodes.end(), [](const NodeChecks& n) {
    return !n.error.empty() || any_failed(n.checks);
  });
}

std::string render_node_tables(const std::vector<NodeChecks>& nodes) {
  std::string out;
  std::vector<std::string> failing, warning;
  for (const auto& node : nodes) {
    out += fmt::format("== {} ==\n", node.node);
    if (!node.error.empty()) {
      out += fmt::format("FAIL  {}\n\n", node.error);
      failing.push_back(node.node);
      continue;
    }
    out += render_rows(node.checks);
    out += fmt::format("{}\n\n", summary(node.checks));
    if (any_failed(node.checks))
      failing.push_back(node.node);
    else if (std::any_of(node.checks.begin(), node.checks.end(),
                         [](const Check& c) { return c.status == Status::warn; }))
      warning.push_back(node.node);
  }
  auto shared = shared_hostnames(nodes);
  for (const auto& [hostname, names] : shared)
    out += fmt::format(
        "FAIL  nodes {} all report hostname '{}'\n      fix: give every node a unique hostname (ranks "
        "on nodes sharing a name are taken for one node)\n",
        join(names), hostname);
  if (failing.empty() && shared.empty())
    out += fmt::format("ringrun doctor --all-nodes: no FAIL on {} node(s){}\n", nodes.size(),
                       warning.empty() ? "" : "; WARN on " + join(warning));
  else if (failing.empty())
    out += "ringrun doctor --all-nodes: FAIL: nodes share a hostname\n";
  else
    out += fmt::format("ringrun doctor --all-nodes: FAIL on {}{}\n", join(failing),
                       shared.empty() ? "" : "; nodes share a hostname");
  return out;
}

// ---- report -----------------------------------------------------------------------------------

bool is_secret_name(std::string_view name) {
  std::string upper(name);
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* word : {"SECRET", "TOKEN", "PASSWORD", "KEY"})
    if (upper.find(word) != std::string::npos) return true;
  return false;
}

bool is_reported_variable(std::string_view name) {
  using namespace std::string_view_literals;
  for (std::string_view prefix : {variables::kPrefix, "SLURM_"sv, "NCCL_"sv, "CUDA_"sv, "OMPI_"sv, "PMIX_"sv})
    if (name.substr(0, prefix.size()) == prefix) return true;
  return false;
}

std::string render_report(const ReportFacts& facts) {
  std::string out = "### ringrun environment report\n\n";
  out +=
      fmt::format("- ringrun: {}\n- OS: {}\n- Kernel: {}\n- CPU: {}\n- hwloc: {}\n- NCCL: {}\n- CUDA driver: {}\n",
                  facts.ringrun_version, facts.os, facts.kernel, facts.cpu, facts.hwloc, facts.nccl, facts.cuda_driver);
  out += "\nEnvironment (RINGRUN_*, SLURM_*, NCCL_*, CUDA_*, OMPI_*, PMIX_*; secrets redacted):\n\n```\n";
  int listed = 0;
  for (const auto& [name, value] : facts.env) {
    if (!is_reported_variable(name)) continue;
    out += fmt::format("{}={}\n", name, is_secret_name(name) ? "<redacted>" : value);
    ++listed;
  }
  if (listed == 0) out += "(none set)\n";
  return out + "```\n";
}

}  // namespace ringrun::diagnostics

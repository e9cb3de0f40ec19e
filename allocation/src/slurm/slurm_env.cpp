// The allocation of the job this process runs in, read from the SLURM_* variables that sbatch,
// salloc and srun export (recorded examples: tests/data/slurm/*.env).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "ringrun/variable_read.hpp"
#include "ringrun/slurm.hpp"

namespace ringrun {
namespace {

const std::string* find(const Environment& env, std::string_view name) {
  const auto it = env.find(std::string(name));
  return it == env.end() ? nullptr : &it->second;
}

// The first of `names` that is set: {name, value}.
std::optional<std::pair<std::string_view, std::string>> first_set(const Environment& env,
                                                                 std::initializer_list<std::string_view> names) {
  for (auto name : names)
    if (const auto* v = find(env, name)) return std::pair{name, *v};
  return std::nullopt;
}

int parse_count(std::string_view name, const std::string& value) {
  int n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc{} || end != value.data() + value.size() || n < 0)
    throw InputError(fmt::format("{}='{}' : expected a non-negative number", name, value));
  return n;
}

// A GPU id list as Slurm writes it ("0,1,2,3"; UUIDs for MIG devices). "NoDevFiles" (no device
// files configured) and empty mean none.
std::vector<std::string> split_ids(std::string_view text) {
  std::vector<std::string> ids;
  if (text == "NoDevFiles") return ids;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == text.npos ? text.npos : comma - start);
    if (!item.empty()) ids.emplace_back(item);
    if (comma == text.npos) break;
    start = comma + 1;
  }
  return ids;
}

// More GPUs than this on one node is a malformed value, not a machine (the largest nodes have 16).
constexpr long long kMaxGpusPerNode = 4096;

// The ids 0..n-1 of n GPUs counted by `what` (a one-line description for the error).
std::vector<std::string> count_ids(long long n, std::string_view what) {
  if (n > kMaxGpusPerNode)
    throw InputError(fmt::format("{} : {} GPUs on one node; more than {} is not a real node", what, n, kMaxGpusPerNode));
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(std::to_string(i));
  return ids;
}

// The GPU count of SLURM_GPUS_PER_NODE / SLURM_GPUS_PER_TASK: "4", "gpu:4", "a100:4",
// "gpu:a100:4"; the first entry when there are several ("a100:2,v100:1" names types, not nodes).
std::optional<int> gres_count(std::string_view name, const std::string& value) {
  std::string_view first = value;
  if (const auto comma = first.find(','); comma != first.npos) first = first.substr(0, comma);
  if (const auto colon = first.rfind(':'); colon != first.npos) first = first.substr(colon + 1);
  int n = 0;
  const auto [end, ec] = std::from_chars(first.data(), first.data() + first.size(), n);
  if (ec != std::errc{} || end != first.data() + first.size() || n < 0)
    throw InputError(fmt::format("{}='{}' : expected a GPU count like 4 or gpu:4", name, value));
  return n;
}

}  // namespace

std::size_t max_hostlist_names(const Environment& env) {
  return static_cast<std::size_t>(*variables::read_integer(variables::kMaxHostlist, &env));
}

namespace {

// The allocation's hosts and their task slots from the node list and the task counts.
void add_slurm_hosts(const Environment& env, Allocation& alloc) {
  // Inside a step the step's nodes and tasks are what this process may use (a step may cover part
  // of the job); the pair is taken together so the two lists always describe the same nodes.
  std::optional<std::pair<std::string_view, std::string>> nodes, counts;
  if (alloc.inside_step) {
    nodes = first_set(env, {"SLURM_STEP_NODELIST"});
    counts = first_set(env, {"SLURM_STEP_TASKS_PER_NODE"});
    if (!nodes || !counts) {
      nodes.reset();
      counts.reset();
    }
  }
  if (!nodes) {
    nodes = first_set(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
    counts = first_set(env, {"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"});
  }
  if (!nodes)
    throw InputError(fmt::format("SLURM_JOB_ID={} is set but SLURM_JOB_NODELIST is not; "
                                 "run inside sbatch/salloc/srun or unset SLURM_JOB_ID",
                                 *alloc.job_id));
  if (!counts)
    throw InputError(fmt::format("SLURM_JOB_ID={} is set but neither SLURM_TASKS_PER_NODE nor "
                                 "SLURM_JOB_CPUS_PER_NODE is; run inside sbatch/salloc/srun",
                                 *alloc.job_id));

  const std::size_t limit = max_hostlist_names(env);
  const auto names = expand_hostlist(nodes->second, limit, nodes->first);
  const auto slots = expand_task_counts(counts->second, counts->first, limit);
  if (names.size() != slots.size())
    throw InputError(fmt::format("{}='{}' names {} hosts but {}='{}' gives {} counts; they must match",
                                 nodes->first, nodes->second, names.size(), counts->first,
                                 counts->second, slots.size()));
  // The node count Slurm states must agree with the list it gave.
  for (auto count_name : {alloc.inside_step && nodes->first == "SLURM_STEP_NODELIST" ? "SLURM_STEP_NUM_NODES"
                                                                                      : "SLURM_JOB_NUM_NODES"}) {
    if (const auto* v = find(env, count_name)) {
      if (static_cast<std::size_t>(parse_count(count_name, *v)) != names.size())
        throw InputError(fmt::format("{}='{}' names {} hosts but {}={}; they must match", nodes->first,
                                     nodes->second, names.size(), count_name, *v));
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) alloc.hosts.push_back({names[i], slots[i], {}});
}

// The GPU ids of every host, as far as the environment says.
void add_slurm_gpus(const Environment& env, Allocation& alloc) {
  // GPUs of this node. The step's and the job's lists are Slurm's global ids of the node's GPUs
  // for the whole step or job, the same in every task; CUDA_VISIBLE_DEVICES can be narrowed to one
  // task (--gpu-bind) or renumbered (ConstrainDevices), so it only counts when Slurm's are absent.
  std::optional<std::vector<std::string>> local_gpus;
  if (const auto g = first_set(env, {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"}))
    local_gpus = split_ids(g->second);
  else if (const auto* n = find(env, "SLURM_GPUS_ON_NODE"))
    local_gpus = count_ids(parse_count("SLURM_GPUS_ON_NODE", *n), fmt::format("SLURM_GPUS_ON_NODE='{}'", *n));

  // Which host this process is on: SLURMD_NODENAME (unset in an salloc shell, which runs on the
  // submit host); a one-host allocation needs no name.
  std::optional<std::size_t> local;
  if (const auto* me = find(env, "SLURMD_NODENAME")) {
    const auto it = std::find_if(alloc.hosts.begin(), alloc.hosts.end(), [&](const HostSlots& h) { return h.name == *me; });
    if (it != alloc.hosts.end()) local = static_cast<std::size_t>(it - alloc.hosts.begin());
  }
  if (!local && alloc.hosts.size() == 1) local = 0;
  if (local && local_gpus) alloc.hosts[*local].gpus = *local_gpus;

  // Other hosts: only a per-node (or per-task) request says what they hold. When the count equals
  // this node's, assume the same ids (identical idle nodes allocate alike); otherwise 0..n-1.
  std::optional<int> per_node, per_task;
  if (const auto* v = find(env, "SLURM_GPUS_PER_NODE")) per_node = gres_count("SLURM_GPUS_PER_NODE", *v);
  if (const auto* v = find(env, "SLURM_GPUS_PER_TASK")) per_task = gres_count("SLURM_GPUS_PER_TASK", *v);
  for (std::size_t i = 0; i < alloc.hosts.size(); ++i) {
    if (local && i == *local && local_gpus) continue;
    // 64-bit: a per-task count times a node's tasks can exceed an int.
    std::optional<long long> n = per_node;
    if (!n && per_task) n = static_cast<long long>(*per_task) * alloc.hosts[i].slots;
    if (!n) continue;
    if (local_gpus && static_cast<long long>(local_gpus->size()) == *n)
      alloc.hosts[i].gpus = *local_gpus;
    else
      alloc.hosts[i].gpus = count_ids(*n, fmt::format("host {}: SLURM_GPUS_PER_{}", alloc.hosts[i].name,
                                                      per_node ? "NODE" : "TASK x tasks"));
  }
}

}  // namespace

std::optional<Allocation> allocation_from_slurm_env(const Environment& env) {
  const auto job = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job) return std::nullopt;

  Allocation alloc;
  alloc.source = AllocationSource::slurm_env;
  alloc.explicit_slots = true;
  alloc.job_id = job->second;
  alloc.inside_step = find(env, "SLURM_STEP_ID") || find(env, "SLURM_STEPID");
  add_slurm_hosts(env, alloc);
  if (const auto* v = find(env, "SLURM_NTASKS")) alloc.ntasks = parse_count("SLURM_NTASKS", *v);
  else if (const auto* np = find(env, "SLURM_NPROCS")) alloc.ntasks = parse_count("SLURM_NPROCS", *np);
  add_slurm_gpus(env, alloc);
  return alloc;
}

int default_num_ranks(const Allocation& allocation) {
  if (allocation.ntasks && *allocation.ntasks > 0) return *allocation.ntasks;
  long long gpus = 0;  // saturates at INT_MAX, like total_slots()
  for (const auto& h : allocation.hosts)
    gpus = std::min<long long>(gpus + static_cast<long long>(h.gpus.size()), std::numeric_limits<int>::max());
  if (gpus > 0) return static_cast<int>(gpus);
  return static_cast<int>(allocation.hosts.size());
}

std::vector<std::string> parse_srun_mpi_list(std::string_view output) {
  // Every line after the heading is a plugin name, possibly indented or prefixed "srun: "; lines
  // with spaces are headings or messages.
  std::vector<std::string> names;
  auto add = [&](std::string_view word) {
    while (!word.empty() && (word.back() == ',' || std::isspace(static_cast<unsigned char>(word.back()))))
      word.remove_suffix(1);
    if (word.empty()) return;
    for (char c : word)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return;
    if (std::find(names.begin(), names.end(), word) == names.end()) names.emplace_back(word);
  };
  std::size_t start = 0;
  while (start < output.size()) {
    auto end = output.find('\n', start);
    if (end == output.npos) end = output.size();
    std::string_view line = output.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("srun: ")) line.remove_prefix(6);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    if (line.empty()) continue;
    if (const auto colon = line.find(':'); colon != line.npos) {
      // "specific pmix plugin versions available: pmix_v4" lists names after its colon; any
      // other line with a colon is a message ("error: ..."), not a name.
      if (line.find("versions available") == line.npos) continue;
      std::string_view tail = line.substr(colon + 1);
      std::size_t p = 0;
      while (p < tail.size()) {
        while (p < tail.size() && (tail[p] == ' ' || tail[p] == ',' || tail[p] == '\t')) ++p;
        std::size_t q = p;
        while (q < tail.size() && tail[q] != ' ' && tail[q] != ',' && tail[q] != '\t') ++q;
        if (q > p) add(tail.substr(p, q - p));
        p = q;
      }
      continue;
    }
    if (line.find(' ') != line.npos) continue;  // "MPI plugin types are..."
    add(line);
  }
  return names;
}

}  // namespace ringrun

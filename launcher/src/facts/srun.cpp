#include "facts/srun.hpp"

#include "common/subprocess.hpp"
#include "facts/cache.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <chrono>
#include <optional>

namespace ringrun {
namespace {

constexpr int kScontrolTimeoutS = 10;

std::string value_of(const Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

bool plugin_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// A TaskPlugin value: plugin types separated by commas ("task/affinity,task/cgroup").
bool task_plugin_value(const std::string& s) {
  if (s.empty() || s.size() > 256) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '/' ||
          c == ',' || c == '-'))
      return false;
  return true;
}

// The lines of one fact about this cluster (`fact` names it in the key, `file` in the file
// name): the cached copy when every line passes `valid`, else ask(), stored when non-empty.
std::vector<std::string> cached_lines(const Environment& env, const std::string& fact, const std::string& file,
                                      bool (*valid)(const std::string&),
                                      const std::function<std::vector<std::string>()>& ask) {
  auto srun_id = file_identity(find_in_path("srun", search_path(env)).value_or(""));
  if (!srun_id) return ask();
  const std::string conf = value_of(env, "SLURM_CONF");
  // The facts come from slurm.conf and srun's build: a new srun or an edited configuration is
  // another key.
  const std::string key = fmt::format("ringrun {} v1\ncluster {}\nconf {}\nsrun {}", fact,
                                      value_of(env, "SLURM_CLUSTER_NAME"), file_identity(conf).value_or(conf), *srun_id);
  return cached_fact_lines(key, file, valid, ask);
}

// The stdout of `exe args...` run with env (no shell; stdin and stderr on /dev/null, so a
// failing scontrol adds no line to the job's output); nullopt when it fails or outlasts timeout_s.
std::optional<std::string> capture_stdout(const std::string& exe, const std::vector<std::string>& args,
                                          const Environment& env, int timeout_s) {
  std::vector<std::string> argv{exe};
  argv.insert(argv.end(), args.begin(), args.end());
  auto result = run_program({exe, std::move(argv), env, std::chrono::seconds(timeout_s), ErrorOutput::discarded});
  if (!result || result->exit_code() != 0) return std::nullopt;
  return std::move(result->output);
}

std::string ask_task_plugin(const Environment& env) {
  const std::string conf = value_of(env, "SLURM_CONF");
  if (::access(conf.empty() ? "/etc/slurm/slurm.conf" : conf.c_str(), R_OK) != 0) return {};
  const std::string scontrol = find_in_path("scontrol", search_path(env)).value_or("");
  if (scontrol.empty()) return {};
  auto out = capture_stdout(scontrol, {"show", "config"}, env, kScontrolTimeoutS);
  return out ? parse_task_plugin(*out) : std::string();
}

}  // namespace

std::vector<std::string> cached_srun_mpi_plugins(const Environment& env,
                                                 const std::function<std::vector<std::string>()>& ask) {
  return cached_lines(env, "srun --mpi=list", "srun-mpi-list", plugin_name, ask);
}

std::string cached_slurm_task_plugin(const Environment& env) {
  auto lines = cached_lines(env, "scontrol TaskPlugin", "slurm-task-plugin", task_plugin_value, [&env] {
    std::string plugin = ask_task_plugin(env);
    return plugin.empty() ? std::vector<std::string>{} : std::vector<std::string>{plugin};
  });
  return lines.size() == 1 && task_plugin_value(lines.front()) ? lines.front() : std::string();
}

std::string parse_task_plugin(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r";
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == text.npos ? std::string_view() : text.substr(end + 1);
    const auto eq = line.find('=');
    if (eq == line.npos) continue;
    std::string_view name = line.substr(0, eq), value = line.substr(eq + 1);
    name = name.substr(0, name.find_last_not_of(kSpace) + 1);
    if (name != "TaskPlugin") continue;  // not TaskPluginParam
    const auto first = value.find_first_not_of(kSpace);
    if (first == value.npos) return {};
    value = value.substr(first);
    return std::string(value.substr(0, value.find_last_not_of(kSpace) + 1));
  }
  return {};
}

bool srun_offers_cpu_bind(const std::string& task_plugin) { return task_plugin != "task/none"; }

}  // namespace ringrun

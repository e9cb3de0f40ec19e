// slurm_probe: prints the Allocation the slurm/ library reads, for the cluster test to compare
// with what Slurm really gave.
//   slurm_probe env        from this process's SLURM_* variables (run it as an srun task)
//   slurm_probe job ID     from slurmctld through libslurm (run it on the submit host)
// Output, one line: "job=ID step=0|1 ntasks=N|- default=N hosts=NAME:SLOTS:GPU,GPU NAME:..."
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <string>

#include "ringrun/slurm.hpp"

extern char** environ;

int main(int argc, char** argv) {
  try {
    std::optional<ringrun::Allocation> a;
    if (argc == 2 && std::strcmp(argv[1], "env") == 0) {
      ringrun::Environment env;
      for (char** e = environ; *e; ++e) {
        const std::string kv(*e);
        const auto eq = kv.find('=');
        if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
      a = ringrun::allocation_from_slurm_env(env);
      if (!a) {
        fmt::print(stderr, "slurm_probe: not inside a Slurm job\n");
        return 1;
      }
    } else if (argc == 3 && std::strcmp(argv[1], "job") == 0) {
      a = ringrun::allocation_from_job(argv[2]);
    } else {
      fmt::print(stderr, "usage: slurm_probe env | slurm_probe job ID\n");
      return 2;
    }
    std::string hosts;
    for (const auto& h : a->hosts) hosts += fmt::format(" {}:{}:{}", h.name, h.slots, fmt::join(h.gpus, ","));
    fmt::print("job={} step={} ntasks={} default={} hosts={}\n", a->job_id.value_or("-"), a->inside_step ? 1 : 0,
               a->ntasks ? std::to_string(*a->ntasks) : "-", ringrun::default_num_ranks(*a), hosts.substr(1));
    return 0;
  } catch (const ringrun::InputError& e) {
    fmt::print(stderr, "slurm_probe: {}\n", e.what());
    return 1;
  }
}

// A Kubernetes pod's job contract as this pod has it (facts/pod_job.hpp).
#include "facts/pod_job.hpp"

#include <fmt/format.h>

#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ringrun {

PodJob pod_job(const Environment& env, bool hosts_named) {
  PodJob job;
  if (hosts_named || env.count("SLURM_JOB_ID") || env.count("SLURM_JOBID")) return job;
  job.mpijob = mpijob_contract(env, [](const std::string& path) { return ::access(path.c_str(), R_OK) == 0; });
  if (!job.mpijob) job.pod = pod_contract(env);
  return job;
}

Allocation read_mpijob_hostfile(const MpiJobContract& contract) {
  std::ifstream in(contract.hostfile);
  if (!in)
    throw InputError(fmt::format("MPIJob hostfile '{}' ({}) : cannot read it: {}; is the operator's ConfigMap "
                                 "mounted at /etc/mpi?",
                                 contract.hostfile, contract.named_by, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return parse_mpijob_hostfile(text.str(), contract);
}

bool host_resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found) ::freeaddrinfo(found);
  return rc == 0;
}

}  // namespace ringrun

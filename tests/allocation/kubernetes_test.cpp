// The Kubernetes job contracts (ringrun/kubernetes.hpp): an MPIJob launcher pod's hostfile and
// variables, as the MPI Operator (kubeflow.org/v2beta1) writes them, and a per-pod job's PET_*.
#include <doctest/doctest.h>

#include "ringrun/kubernetes.hpp"

#include <set>

using namespace ringrun;

namespace {

auto files(std::set<std::string> present) {
  return [present = std::move(present)](const std::string& path) { return present.count(path) > 0; };
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("an MPIJob launcher pod is detected from its role or from a hostfile an MPI variable names") {
  CHECK_FALSE(mpijob_contract({}, files({})));
  CHECK_FALSE(mpijob_contract({{"K_MPI_JOB_ROLE", "worker"}}, files({"/etc/mpi/hostfile"})));
  auto by_role = mpijob_contract({{"K_MPI_JOB_ROLE", "launcher"}}, files({}));
  REQUIRE(by_role);
  CHECK(by_role->hostfile == "/etc/mpi/hostfile");
  CHECK(by_role->named_by == "K_MPI_JOB_ROLE=launcher");
  CHECK(by_role->discovery_script == "/etc/mpi/discover_hosts.sh");
  CHECK(by_role->default_slots == 1);
  // Open MPI 5's variable, and one that names a file that is not there (not an MPIJob).
  auto prte = mpijob_contract({{"PRTE_MCA_prte_default_hostfile", "/x/hosts"}}, files({"/x/hosts"}));
  REQUIRE(prte);
  CHECK(prte->named_by == "PRTE_MCA_prte_default_hostfile=/x/hosts");
  CHECK(prte->discovery_script == "/x/discover_hosts.sh");
  CHECK_FALSE(mpijob_contract({{"HYDRA_HOST_FILE", "/nowhere"}}, files({})));
  // The operator's own variables for Open MPI: the orte_ names, slots from slotsPerWorker.
  auto ompi = mpijob_contract({{"K_MPI_JOB_ROLE", "launcher"},
                               {"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"},
                               {"OMPI_MCA_orte_set_default_slots", "2"}},
                              files({"/etc/mpi/hostfile"}));
  REQUIRE(ompi);
  CHECK(ompi->default_slots == 2);
  CHECK(ompi->named_by == "OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile");
  auto intel = mpijob_contract({{"I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile"}, {"I_MPI_PERHOST", "4"}},
                               files({"/etc/mpi/hostfile"}));
  REQUIRE(intel);
  CHECK(intel->default_slots == 4);
  CHECK(error_of([] {
          mpijob_contract({{"K_MPI_JOB_ROLE", "launcher"}, {"OMPI_MCA_orte_set_default_slots", "two"}}, files({}));
        }) == "OMPI_MCA_orte_set_default_slots='two' : the slots of a hostfile line without any must be a positive "
              "number; set the MPIJob's slotsPerWorker");
}

TEST_CASE("an MPIJob hostfile reads Open MPI's and MPICH's lines; a bad line is named with the fix") {
  MpiJobContract c{"/etc/mpi/hostfile", "K_MPI_JOB_ROLE=launcher", 2, "/etc/mpi/discover_hosts.sh"};
  Allocation a = parse_mpijob_hostfile("job-worker-0.job.default.svc slots=2\n"
                                       "job-worker-1.job.default.svc:3\n"
                                       "job-worker-2.job.default.svc\n",
                                       c);
  CHECK(a.source == AllocationSource::mpijob);
  CHECK(a.explicit_slots);
  REQUIRE(a.hosts.size() == 3);
  CHECK(a.hosts[0].name == "job-worker-0.job.default.svc");
  CHECK(a.hosts[0].slots == 2);
  CHECK(a.hosts[1].name == "job-worker-1.job.default.svc");
  CHECK(a.hosts[1].slots == 3);
  CHECK(a.hosts[2].slots == 2);  // the contract's default
  CHECK(error_of([&] { parse_mpijob_hostfile("w0 slots=2\nw1:x\n", c); }) ==
        "hostfile '/etc/mpi/hostfile' line 2: 'x' is not a positive slot count (write 'host:N' or 'host slots=N')");
  CHECK(error_of([&] { parse_mpijob_hostfile("# the operator has not written it yet\n", c); }) ==
        "hostfile '/etc/mpi/hostfile' lists no hosts (write one 'host slots=N' line per host)");
}

TEST_CASE("a per-pod job reads torchrun's PET_* variables as Trainer's torch runtime sets them") {
  CHECK_FALSE(pod_contract({}));
  const Environment env = {{"PET_NNODES", "3"},
                           {"PET_NPROC_PER_NODE", "2"},
                           {"PET_NODE_RANK", "1"},
                           {"PET_MASTER_ADDR", "job-node-0-0.job"},
                           {"PET_MASTER_PORT", "29400"}};
  auto c = pod_contract(env);
  REQUIRE(c);
  CHECK(c->nnodes == 3);
  CHECK(c->node_rank == 1);
  CHECK(c->nproc_per_node == 2);
  CHECK(c->master_addr == "job-node-0-0.job");
  CHECK(c->master_port == 29400);
  Allocation a = pod_allocation(*c, 2, "job-node-0-1");
  CHECK(a.source == AllocationSource::pod);
  REQUIRE(a.hosts.size() == 3);
  CHECK(a.hosts[1].name == "job-node-0-1");
  CHECK(a.hosts[0].name == "pod-0");
  CHECK(a.total_slots() == 6);

  Environment indexed = env;  // an Indexed Job: the completion index is the node rank
  indexed.erase("PET_NODE_RANK");
  indexed["JOB_COMPLETION_INDEX"] = "2";
  indexed["PET_NPROC_PER_NODE"] = "auto";
  c = pod_contract(indexed);
  REQUIRE(c);
  CHECK(c->node_rank == 2);
  CHECK_FALSE(c->nproc_per_node);

  Environment bad = env;
  bad["PET_NODE_RANK"] = "3";
  CHECK(error_of([&] { pod_contract(bad); }) ==
        "PET_NODE_RANK='3' : this pod's index among PET_NNODES must be a whole number from 0 to 2");
  bad = env;
  bad["PET_NNODES"] = "1:4";
  CHECK(error_of([&] { pod_contract(bad); }).starts_with("PET_NNODES='1:4' : a range of pods is elastic torchrun's"));
  bad = env;
  bad.erase("PET_MASTER_PORT");
  CHECK(error_of([&] { pod_contract(bad); }).starts_with("PET_NNODES=3 but PET_MASTER_PORT is not set"));
  bad = env;
  bad.erase("PET_NODE_RANK");
  CHECK(error_of([&] { pod_contract(bad); }).starts_with("PET_NNODES=3 but neither PET_NODE_RANK nor"));
}

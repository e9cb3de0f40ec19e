// Elastic mode's supervisor (the launcher's side; README, Elastic training): the effects of
// elastic/coordinator.hpp's decisions on this host. It starts one process per slot of the first
// world, watches exits through its signalfd, polls the job's own store for reset requests and leave
// keys every 20 ms, runs --host-discovery-script every second (elastic/discovery.hpp), publishes
// each world there, starts the processes a world adds, stops those it ends and those removed that
// outstay their --grace-period. Output is tagged [ID] (the process's id, which equals its rank in
// world 0) like supervise()'s.
#pragma once

#include "elastic/coordinator.hpp"

#include <ringrun/supervisor.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ringrun {

// Where the job's store listens (ringrun's own store::Server) and its secret.
struct ElasticStoreAddress {
  std::string host;
  std::uint16_t port = 0;
  std::string secret;
};

// Each process started gets the environment of its slot's ProcessSpec (the local backend's, slot
// i = the plan's rank i) with the rank's identity variables, RINGRUN_SIZE and WORLD_SIZE replaced
// for the world it is started for, plus RINGRUN_ELASTIC_ID, RINGRUN_ELASTIC_EPOCH and
// RINGRUN_ELASTIC_TIMEOUT. Returns the job's exit status: 0 when it finished, 1 when it ended for
// --min-np or --reset-limit, the last failure's status when no rank was left, 128+signal when
// ringrun was interrupted. Throws LaunchError when a process cannot be started (nothing is left
// running then).
//
// `added_host`: the processes of a node the job gains (AddHost), one per slot, numbered on from
// the slots before; empty when the job cannot grow onto new nodes.
using AddedHostSlots = std::function<std::vector<ProcessSpec>(const std::string& host, int slots, int first_slot)>;
int run_elastic(std::vector<ProcessSpec> slots, const ElasticConfig& config, const SupervisorOptions& options,
                const ElasticStoreAddress& store, AddedHostSlots added_host = {});

}  // namespace ringrun

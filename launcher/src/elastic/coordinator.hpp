// Elastic mode's decisions (the launcher's side; README, Elastic training): which processes form
// each world, when a new world is published, which processes start or stop, and when and how the
// job ends. Pure like elastic/hosts.hpp: events come in with the time, actions go out, and the
// supervisor (elastic/job.cpp) is the only part that runs processes or touches the store.
//
// A member is one process, named by an id that is never reused; it keeps the slot it was started
// in for its life. World e is published once as ringrun/elastic/<e>/world (elastic_wire.hpp):
// rank r of it is its r-th id. Failed slots are blacklisted one by one (key "<host>#<slot>"):
// without --blacklist-cooldown-range never refilled (the world shrinks), with it refilled by a new
// process once the cooldown ends.
#pragma once

#include "elastic/hosts.hpp"

#include <ringrun/elastic_wire.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace ringrun {

// How long a reset request that changes nothing waits before it is answered by republishing the
// same members: a peer sees a death on its socket before ringrun reaps the process (the socket
// closes early in the kernel's exit, SIGCHLD comes last), and the death should make the new world
// (one reset per failure). A process started through mpirun is reaped once mpirun has noticed and
// torn its job down, which took over 1 s in the test cluster: ElasticConfig::reset_settle_s, 3 s.
inline constexpr std::chrono::milliseconds kResetSettle{200};
inline constexpr std::chrono::seconds kMpirunResetSettle{3};

struct ElasticConfig {
  // The plan's hosts in its order, each with the ranks the plan gave it: slot i of host h is the
  // plan's rank (the slots of the hosts before h) + i. One host for a job on this host; the
  // allocation's nodes inside SLURM.
  std::vector<HostSlots> hosts;
  int start_np = 0;                      // the first world's ranks, the hosts' slots in order (0: all)
  // Each host's slots in the first world, when the plan holds more than are on offer at the start
  // (a discovery script's hosts of this machine are planned for every slot they may grow to);
  // empty: start_np of the hosts' slots in order.
  std::vector<int> start_offered;
  int min_np = 1;                        // --min-np
  std::optional<int> max_np;             // --max-np
  std::optional<int> reset_limit;        // --reset-limit
  std::optional<CooldownRange> cooldown; // --blacklist-cooldown-range
  // A failure blacklists the failed process's host, as in Horovod (hosts the user named: -H,
  // --hostfile, a discovery script); false: only its slot (this host's -np slots, a SLURM
  // allocation's nodes, where a node that dies takes its processes with it anyway).
  bool blacklist_hosts = false;
  // A blacklisted host the discovery script stops printing is forgiven: when it is printed again it
  // is another machine under the name (an MPIJob's worker pod deleted and recreated; README, On
  // Kubernetes). Horovod's hosts stay blacklisted.
  bool replaced_hosts_return = false;
  double elastic_timeout_s = 600;        // --elastic-timeout
  // RINGRUN_ELASTIC_TIMEOUT, each process's wait for a world and its members' addresses: a member
  // that starts for a world takes a start's time to arrive, so at least --start-timeout.
  double rank_timeout_s = 600;
  double grace_period_s = 10;            // --grace-period: how long the others may finish after a success
  double reset_settle_s = std::chrono::duration<double>(kResetSettle).count();  // kMpirunResetSettle through mpirun
  std::uint64_t seed = 0;                // the cooldowns' jitter
  // --host-discovery-script (empty: none): the slots on offer follow its runs (on_discovery),
  // at most the plan's slots of each host; its first run (launch.cpp's, which sized the plan)
  // offered start_np or more.
  std::string discovery_script;
  int slots_per_host = 0;                // --slots-per-host (0: not given)
  double discovery_interval_s = DiscoveryPollPolicy::kIntervalSeconds;  // --discovery-interval
  std::string self;                      // gethostname: which names the script prints are this host
  // The script is ringrun's own query of the SLURM job's nodes: one name per line, then `---` and
  // the drained ones. A node listed and not drained offers all of its plan's slots; it is named
  // "the job's node list" in notices.
  bool allocation_discovery = false;
  // With allocation_discovery: the slots of a node the job gains (Slurm's job expansion), each
  // node as many as the plan's first host; 0: such nodes are ignored.
  int new_host_slots = 0;
  // With a user's script on a job started through mpirun: a host it prints that the plan lacks
  // joins the job with the slots printed (each process there an mpirun of its own); false (a job
  // on this host's local launcher): such hosts are ignored, said once, unless they name this
  // machine (local_host_slots).
  bool adds_printed_hosts = false;
  // A job on this machine's local launcher: a name of this machine the script prints later
  // (127.0.0.1 beside localhost) joins as a host of its own with this many planned slots; 0: none.
  int local_host_slots = 0;

  // Every host's slots: the most ranks a world can have.
  int capacity() const;
};

// Write world_key(world.epoch) and latest_key(), then print `line` (when not empty) on stderr.
struct PublishWorld {
  store::elastic::PublishedWorld world;
  std::string line;
};
// Start a process for `epoch` in `slot`, with `identity` and `world_size` in its environment.
struct SpawnMember {
  std::uint64_t id = 0;
  SlotRef slot;
  int epoch = 0;
  RankIdentity identity;
  int world_size = 0;
};
// SIGTERM the process, SIGKILL it after --grace-period.
struct TerminateMember {
  std::uint64_t id = 0;
};
// The process is not in the newest world (its slot is no longer offered): it learns that at its
// next commit, resets, gets RINGRUN_ERR_REMOVED and exits. One that has not exited after
// --grace-period is terminated (TerminateMember's SIGTERM, then SIGKILL).
struct RetireMember {
  std::uint64_t id = 0;
};
// Print `line` on stderr (a discovery run failed, a host was ignored); nothing else changes.
struct Notice {
  std::string line;
};
// Rank `rank` of world `epoch` is gone: write kTombstone into its address key if it is unset, so
// that whoever waits for that address stops waiting (a dead process can no longer write it).
struct TombstoneAddress {
  int epoch = 0;
  int rank = 0;
};
// World `epoch` (of `size` ranks) is superseded by a newer one or the end: write kTombstone into
// each of its address keys still unset. A member that joined it before the newer world was
// published waits in its exchange for members that went straight to the newer one; a mark makes
// it reset and move on.
struct AbandonWorld {
  int epoch = 0;
  int size = 0;
};
// A node the job gained (not in the plan) is host `name` with `slots` slots from now on, after the
// plan's hosts and those added before: make its slots startable before a SpawnMember names them.
struct AddHost {
  std::string name;
  int slots = 0;
};
// The job ends with `status`: print `line` (when not empty), let the members still running exit
// (terminations come as their own actions), then return `status`.
struct EndJob {
  int status = 0;
  std::string line;
};
using ElasticAction =
    std::variant<PublishWorld, SpawnMember, TerminateMember, RetireMember, Notice, TombstoneAddress, AbandonWorld,
                 AddHost, EndJob>;
using ElasticActions = std::vector<ElasticAction>;


class ElasticCoordinator {
 public:
  // Throws std::invalid_argument for a configuration the command line cannot produce.
  explicit ElasticCoordinator(ElasticConfig config);

  // The first world: ids 0..slots-1 as ranks 0..slots-1 (epoch 0).
  ElasticActions start(SteadyTime now);
  // Member `id` ended with `wait_status` (waitpid's); `leave_posted`: its leave key was set.
  // `lost` (not empty): it failed whatever its status said, for this reason ("lost its node ...").
  ElasticActions on_exit(std::uint64_t id, int wait_status, bool leave_posted, SteadyTime now,
                         std::string_view lost = {});
  // A member of world `epoch` posted its reset key; `leaving`: the members of the newest world
  // whose leave key is set; `failing`: those whose failed key is set (ringrun_elastic_fail), each a
  // failure now, as its exit would be later (which then changes nothing). Requests for any but the
  // newest world are stale and ignored.
  ElasticActions on_reset_request(int epoch, const std::vector<std::uint64_t>& leaving,
                                  const std::vector<std::uint64_t>& failing, SteadyTime now);
  // Time passed: cooldowns that ended, the wait for --min-np, the finishing deadline, a settled reset.
  ElasticActions on_tick(SteadyTime now);
  // ringrun itself was interrupted (SIGINT/SIGTERM/SIGHUP): publish the end so that ranks waiting
  // for a world stop waiting; the supervisor stops the processes and reports.
  ElasticActions on_interrupt(const std::string& reason);
  // A run of --host-discovery-script ended at `now`. Its first run was launch.cpp's (start()
  // counts it); a later failure or bad output keeps the slots on offer (warned once per run of
  // failures), a host that is not one of the plan's joins (adds_printed_hosts, new_host_slots) or
  // is ignored (said once). More or fewer slots of a host than on offer re-form the world:
  // processes start in new slots, those in slots no longer offered (highest first) are retired,
  // below --min-np the job waits --elastic-timeout.
  ElasticActions on_discovery(const DiscoveryResult& result, SteadyTime now);
  // When the script is due to run again; nullopt without one, or once the job's end is decided.
  std::optional<SteadyTime> next_discovery() const;

  // The earliest time on_tick has something to do; nullopt when nothing is pending.
  std::optional<SteadyTime> next_deadline() const;

  // The newest world with members (not an end), the one whose reset key is worth polling.
  const store::elastic::PublishedWorld& newest_world() const { return newest_; }
  // Whether the job's end was decided: no further world will be published.
  bool ended() const { return phase_ == Phase::finishing || phase_ == Phase::ended; }
  // The members still running (not yet reported by on_exit).
  std::vector<std::uint64_t> running_members() const;
  int resets() const { return resets_; }

 private:
  enum class Phase { running, waiting, finishing, ended };
  struct Member {
    SlotRef slot;
    int spawn_epoch = 0;
    bool running = true;
    bool leaving = false;  // its leave key was seen: its slot is not refilled
    bool retired = false;  // removed from the world while running: its exit is no failure
    bool failed = false;   // counted as failed (its failed key, or its exit): its exit adds nothing
  };
  // What changed since the newest world, for the line of the next one.
  struct Cause {
    std::string text;      // "rank 2 (id 2, host h) was killed by signal 9 (SIGKILL)"
    int exit_status = 0;   // the status a job ended by it returns
  };

  ElasticWorldInputs world_inputs(SteadyTime now) const;
  ElasticActions reform(const Cause& cause, SteadyTime now, bool republish);
  ElasticActions publish_formed(const ElasticWorld& world, const Cause& cause);
  ElasticActions end_job(int status, std::string line, const std::string& reason);
  void publish_end(ElasticActions& out, const std::string& reason);
  std::string member_text(std::uint64_t id) const;
  std::string discovery_name() const;
  // The plan's host that `printed` (a discovery line's host) names; nullopt when none does.
  std::optional<std::size_t> plan_host(const std::string& printed) const;
  // Each plan host's slots as `result` offers them (capped), with notices; nullopt for a failed run.
  std::optional<std::vector<int>> offered_by(const DiscoveryResult& result, ElasticActions& out);
  std::string slot_key(const SlotRef& slot) const;
  // Blacklists what a failure of `m` takes out: its host, or its slot (ElasticConfig::blacklist_hosts).
  // Returns "host h is blacklisted[ for N s]" when a host's blacklisting starts, else "".
  std::string record_failure(Member& m, SteadyTime now);
  // The line that says the job waits for --min-np slots, `available` of them usable.
  Notice waiting_notice(const std::string& cause, int available, SteadyTime now) const;

  ElasticConfig config_;
  HostBlacklist blacklist_;
  // blacklist key -> what failed: a slot, or a whole host (slot -1, key its name)
  std::map<std::string, SlotRef> failed_slots_;
  std::map<std::uint64_t, Member> members_;
  store::elastic::PublishedWorld newest_;
  int last_epoch_ = -1;                  // the newest epoch published, an end included
  std::uint64_t next_id_ = 0;
  int resets_ = 0;
  Phase phase_ = Phase::running;
  std::optional<SteadyTime> wait_until_;       // waiting: the end of --elastic-timeout
  std::optional<Cause> wait_cause_;            // waiting: what started the wait
  int wait_available_ = -1;                    // waiting: the usable slots last said
  std::optional<SteadyTime> finish_deadline_;  // finishing: stop the others then
  std::optional<SteadyTime> settle_until_;     // a reset request that changed nothing, answered then
  std::vector<int> offered_;                   // each host's slots on offer (at most its plan's)
  DiscoveryPollPolicy discovery_poll_;
  std::set<std::string> foreign_told_;         // hosts not in the plan, said once each
  std::string last_discovery_error_;           // why the last run of the script failed
  std::set<std::string> capacity_told_;        // hosts offered beyond their plan's slots, said once each
};

}  // namespace ringrun

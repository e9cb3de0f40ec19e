// Elastic mode's planning core (the launcher's side; README, Elastic training): what the host
// discovery script printed, which hosts are blacklisted and until when, the world that forms after
// hosts or ranks change, and when to poll the script next. Everything here is pure: time comes in
// as an argument and randomness from a seed, so the supervisor that runs processes stays the only
// part with effects.
//
// The semantics are horovodrun's (horovod/runner/elastic/{discovery,driver}.py,
// horovod/runner/common/util/hosts.py) except where a comment says why ringrun differs.
#pragma once

#include <ringrun/allocation.hpp>
#include <ringrun/environment_variables.hpp>
#include <ringrun/rank_environment.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun {

using SteadyTime = std::chrono::steady_clock::time_point;

// ---- The discovery script's output -----------------------------------------------------------

// One `host[:slots]` per line; blank lines and blanks around a line are ignored; a line without
// `:slots` gets `default_slots` (--slots-per-host; 0 or less: not given, so such a line is an
// error). Hosts come back in the order printed. Empty output is valid: no host is available yet
// (Horovod's scripts print nothing while workers are not ready). A bad line throws InputError
// naming `origin`, the line number, its text and the fix, e.g.
// "--host-discovery-script line 2 'n1:0' : slots '0' of host 'n1' is not a positive whole number
// (print host:slots, e.g. n1:4)". Unlike Horovod (which keeps a set of lines), a host printed
// twice is an error rather than silently merged.
std::vector<HostSlots> parse_discovered_hosts(std::string_view script_output, int default_slots,
                                              std::string_view origin = "--host-discovery-script");

// One run of the discovery script: `ok` with what it printed, or why it failed ("exited with
// code 3", "timed out after 10 s"); run by elastic/discovery.hpp.
struct DiscoveryResult {
  bool ok = false;
  std::string output;
  std::string error;
};

// Whether `host`, as the script prints it, is this host (`self`: gethostname's name): localhost,
// 127.0.0.1, ::1, `self`, or its first label (`hostname -s`).
bool names_this_host(std::string_view host, std::string_view self);

// What the script's hosts mean for a job on this host: the slots of the lines naming this host
// (added up: "localhost:2" and "n1:2" on n1 are 4), and the other hosts in the order printed.
struct LocalDiscovery {
  int slots = 0;
  std::vector<std::string> foreign;
};
LocalDiscovery split_local_hosts(const std::vector<HostSlots>& hosts, std::string_view self);

// The first run decides how the job starts: its failure or bad output throw InputError naming
// `script` (ringrun exits 2). Returns the hosts as printed, other hosts included (a job on more than
// this host starts its processes through mpirun; launch.cpp decides), none: the job waits for
// --min-np slots.
std::vector<HostSlots> first_discovered_hosts(const DiscoveryResult& result, std::string_view script,
                                              int slots_per_host);

// The slots of `hosts` in all (saturating, as assign_elastic_world's count).
int total_slots(const std::vector<HostSlots>& hosts);

// ---- Blacklist with cooldown (--blacklist-cooldown-range MIN MAX) ----------------------------

// Horovod's limits: MIN at least 1 s, MAX at most 3600 s.
inline constexpr int kCooldownMinLowestSeconds = 1;
inline constexpr int kCooldownMaxHighestSeconds = 3600;

struct CooldownRange {
  int min_s = 0;
  int max_s = 0;
};

// Throws InputError when the range is outside Horovod's limits or MIN > MAX (Horovod accepts
// MIN > MAX and then always waits MIN; ringrun says so instead).
void validate_cooldown_range(const CooldownRange& range);

// The cooldown after a host's `failure_count`-th blacklisting (1 for the first): Horovod's
// HostState._set_cooldown_period, MIN * 2^count + jitter * MIN, clamped to [MIN, MAX], with
// `jitter` in [0, 1).
std::chrono::duration<double> cooldown_duration(const CooldownRange& range, int failure_count, double jitter);

// The hosts that failed, each excluded until its cooldown ends; without a cooldown range, for the
// rest of the job (Horovod without --blacklist-cooldown-range). The key is a host name as the
// discovery script prints it.
class HostBlacklist {
 public:
  explicit HostBlacklist(std::optional<CooldownRange> cooldown = std::nullopt, std::uint64_t seed = 0);

  // A rank on `host` failed at `now`. A host already in its cooldown keeps it unchanged (Horovod:
  // a second failure reported for the same event must not double the wait); otherwise its failure
  // count grows and a new, longer cooldown starts. Returns whether a new blacklisting started.
  bool record_failure(const std::string& host, SteadyTime now);

  // Whether `host` is excluded at `now`.
  bool is_blacklisted(const std::string& host, SteadyTime now) const;

  // When `host`'s cooldown ends; nullopt when it is not blacklisted or blacklisted for good.
  std::optional<SteadyTime> cooldown_end(const std::string& host) const;

  // How many times `host` was blacklisted; never reset, so each return is followed by a longer
  // cooldown on the next failure (Horovod's _blacklist_count).
  int blacklist_count(const std::string& host) const;

  // The hosts whose cooldown ended by `now`, which are from now on no longer blacklisted (Horovod's
  // whitelist of "resurrected" hosts). A host returned here is a host update even when the
  // discovery script's output did not change (Horovod: HostUpdateResult.added).
  std::vector<std::string> release_expired(SteadyTime now);

  // Ends `host`'s blacklisting now, cooldown or not (a Kubernetes pod replaced under its name is
  // a new host: ElasticConfig::replaced_hosts_return). Returns whether it was blacklisted.
  bool release(const std::string& host);

  // `discovered` without the hosts blacklisted at `now`, in the same order.
  std::vector<HostSlots> usable_hosts(const std::vector<HostSlots>& discovered, SteadyTime now) const;

 private:
  struct Entry {
    int count = 0;
    bool active = false;                 // excluded now (until `until`, or for good)
    std::optional<SteadyTime> until;     // end of the cooldown; nullopt: no cooldown range
  };
  std::optional<CooldownRange> cooldown_;
  std::mt19937_64 random_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// ---- The world after a change ----------------------------------------------------------------

// One process's place: a slot index on a host, fixed for the life of the process (it says which
// GPU and cores the slot has). Slot indexes of a host with N slots are 0..N-1.
struct SlotRef {
  std::string host;
  int slot = 0;
  friend bool operator==(const SlotRef&, const SlotRef&) = default;
};

struct ElasticRank {
  SlotRef place;
  RankIdentity identity;           // rank, local/cross numbers, group_rank (host index), hostname
  std::optional<int> old_rank;     // the rank it had before; nullopt for a process to start
};

enum class RemovalReason {
  exited,          // the process is gone (it ended or failed)
  host_unusable,   // its host is no longer discovered, or is blacklisted
  slots_reduced,   // its host now has fewer slots than its slot index
  over_max_np,     // more survivors than --max-np
};
const char* to_string(RemovalReason);

struct RemovedRank {
  int old_rank = 0;
  SlotRef place;
  RemovalReason reason = RemovalReason::exited;
};

struct ElasticWorldInputs {
  std::vector<SlotRef> previous;      // the place of each old rank, by rank; empty at the start
  // Old ranks whose process is gone. Their slots are free: one on a usable host is filled by a
  // new process like any free slot, so a caller that must not refill it blacklists its host first
  // (Horovod blacklists the host of every failed worker).
  std::set<int> exited;
  std::vector<HostSlots> usable;      // discovered minus blacklisted, in discovery order
  // Slots of usable hosts that must stay empty: never filled by a new process and not counted in
  // available_slots (a slot blacklisted on its own, the slot of a process that left or is still
  // exiting). A held slot that a survivor occupies stays its: the survivor is not removed for it.
  std::vector<SlotRef> held_back;
  int min_np = 1;                     // at the start, horovodrun waits for -np slots (min_np = np)
  std::optional<int> max_np;          // nullopt: no limit
};

struct ElasticWorld {
  enum class Outcome {
    formed,        // `ranks` is the new world
    wait,          // fewer than min_np slots: wait (up to --elastic-timeout) for the next change
    no_survivors,  // every old rank is gone: no state to sync new processes from; end the job
  };
  Outcome outcome = Outcome::formed;
  std::vector<ElasticRank> ranks;       // by new rank (formed only)
  std::vector<std::string> hosts;       // hosts with ranks, in order of first rank (group_rank)
  std::vector<RemovedRank> removed;     // old ranks not in the new world: stop those still running
  std::vector<int> added;               // new ranks whose process is to start
  int available_slots = 0;              // slots of the usable hosts (Horovod's count_available_slots)

  // Whether the new world differs from the old one (Horovod skips notifying workers otherwise).
  bool changes_world() const { return !removed.empty() || !added.empty(); }
};

// The world after a change (Horovod's _update_host_assignments with get_host_assignments):
// survivors keep their relative order, so the lowest surviving old rank becomes rank 0 and is the
// one whose state is synced; new slots follow, host by host: the survivors' hosts first in their
// old order (Horovod's order_available_hosts: oldest hosts first), then the other usable hosts in
// discovery order, each host's free slot indexes ascending, until max_np. Ringrun differs from
// Horovod in one point: a slot added to a host that already has ranks takes the next free rank
// instead of a rank inside that host's block, so no survivor's rank moves; local and cross
// numbers follow from the order as the runtime computes them (for block layouts, make_plan's).
// Every old rank gone is `no_survivors` even when slots are free (Horovod: "No hosts from previous
// set remaining, unable to broadcast state"); waiting could not bring the state back.
// Throws std::invalid_argument for inputs a caller cannot mean (min_np < 1, max_np < min_np, an
// exited rank that did not exist, two old ranks in one slot).
ElasticWorld assign_elastic_world(const ElasticWorldInputs& inputs);

// The job's last line when the wait for min_np slots ran out.
std::string elastic_timeout_message(int available_slots, int min_np, double elastic_timeout_s);

// ---- Polling the discovery script --------------------------------------------------------------

// When to run the discovery script and what a result means (horovod driver.py _discover_hosts):
// polled every `interval` (--discovery-interval), measured from the end of the previous run; a
// failure at the first run is a misconfiguration that ends the job; later failures keep the last
// hosts and are retried.
class DiscoveryPollPolicy {
 public:
  // RINGRUN_DISCOVERY_INTERVAL's default, Horovod's DISCOVER_HOSTS_FREQUENCY_SECS.
  static constexpr double kIntervalSeconds = variables::default_number(variables::kDiscoveryInterval);
  static constexpr std::chrono::duration<double> kInterval{kIntervalSeconds};
  // "every second", "every 0.01 s": how often the script runs, for messages.
  static std::string every(double interval_s);

  explicit DiscoveryPollPolicy(std::chrono::duration<double> interval = kInterval)
      : interval_(std::chrono::duration_cast<SteadyTime::duration>(interval)) {}

  enum class Action {
    use_hosts,        // the run succeeded: use what it printed
    end_job,          // the first run failed: end the job with the script's error
    keep_last_hosts,  // a later run failed: keep the last hosts, run again at next_poll()
  };
  struct Decision {
    Action action = Action::use_hosts;
    bool warn = false;  // print a warning: the first failure of a run of failures (not one a second)
  };

  // The run that ended at `now` succeeded (`ok`) or failed (non-zero exit or unreadable output).
  Decision on_result(bool ok, SteadyTime now);

  // When the next run is due; nullopt before the first (run it at once).
  std::optional<SteadyTime> next_poll() const { return next_poll_; }
  bool due(SteadyTime now) const { return !next_poll_ || now >= *next_poll_; }
  // Failures since the last success, and when the first of them happened.
  int consecutive_failures() const { return consecutive_failures_; }
  std::optional<SteadyTime> failing_since() const { return failing_since_; }

 private:
  SteadyTime::duration interval_;
  bool first_run_done_ = false;
  std::optional<SteadyTime> next_poll_;
  int consecutive_failures_ = 0;
  std::optional<SteadyTime> failing_since_;
};

}  // namespace ringrun

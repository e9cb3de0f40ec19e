// Elastic mode (README, Elastic training), the launcher's decisions: events in, actions out, on a
// fake clock and without a process (elastic/coordinator.hpp).
#include "elastic/coordinator.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <sys/wait.h>

#include <string>
#include <vector>

using namespace ringrun;
using namespace std::chrono_literals;
using store::elastic::PublishedWorld;

namespace {

const SteadyTime t0 = SteadyTime{} + 1000h;

// waitpid statuses.
constexpr int kExit0 = 0;
constexpr int kExit3 = 3 << 8;
constexpr int kKilled9 = SIGKILL;

ElasticConfig config(int slots, int min_np) {
  ElasticConfig c;
  c.hosts = {HostSlots{"h", slots, {}}};
  c.min_np = min_np;
  c.grace_period_s = 5;
  return c;
}

template <typename T>
std::vector<T> all_of(const ElasticActions& actions) {
  std::vector<T> out;
  for (const ElasticAction& a : actions)
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  return out;
}

// The one world published by `actions` (fails the test when there is not exactly one).
PublishedWorld published(const ElasticActions& actions) {
  auto worlds = all_of<PublishWorld>(actions);
  REQUIRE(worlds.size() == 1);
  return worlds[0].world;
}

std::string line_of(const ElasticActions& actions) {
  auto worlds = all_of<PublishWorld>(actions);
  return worlds.empty() ? "" : worlds[0].line;
}

std::vector<std::uint64_t> ids(std::initializer_list<std::uint64_t> list) { return list; }

std::vector<std::uint64_t> terminated(const ElasticActions& actions) {
  std::vector<std::uint64_t> out;
  for (const auto& t : all_of<TerminateMember>(actions)) out.push_back(t.id);
  return out;
}

}  // namespace

TEST_CASE("start: world 0 is ids 0..n-1 as ranks 0..n-1, each spawned for epoch 0") {
  ElasticCoordinator c(config(3, 2));
  const ElasticActions actions = c.start(t0);
  REQUIRE(std::holds_alternative<PublishWorld>(actions.front()));  // published before anything starts
  const PublishedWorld world = published(actions);
  CHECK(world.epoch == 0);
  CHECK_FALSE(world.added);
  CHECK_FALSE(world.end);
  CHECK(world.ids == ids({0, 1, 2}));
  CHECK(line_of(actions).empty());
  const auto spawns = all_of<SpawnMember>(actions);
  REQUIRE(spawns.size() == 3);
  for (std::size_t i = 0; i < spawns.size(); ++i) {
    CHECK(spawns[i].id == i);
    CHECK(spawns[i].slot == SlotRef{"h", static_cast<int>(i)});
    CHECK(spawns[i].epoch == 0);
    CHECK(spawns[i].identity.rank == static_cast<int>(i));
    CHECK(spawns[i].identity.local_size == 3);
    CHECK(spawns[i].identity.hostname == "h");
    CHECK(spawns[i].world_size == 3);
  }
  CHECK(c.resets() == 0);
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("death: world e+1 without it, survivors renumbered, then the dead address tombstoned; slot never refilled") {
  ElasticCoordinator c(config(4, 2));
  c.start(t0);
  const ElasticActions actions = c.on_exit(2, kKilled9, false, t0 + 1s);
  const PublishedWorld world = published(actions);
  CHECK(world.epoch == 1);
  CHECK(world.ids == ids({0, 1, 3}));  // id 3 is rank 2 now; the lowest survivor stays rank 0
  CHECK_FALSE(world.added);
  CHECK(line_of(actions) == "ringrun: elastic: rank 2 (id 2, host h) was killed by signal 9 (SIGKILL); world 1 has 3 ranks");
  CHECK(all_of<SpawnMember>(actions).empty());
  REQUIRE(std::holds_alternative<TombstoneAddress>(actions.back()));  // after the world and latest
  CHECK(std::get<TombstoneAddress>(actions.back()).epoch == 0);
  CHECK(std::get<TombstoneAddress>(actions.back()).rank == 2);
  CHECK(c.resets() == 1);
  // Without a cooldown range the slot is out for good: nothing is ever due.
  CHECK_FALSE(c.next_deadline());
  CHECK(c.on_tick(t0 + 10000h).empty());

  // The next death counts from world 1's ranks: id 0 was rank 0, id 1 becomes rank 0.
  const ElasticActions second = c.on_exit(0, kExit3, false, t0 + 2s);
  CHECK(published(second).ids == ids({1, 3}));
  CHECK(line_of(second) == "ringrun: elastic: rank 0 (id 0, host h) exited with code 3; world 2 has 2 ranks");
  CHECK(std::get<TombstoneAddress>(second.back()).epoch == 1);
  CHECK(std::get<TombstoneAddress>(second.back()).rank == 0);
  CHECK(c.newest_world().epoch == 2);
}

TEST_CASE("cooldown: the failed slot comes back with a new id, added=1") {
  ElasticConfig cfg = config(3, 2);
  cfg.cooldown = CooldownRange{1, 1};  // always 1 s
  ElasticCoordinator c(cfg);
  c.start(t0);
  CHECK(published(c.on_exit(1, kKilled9, false, t0)).ids == ids({0, 2}));
  REQUIRE(c.next_deadline());
  CHECK(*c.next_deadline() == t0 + 1s);
  CHECK(c.on_tick(t0 + 999ms).empty());
  const ElasticActions actions = c.on_tick(t0 + 1s);
  const PublishedWorld world = published(actions);
  CHECK(world.epoch == 2);
  CHECK(world.added);
  CHECK(world.ids == ids({0, 2, 3}));
  CHECK(line_of(actions) == "ringrun: elastic: slot 1 of host h is back after its cooldown; world 2 has 3 ranks; id 3 "
                            "starts as rank 2");
  const auto spawns = all_of<SpawnMember>(actions);
  REQUIRE(spawns.size() == 1);
  CHECK(spawns[0].id == 3);
  CHECK(spawns[0].slot == SlotRef{"h", 1});  // the slot keeps its GPU and cores
  CHECK(spawns[0].epoch == 2);
  CHECK(spawns[0].identity.rank == 2);
  CHECK(spawns[0].world_size == 3);
  CHECK(c.resets() == 2);
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("leave: the leaver's world is formed at the reset request; its slot is neither blacklisted nor refilled") {
  ElasticConfig cfg = config(3, 1);
  cfg.cooldown = CooldownRange{1, 1};
  ElasticCoordinator c(cfg);
  c.start(t0);
  const ElasticActions actions = c.on_reset_request(0, {1}, t0);
  CHECK(published(actions).ids == ids({0, 2}));
  CHECK(line_of(actions) == "ringrun: elastic: rank 1 (id 1, host h) is leaving; world 1 has 2 ranks");
  CHECK(terminated(actions).empty());  // it learns it is out from the world and exits itself
  // Its exit (0, leave posted) is no news: no world, no tombstone, no finishing, no cooldown.
  CHECK(c.on_exit(1, kExit0, true, t0 + 1s).empty());
  CHECK_FALSE(c.ended());
  CHECK_FALSE(c.next_deadline());
  CHECK(c.on_tick(t0 + 1h).empty());
  // A leaver that exits before its request is seen forms the world from its exit, still unblacklisted.
  const ElasticActions left = c.on_exit(2, kExit0, true, t0 + 2s);
  CHECK(published(left).ids == ids({0}));
  CHECK(line_of(left) == "ringrun: elastic: rank 1 (id 2, host h) left; world 2 has 1 rank");
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("exit 0 without a leave: the job is finishing; no more worlds; the others get the grace period") {
  ElasticCoordinator c(config(3, 1));
  c.start(t0);
  const ElasticActions actions = c.on_exit(1, kExit0, false, t0);
  const PublishedWorld end = published(actions);
  CHECK(end.end);  // ranks waiting for world 1 stop waiting: they are not in it
  CHECK(end.epoch == 1);
  const auto ends = all_of<EndJob>(actions);
  REQUIRE(ends.size() == 1);
  CHECK(ends[0].status == 0);
  CHECK(ends[0].line.empty());
  CHECK(terminated(actions).empty());
  CHECK(c.ended());
  // A failure now forms no world.
  CHECK(c.on_exit(0, kExit3, false, t0 + 1s).empty());
  CHECK(c.on_reset_request(0, {}, t0 + 1s).empty());
  REQUIRE(c.next_deadline());
  CHECK(*c.next_deadline() == t0 + 5s);
  CHECK(c.on_tick(t0 + 4s).empty());
  CHECK(terminated(c.on_tick(t0 + 5s)) == ids({2}));
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("below --min-np: wait --elastic-timeout, then end with one line and status 1") {
  ElasticConfig cfg = config(3, 3);
  cfg.elastic_timeout_s = 2;
  ElasticCoordinator c(cfg);
  c.start(t0);
  const ElasticActions death = c.on_exit(1, kKilled9, false, t0);
  CHECK(all_of<PublishWorld>(death).empty());  // no world of 2: below --min-np 3
  CHECK(all_of<TombstoneAddress>(death).size() == 1);
  REQUIRE(c.next_deadline());
  CHECK(*c.next_deadline() == t0 + 2s);
  CHECK(c.on_reset_request(0, {}, t0 + 1s).empty());  // the survivors' requests: already re-forming
  CHECK(c.on_tick(t0 + 1999ms).empty());
  const ElasticActions end = c.on_tick(t0 + 2s);
  CHECK(published(end).end);
  CHECK(terminated(end) == ids({0, 2}));
  const auto ends = all_of<EndJob>(end);
  REQUIRE(ends.size() == 1);
  CHECK(ends[0].status == 1);
  CHECK(ends[0].line == "ringrun: elastic: rank 1 (id 1, host h) was killed by signal 9 (SIGKILL); " +
                            elastic_timeout_message(2, 3, 2));
  CHECK(c.ended());
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("below --min-np: a cooldown that ends within the wait forms the world") {
  ElasticConfig cfg = config(2, 2);
  cfg.elastic_timeout_s = 10;
  cfg.cooldown = CooldownRange{3, 3};
  ElasticCoordinator c(cfg);
  c.start(t0);
  c.on_exit(0, kExit3, false, t0);
  CHECK(*c.next_deadline() == t0 + 3s);  // the cooldown before the timeout
  const ElasticActions actions = c.on_tick(t0 + 3s);
  const PublishedWorld world = published(actions);
  CHECK(world.ids == ids({1, 2}));
  CHECK(world.added);
  CHECK(all_of<SpawnMember>(actions).size() == 1);
  CHECK_FALSE(c.ended());
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("--reset-limit as Horovod: a reset is refused once resets >= the limit") {
  ElasticConfig cfg = config(4, 1);
  cfg.reset_limit = 1;
  ElasticCoordinator c(cfg);
  c.start(t0);
  CHECK(published(c.on_exit(1, kKilled9, false, t0)).ids == ids({0, 2, 3}));  // the one reset allowed
  const ElasticActions second = c.on_exit(2, kKilled9, false, t0 + 1s);
  CHECK(published(second).end);
  CHECK(terminated(second) == ids({0, 3}));
  const auto ends = all_of<EndJob>(second);
  REQUIRE(ends.size() == 1);
  CHECK(ends[0].status == 1);
  CHECK(ends[0].line == "ringrun: elastic: rank 1 (id 2, host h) was killed by signal 9 (SIGKILL); the job was reset "
                        "1 time, reaching --reset-limit 1; raise --reset-limit to allow more");

  cfg.reset_limit = 0;
  ElasticCoordinator none(cfg);
  none.start(t0);
  CHECK(all_of<EndJob>(none.on_exit(0, kExit3, false, t0)).size() == 1);
}

TEST_CASE("reset requests: stale ones are ignored; one with nothing changed republishes the members as e+1") {
  ElasticCoordinator c(config(3, 1));
  c.start(t0);
  c.on_exit(2, kKilled9, false, t0);  // world 1: ids 0, 1
  CHECK(c.on_reset_request(0, {}, t0).empty());  // stale: world 0 is gone
  CHECK_FALSE(c.next_deadline());
  // The newest world asks with nothing changed: answered once the settle time passed.
  CHECK(c.on_reset_request(1, {}, t0 + 1s).empty());
  CHECK(*c.next_deadline() == t0 + 1s + kResetSettle);
  CHECK(c.on_reset_request(1, {}, t0 + 1s + 50ms).empty());  // a second member asks: same deadline
  CHECK(*c.next_deadline() == t0 + 1s + kResetSettle);
  const ElasticActions actions = c.on_tick(t0 + 1s + kResetSettle);
  const PublishedWorld world = published(actions);
  CHECK(world.epoch == 2);
  CHECK(world.ids == ids({0, 1}));
  CHECK_FALSE(world.added);
  CHECK(line_of(actions) == "ringrun: elastic: a member of world 1 asked for a reset; world 2 has the same 2 ranks");
  CHECK(all_of<SpawnMember>(actions).empty());
  CHECK(c.resets() == 2);  // a republish is a reset (--reset-limit counts it)
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("reset request then the death it announced: one world, from the death") {
  ElasticCoordinator c(config(3, 1));
  c.start(t0);
  CHECK(c.on_reset_request(0, {}, t0).empty());  // a peer saw id 1's socket close first
  CHECK(published(c.on_exit(1, kKilled9, false, t0 + 10ms)).ids == ids({0, 2}));
  CHECK(c.on_tick(t0 + 1s).empty());
  CHECK(c.resets() == 1);
}

TEST_CASE("a reset request pending when the world falls below --min-np: only the wait is due") {
  ElasticConfig cfg = config(2, 2);
  cfg.elastic_timeout_s = 3;
  ElasticCoordinator c(cfg);
  c.start(t0);
  CHECK(c.on_reset_request(0, {}, t0).empty());
  CHECK(all_of<PublishWorld>(c.on_exit(1, kKilled9, false, t0 + 10ms)).empty());
  REQUIRE(c.next_deadline());
  CHECK(*c.next_deadline() == t0 + 10ms + 3s);  // not the settle time, which is past and void
  CHECK(c.on_tick(t0 + 1s).empty());
}

TEST_CASE("every rank gone: the job ends with the last failure's status and one line") {
  ElasticCoordinator c(config(1, 1));
  c.start(t0);
  const ElasticActions actions = c.on_exit(0, kExit3, false, t0);
  CHECK(published(actions).end);
  const auto ends = all_of<EndJob>(actions);
  REQUIRE(ends.size() == 1);
  CHECK(ends[0].status == 3);
  CHECK(ends[0].line == "ringrun: elastic: rank 0 (id 0, host h) exited with code 3; no rank of world 0 is left to "
                        "carry the job's state");
}

TEST_CASE("interrupt: the end is published once; later exits change nothing") {
  ElasticCoordinator c(config(2, 1));
  c.start(t0);
  const ElasticActions actions = c.on_interrupt("ringrun received SIGINT");
  CHECK(published(actions).end);
  CHECK(published(actions).reason == "ringrun received SIGINT");
  CHECK(all_of<EndJob>(actions).empty());  // the supervisor reports an interrupt itself
  CHECK(c.on_interrupt("again").empty());
  CHECK(c.on_exit(0, SIGINT, false, t0).empty());
  CHECK(c.running_members() == ids({1}));
}

TEST_CASE("configurations the command line cannot produce are refused") {
  CHECK_THROWS_AS(ElasticCoordinator(config(2, 3)), std::invalid_argument);
  CHECK_THROWS_AS(ElasticCoordinator(config(0, 1)), std::invalid_argument);
  ElasticConfig cfg = config(4, 1);
  cfg.max_np = 3;
  CHECK_THROWS_AS(ElasticCoordinator{cfg}, std::invalid_argument);
}

// ---- --host-discovery-script (this host only) ------------------------------------------------------

namespace {

// A job planned for `slots` slots (--max-np) that starts with `start_np`, fed by a script.
ElasticConfig discovery_config(int slots, int start_np, int min_np) {
  ElasticConfig c = config(slots, min_np);
  c.start_np = start_np;
  c.max_np = slots;
  c.discovery_script = "disc";
  c.self = "h.example";
  return c;
}

DiscoveryResult printed(std::string output) { return DiscoveryResult{true, std::move(output), ""}; }
DiscoveryResult failed(std::string error) { return DiscoveryResult{false, "", std::move(error)}; }

std::vector<std::string> notices(const ElasticActions& actions) {
  std::vector<std::string> out;
  for (const auto& n : all_of<Notice>(actions)) out.push_back(n.line);
  return out;
}

std::vector<std::uint64_t> retired(const ElasticActions& actions) {
  std::vector<std::uint64_t> out;
  for (const auto& r : all_of<RetireMember>(actions)) out.push_back(r.id);
  return out;
}

}  // namespace

TEST_CASE("discovery: more slots of this host start new processes in a world with added=1") {
  ElasticCoordinator c(discovery_config(4, 2, 2));
  c.start(t0);
  CHECK(c.next_discovery() == t0 + 1s);  // launch.cpp's run counts as the first
  CHECK(c.on_discovery(printed("localhost:2\n"), t0 + 1s).empty());  // no change: no world
  const ElasticActions grown = c.on_discovery(printed("h:3\n"), t0 + 2s);
  const PublishedWorld world = published(grown);
  CHECK(world.epoch == 1);
  CHECK(world.added);
  CHECK(world.ids == ids({0, 1, 2}));
  const auto spawns = all_of<SpawnMember>(grown);
  REQUIRE(spawns.size() == 1);
  CHECK(spawns[0].id == 2);
  CHECK(spawns[0].slot == SlotRef{"h", 2});
  CHECK(spawns[0].epoch == 1);
  CHECK(spawns[0].world_size == 3);
  CHECK(line_of(grown) == "ringrun: elastic: host h offers 3 slots instead of 2; world 1 has 3 ranks; id 2 starts "
                          "as rank 2");
  CHECK(c.next_discovery() == t0 + 3s);
}

TEST_CASE("discovery: more slots than the plan's use the plan's, said once") {
  ElasticCoordinator c(discovery_config(3, 2, 1));
  c.start(t0);
  const ElasticActions grown = c.on_discovery(printed("localhost:8\n"), t0 + 1s);
  CHECK(published(grown).ids == ids({0, 1, 2}));
  REQUIRE(notices(grown).size() == 1);
  CHECK(notices(grown)[0].find("offers 8 slots but the job was planned for 3") != std::string::npos);
  CHECK(notices(c.on_discovery(printed("localhost:9\n"), t0 + 2s)).empty());
}

TEST_CASE("discovery: fewer slots retire the highest slots' processes; their exit is no failure") {
  ElasticCoordinator c(discovery_config(3, 3, 1));
  c.start(t0);
  const ElasticActions shrunk = c.on_discovery(printed("localhost:1\n"), t0 + 1s);
  const PublishedWorld world = published(shrunk);
  CHECK(world.epoch == 1);
  CHECK_FALSE(world.added);
  CHECK(world.ids == ids({0}));
  CHECK(retired(shrunk) == ids({1, 2}));  // not terminated: they exit at their next commit
  CHECK(terminated(shrunk).empty());
  CHECK(line_of(shrunk) == "ringrun: elastic: host h offers 1 slot instead of 3; world 1 has 1 rank; ids 1, 2 are "
                           "removed (exiting at their next commit)");
  CHECK(c.on_exit(2, kExit0, false, t0 + 2s).empty());   // not the job's success: not in world 1
  CHECK(c.on_exit(1, kKilled9, false, t0 + 2s).empty());  // not a failure: no new world, no blacklist
  CHECK_FALSE(c.ended());
  // The slots come back: new processes fill them (a blacklisted slot would stay empty).
  const ElasticActions regrown = c.on_discovery(printed("localhost:3\n"), t0 + 3s);
  CHECK(published(regrown).ids == ids({0, 3, 4}));
}

TEST_CASE("discovery: below --min-np the job waits --elastic-timeout, and goes on when slots return") {
  ElasticConfig cfg = discovery_config(3, 3, 2);
  cfg.elastic_timeout_s = 30;
  ElasticCoordinator c(cfg);
  c.start(t0);
  CHECK(c.on_discovery(printed("localhost:1\n"), t0 + 1s).empty());  // waiting: no world
  CHECK(c.next_deadline() == t0 + 31s);
  const ElasticActions back = c.on_discovery(printed("localhost:2\n"), t0 + 5s);
  CHECK(published(back).ids == ids({0, 1}));
  CHECK(retired(back) == ids({2}));
  CHECK_FALSE(c.next_deadline());

  ElasticCoordinator d(cfg);
  d.start(t0);
  d.on_discovery(printed("localhost:1\n"), t0 + 1s);
  const auto ends = all_of<EndJob>(d.on_tick(t0 + 31s));
  REQUIRE(ends.size() == 1);
  CHECK(ends[0].status == 1);
  CHECK(ends[0].line.find("only 1 of the 2 slots --min-np needs") != std::string::npos);
}

TEST_CASE("discovery: a later failing run keeps the last slots, warned once per run of failures") {
  ElasticCoordinator c(discovery_config(3, 2, 1));
  c.start(t0);
  const ElasticActions first = c.on_discovery(failed("exited with code 3"), t0 + 1s);
  CHECK(all_of<PublishWorld>(first).empty());
  CHECK(all_of<EndJob>(first).empty());
  CHECK(notices(first) == std::vector<std::string>{"ringrun: elastic: --host-discovery-script 'disc' failed (exited "
                                                   "with code 3); keeping this host's 2 slots and retrying every "
                                                   "second"});
  CHECK(c.next_discovery() == t0 + 2s);
  CHECK(c.on_discovery(failed("exited with code 3"), t0 + 2s).empty());  // said once
  // Bad output is a failure too; the slots stay.
  CHECK(all_of<PublishWorld>(c.on_discovery(printed("localhost:0\n"), t0 + 3s)).empty());
  CHECK(c.on_discovery(printed("localhost:2\n"), t0 + 4s).empty());  // success: nothing changed
  CHECK(notices(c.on_discovery(failed("did not finish within 10 s"), t0 + 5s)).size() == 1);  // a new run of failures
  CHECK(published(c.on_discovery(printed("localhost:3\n"), t0 + 6s)).ids == ids({0, 1, 2}));
}

TEST_CASE("discovery: a host that is not this one is ignored after the first run, said once") {
  ElasticCoordinator c(discovery_config(4, 2, 1));
  c.start(t0);
  const ElasticActions actions = c.on_discovery(printed("localhost:2\nn7:4\n"), t0 + 1s);
  CHECK(all_of<PublishWorld>(actions).empty());
  CHECK(notices(actions) == std::vector<std::string>{"ringrun: elastic: --host-discovery-script 'disc' printed host "
                                                     "'n7', which is not this host; ignored: the job's hosts are "
                                                     "planned at its start (start it with --launcher mpirun to let "
                                                     "it grow onto other hosts)"});
  CHECK(notices(c.on_discovery(printed("localhost:2\nn7:4\n"), t0 + 2s)).empty());
  // The first label of this host's name is this host.
  CHECK(published(c.on_discovery(printed("h:3\n"), t0 + 3s)).ids == ids({0, 1, 2}));
}

TEST_CASE("discovery: no script, no polls; after the end, no more") {
  ElasticCoordinator plain(config(2, 1));
  plain.start(t0);
  CHECK_FALSE(plain.next_discovery());
  CHECK(plain.on_discovery(printed("localhost:4\n"), t0 + 1s).empty());
  ElasticCoordinator c(discovery_config(3, 2, 1));
  c.start(t0);
  c.on_exit(0, kExit0, false, t0);  // success: the job is finishing
  CHECK_FALSE(c.next_discovery());
  CHECK(c.on_discovery(printed("localhost:3\n"), t0 + 1s).empty());
}

TEST_CASE("discovery: a slot offered again while its retired process still exits is filled once it exited") {
  ElasticCoordinator c(discovery_config(3, 3, 1));
  c.start(t0);
  CHECK(retired(c.on_discovery(printed("localhost:2\n"), t0 + 1s)) == ids({2}));
  CHECK(all_of<PublishWorld>(c.on_discovery(printed("localhost:3\n"), t0 + 2s)).empty());  // slot 2 still held
  const ElasticActions refilled = c.on_exit(2, kExit0, false, t0 + 3s);
  CHECK(published(refilled).ids == ids({0, 1, 3}));
  CHECK(published(refilled).added);
  CHECK(line_of(refilled) == "ringrun: elastic: id 2 (host h) exited, freeing slot 2; world 2 has 3 ranks; id 3 "
                             "starts as rank 2");
}

// ---- Several hosts (the nodes of a SLURM allocation) ------------------------------------------------

namespace {

// Hosts a and b with two slots each, following the job's node list.
ElasticConfig two_hosts(int min_np) {
  ElasticConfig c;
  c.hosts = {HostSlots{"a", 2, {}}, HostSlots{"b", 2, {}}};
  c.min_np = min_np;
  c.grace_period_s = 5;
  c.discovery_script = "nodes";
  c.allocation_discovery = true;
  c.self = "a";
  return c;
}

}  // namespace

TEST_CASE("hosts: world 0 fills the hosts in plan order; a slot is a place on its host") {
  ElasticCoordinator c(two_hosts(2));
  const auto spawns = all_of<SpawnMember>(c.start(t0));
  REQUIRE(spawns.size() == 4);
  CHECK(spawns[1].slot == SlotRef{"a", 1});
  CHECK(spawns[2].slot == SlotRef{"b", 0});
  CHECK(spawns[3].identity.local_rank == 1);
  CHECK(spawns[3].identity.cross_rank == 1);
  CHECK(spawns[3].identity.hostname == "b");
}

TEST_CASE("hosts: a node that leaves the job's node list is dropped; its ranks are removed") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  CHECK(c.on_discovery(printed("a\nb\n---\n"), t0 + 1s).empty());
  const ElasticActions actions = c.on_discovery(printed("a\n---\n"), t0 + 2s);
  CHECK(published(actions).ids == ids({0, 1}));
  CHECK(line_of(actions) == "ringrun: elastic: host b offers 0 slots instead of 2; world 1 has 2 ranks; ids 2, 3 are "
                            "removed (exiting at their next commit)");
  CHECK(notices(actions).empty());  // no capacity notice: a node list line offers the node's plan slots
}

TEST_CASE("hosts: a node's ranks fail; the world shrinks to the other node, and min_np ends the wait") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  const ElasticActions first = c.on_exit(2, kExit3, false, t0 + 1s);
  CHECK(published(first).ids == ids({0, 1, 3}));
  CHECK(line_of(first) == "ringrun: elastic: rank 2 (id 2, host b) exited with code 3; world 1 has 3 ranks");
  CHECK(published(c.on_exit(3, kKilled9, false, t0 + 2s)).ids == ids({0, 1}));
  // The node comes back in the list: its slots failed and stay blacklisted (no cooldown range).
  CHECK(all_of<SpawnMember>(c.on_discovery(printed("a\nb\n---\n"), t0 + 3s)).empty());
}

TEST_CASE("hosts: a host not in the plan is ignored, said once") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  const ElasticActions actions = c.on_discovery(printed("a\nb\nz\n---\n"), t0 + 1s);
  CHECK(notices(actions) == std::vector<std::string>{"ringrun: elastic: the job's node list (squeue) printed host 'z', "
                                                     "which is not one of the job's hosts; ignored: the job's hosts "
                                                     "are planned at its start"});
  CHECK(all_of<PublishWorld>(actions).empty());
}

TEST_CASE("hosts: a member whose node failed is a failure even when its srun exited 0") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  const ElasticActions actions = c.on_exit(3, kExit0, false, t0 + 1s, "lost its node (srun: Node failure on b)");
  CHECK(published(actions).ids == ids({0, 1, 2}));
  CHECK(line_of(actions) == "ringrun: elastic: rank 3 (id 3, host b) lost its node (srun: Node failure on b); world 1 "
                            "has 3 ranks");
  CHECK_FALSE(c.ended());
}

TEST_CASE("hosts: a drained node is dropped like a lost one; back from drain, its slots are filled again") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  const ElasticActions drained = c.on_discovery(printed("a\nb\n---\nb\n"), t0 + 1s);
  CHECK(published(drained).ids == ids({0, 1}));
  CHECK(all_of<RetireMember>(drained).size() == 2);
  // Retired members that exit 0 by themselves are no failure: their slots are not blacklisted.
  CHECK(c.on_exit(2, kExit0, false, t0 + 2s).empty());
  CHECK(c.on_exit(3, kExit0, false, t0 + 2s).empty());
  const ElasticActions back = c.on_discovery(printed("a\nb\n---\n\n"), t0 + 3s);
  CHECK(published(back).ids == ids({0, 1, 4, 5}));
  CHECK(line_of(back) == "ringrun: elastic: host b offers 2 slots instead of 0; world 2 has 4 ranks; ids 4, 5 start "
                         "as ranks 2, 3");
}

TEST_CASE("hosts: node list output without its '---' line is a failed run; the slots stay") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  const ElasticActions actions = c.on_discovery(printed("a\n"), t0 + 1s);
  CHECK(all_of<PublishWorld>(actions).empty());
  REQUIRE(notices(actions).size() == 1);
  CHECK(notices(actions)[0].find("no '---' line after the nodes") != std::string::npos);
}

TEST_CASE("a newer world or the end abandons the one before: members still in its exchange move on") {
  ElasticCoordinator c(two_hosts(2));
  c.start(t0);
  const ElasticActions first = c.on_exit(2, kKilled9, false, t0 + 1s);
  REQUIRE(all_of<AbandonWorld>(first).size() == 1);
  CHECK(all_of<AbandonWorld>(first)[0].epoch == 0);
  CHECK(all_of<AbandonWorld>(first)[0].size == 4);
  // Id 3 dies while some members may still be joining world 1, others already in world 2.
  const ElasticActions second = c.on_exit(3, kKilled9, false, t0 + 1s);
  REQUIRE(all_of<AbandonWorld>(second).size() == 1);
  CHECK(all_of<AbandonWorld>(second)[0].epoch == 1);
  CHECK(all_of<AbandonWorld>(second)[0].size == 3);
  // The end abandons the newest world too (a member in its exchange learns the end at once).
  const ElasticActions end = c.on_exit(0, kExit0, false, t0 + 2s);
  REQUIRE(all_of<AbandonWorld>(end).size() == 1);
  CHECK(all_of<AbandonWorld>(end)[0].epoch == 2);
}

TEST_CASE("hosts: a node the job gains is a new host with the first host's slots; its processes join") {
  ElasticConfig config = two_hosts(2);
  config.new_host_slots = 2;
  ElasticCoordinator c(config);
  c.start(t0);
  const ElasticActions actions = c.on_discovery(printed("a\nb\nc\n---\n"), t0 + 1s);
  const auto added = all_of<AddHost>(actions);
  REQUIRE(added.size() == 1);
  CHECK(added[0].name == "c");
  CHECK(added[0].slots == 2);
  CHECK(std::holds_alternative<AddHost>(actions.front()));  // before the spawns that name it
  CHECK(published(actions).ids == ids({0, 1, 2, 3, 4, 5}));
  const auto spawns = all_of<SpawnMember>(actions);
  REQUIRE(spawns.size() == 2);
  CHECK(spawns[1].slot == SlotRef{"c", 1});
  CHECK(spawns[1].identity.cross_rank == 2);
  CHECK(line_of(actions) == "ringrun: elastic: host c offers 2 slots instead of 0; world 1 has 6 ranks; ids 4, 5 start "
                            "as ranks 4, 5");
  // Without new_host_slots such a node is only said once.
  ElasticCoordinator fixed(two_hosts(2));
  fixed.start(t0);
  CHECK(all_of<AddHost>(fixed.on_discovery(printed("a\nb\nc\n---\n"), t0 + 1s)).empty());
}

// A user's script on a job started through mpirun (hosts it printed at the start: the plan's).
TEST_CASE("hosts: a host the script adds joins with the slots printed; one it drops is retired") {
  ElasticConfig config;
  config.hosts = {HostSlots{"h", 2, {}}, HostSlots{"n2", 1, {}}};
  config.min_np = 2;
  config.grace_period_s = 5;
  config.discovery_script = "disc";
  config.self = "h.example";
  config.adds_printed_hosts = true;
  ElasticCoordinator c(config);
  REQUIRE(published(c.start(t0)).ids == ids({0, 1, 2}));
  // This host under another of its names is the plan's host h; n3 joins with 3 slots.
  const ElasticActions grown = c.on_discovery(printed("localhost:2\nn2:1\nn3:3\n"), t0 + 1s);
  const auto added = all_of<AddHost>(grown);
  REQUIRE(added.size() == 1);
  CHECK(added[0].name == "n3");
  CHECK(added[0].slots == 3);
  CHECK(std::holds_alternative<AddHost>(grown.front()));
  CHECK(published(grown).ids == ids({0, 1, 2, 3, 4, 5}));
  CHECK(all_of<SpawnMember>(grown).back().slot == SlotRef{"n3", 2});
  CHECK(line_of(grown) == "ringrun: elastic: host n3 offers 3 slots instead of 0; world 1 has 6 ranks; ids 3, 4, 5 "
                          "start as ranks 3, 4, 5");
  // n2 gone: its process is retired; more slots than first printed on h stay unused, said once.
  const ElasticActions shrunk = c.on_discovery(printed("h:4\nn3:3\n"), t0 + 2s);
  CHECK(published(shrunk).ids == ids({0, 1, 3, 4, 5}));
  REQUIRE(all_of<RetireMember>(shrunk).size() == 1);
  CHECK(all_of<RetireMember>(shrunk)[0].id == 2);
  CHECK(notices(shrunk) == std::vector<std::string>{"ringrun: elastic: host h offers 4 slots but the job planned 2 "
                                                    "there (the slots the script first printed for it); the others "
                                                    "stay unused: print every host's full slots from the start"});
  CHECK(all_of<AddHost>(c.on_discovery(printed("h:2\nn3:3\n"), t0 + 3s)).empty());  // n3 is a host now
}

// Elastic mode's decisions with hosts: a discovery script's hosts (this machine's names, other
// hosts), a SLURM job's node list, hosts the user named (elastic/coordinator.hpp).
#include "elastic_coordinator_test.hpp"

using namespace coordinator_test;

// ---- --host-discovery-script on this machine ------------------------------------------------------

namespace {

// A job on this machine planned for `slots` slots (--max-np) that starts with `start_np`, fed by a
// script whose first run printed localhost (launch.cpp plans the names printed).
ElasticConfig discovery_config(int slots, int start_np, int min_np) {
  ElasticConfig c = config(slots, min_np);
  c.hosts[0].name = "localhost";
  c.start_np = start_np;
  c.max_np = slots;
  c.discovery_script = "disc";
  c.self = "h.example";
  c.local_host_slots = slots;
  c.blacklist_hosts = true;
  return c;
}

}  // namespace

TEST_CASE("discovery: more slots of this host start new processes in a world with added=1") {
  ElasticCoordinator c(discovery_config(4, 2, 2));
  c.start(t0);
  CHECK(c.next_discovery() == t0 + 1s);  // launch.cpp's run counts as the first
  CHECK(c.on_discovery(printed("localhost:2\n"), t0 + 1s).empty());  // no change: no world
  const ElasticActions grown = c.on_discovery(printed("localhost:3\n"), t0 + 2s);
  const PublishedWorld world = published(grown);
  CHECK(world.epoch == 1);
  CHECK(world.added);
  CHECK(world.ids == ids({0, 1, 2}));
  const auto spawns = all_of<SpawnMember>(grown);
  REQUIRE(spawns.size() == 1);
  CHECK(spawns[0].id == 2);
  CHECK(spawns[0].slot == SlotRef{"localhost", 2});
  CHECK(spawns[0].epoch == 1);
  CHECK(spawns[0].world_size == 3);
  CHECK(line_of(grown) == "ringrun: elastic: host localhost offers 3 slots instead of 2; world 1 has 3 ranks; id 2 "
                          "starts as rank 2");
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
  CHECK(line_of(shrunk) == "ringrun: elastic: host localhost offers 1 slot instead of 3; world 1 has 1 rank; ids 1, 2 "
                           "are removed (exiting at their next commit)");
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
  const ElasticActions waiting = c.on_discovery(printed("localhost:1\n"), t0 + 1s);
  CHECK(all_of<PublishWorld>(waiting).empty());  // waiting: no world, one line at once
  REQUIRE(notices(waiting).size() == 1);
  CHECK(notices(waiting)[0].starts_with("ringrun: elastic: host localhost offers 1 slot instead of 3; waiting for 2 "
                                        "slots (have 1) until "));
  CHECK(notices(waiting)[0].ends_with(" (--elastic-timeout 30 s)"));
  CHECK(c.on_discovery(printed("localhost:1\n"), t0 + 2s).empty());  // no change, no line
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

TEST_CASE("discovery: another name of this machine is a host of its own; another machine is ignored, said once") {
  ElasticCoordinator c(discovery_config(4, 2, 1));
  c.start(t0);
  const ElasticActions actions = c.on_discovery(printed("localhost:2\nn7:4\n"), t0 + 1s);
  CHECK(all_of<PublishWorld>(actions).empty());
  CHECK(notices(actions) == std::vector<std::string>{"ringrun: elastic: --host-discovery-script 'disc' printed host "
                                                     "'n7', which is not this host; ignored: the job's hosts are "
                                                     "planned at its start (start it with --launcher mpirun to let "
                                                     "it grow onto other hosts)"});
  CHECK(notices(c.on_discovery(printed("localhost:2\nn7:4\n"), t0 + 2s)).empty());
  // The first label of this host's name is this machine: a host of its own, planned as the first.
  const ElasticActions added = c.on_discovery(printed("localhost:2\nh:1\n"), t0 + 3s);
  const auto hosts = all_of<AddHost>(added);
  REQUIRE(hosts.size() == 1);
  CHECK(hosts[0].name == "h");
  CHECK(hosts[0].slots == 4);
  CHECK(published(added).ids == ids({0, 1, 2}));
  const auto spawns = all_of<SpawnMember>(added);
  REQUIRE(spawns.size() == 1);
  CHECK(spawns[0].slot == SlotRef{"h", 0});
  CHECK(spawns[0].identity.hostname == "h");  // HOROVOD_HOSTNAME as printed
  // localhost goes: its processes are retired, h's keeps its rank order.
  const ElasticActions dropped = c.on_discovery(printed("h:1\n"), t0 + 4s);
  CHECK(published(dropped).ids == ids({2}));
  CHECK(retired(dropped) == ids({0, 1}));
}

TEST_CASE("named hosts: a failure blacklists its host; the host's other processes are removed") {
  ElasticConfig cfg = discovery_config(4, 4, 2);
  cfg.hosts = {HostSlots{"localhost", 4, {}}, HostSlots{"127.0.0.1", 4, {}}};
  cfg.start_offered = {2, 2};
  ElasticCoordinator c(cfg);
  const auto spawns = all_of<SpawnMember>(c.start(t0));
  REQUIRE(spawns.size() == 4);
  CHECK(spawns[2].slot == SlotRef{"127.0.0.1", 0});
  CHECK(spawns[2].identity.hostname == "127.0.0.1");
  const ElasticActions death = c.on_exit(0, kExit3, false, t0 + 1s);
  CHECK(published(death).ids == ids({2, 3}));
  CHECK(retired(death) == ids({1}));
  CHECK(line_of(death) == "ringrun: elastic: rank 0 (id 0, host localhost) exited with code 3 (host localhost is "
                          "blacklisted); world 1 has 2 ranks; id 1 is removed (exiting at its next commit)");
  // The script still prints localhost: blacklisted, it stays out.
  CHECK(all_of<PublishWorld>(c.on_discovery(printed("localhost:2\n127.0.0.1:2\n"), t0 + 2s)).empty());
}

TEST_CASE("named hosts: a member that says it is failing costs one reset; its exit changes nothing") {
  ElasticConfig cfg = discovery_config(4, 4, 1);
  cfg.hosts = {HostSlots{"localhost", 4, {}}, HostSlots{"127.0.0.1", 4, {}}};
  cfg.start_offered = {2, 2};
  cfg.reset_limit = 1;
  ElasticCoordinator c(cfg);
  c.start(t0);
  const ElasticActions failing = c.on_reset_request(0, {}, {3}, t0 + 1s);
  CHECK(published(failing).ids == ids({0, 1}));
  CHECK(retired(failing) == ids({2}));
  CHECK(line_of(failing) == "ringrun: elastic: rank 3 (id 3, host 127.0.0.1) is failing (an error ended its training; "
                            "host 127.0.0.1 is blacklisted); world 1 has 2 ranks; id 2 is removed (exiting at its "
                            "next commit)");
  CHECK(c.on_exit(3, kExit3, false, t0 + 2s).empty());  // already counted: no second reset
  CHECK(c.resets() == 1);
  CHECK_FALSE(c.ended());
}

TEST_CASE("plain -np slots: a failure blacklists its slot only") {
  ElasticCoordinator c(config(3, 1));
  c.start(t0);
  const ElasticActions death = c.on_exit(1, kExit3, false, t0);
  CHECK(published(death).ids == ids({0, 2}));
  CHECK(retired(death).empty());
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
  CHECK(line_of(refilled) == "ringrun: elastic: id 2 (host localhost) exited, freeing slot 2; world 2 has 3 ranks; "
                             "id 3 starts as rank 2");
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
  // n3 joins with 3 slots.
  const ElasticActions grown = c.on_discovery(printed("h:2\nn2:1\nn3:3\n"), t0 + 1s);
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

// Elastic mode (README, Elastic training), the launcher's decisions: events in, actions out, on a
// fake clock and without a process (elastic/coordinator.hpp). Hosts and discovery scripts:
// test_elastic_coordinator_hosts.cpp.
#include "elastic_coordinator_test.hpp"

using namespace coordinator_test;

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
  const ElasticActions actions = c.on_reset_request(0, {1}, {}, t0);
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
  CHECK(c.on_reset_request(0, {}, {}, t0 + 1s).empty());
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
  CHECK(c.on_reset_request(0, {}, {}, t0 + 1s).empty());  // the survivors' requests: already re-forming
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
  CHECK(c.on_reset_request(0, {}, {}, t0).empty());  // stale: world 0 is gone
  CHECK_FALSE(c.next_deadline());
  // The newest world asks with nothing changed: answered once the settle time passed.
  CHECK(c.on_reset_request(1, {}, {}, t0 + 1s).empty());
  CHECK(*c.next_deadline() == t0 + 1s + kResetSettle);
  CHECK(c.on_reset_request(1, {}, {}, t0 + 1s + 50ms).empty());  // a second member asks: same deadline
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
  CHECK(c.on_reset_request(0, {}, {}, t0).empty());  // a peer saw id 1's socket close first
  CHECK(published(c.on_exit(1, kKilled9, false, t0 + 10ms)).ids == ids({0, 2}));
  CHECK(c.on_tick(t0 + 1s).empty());
  CHECK(c.resets() == 1);
}

TEST_CASE("a reset request pending when the world falls below --min-np: only the wait is due") {
  ElasticConfig cfg = config(2, 2);
  cfg.elastic_timeout_s = 3;
  ElasticCoordinator c(cfg);
  c.start(t0);
  CHECK(c.on_reset_request(0, {}, {}, t0).empty());
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
  cfg.max_np = 3;  // the start (all 4) above --max-np
  CHECK_THROWS_AS(ElasticCoordinator{cfg}, std::invalid_argument);
  cfg.start_np = 3;  // a plan larger than --max-np is fine: the worlds stay within it
  CHECK_NOTHROW(ElasticCoordinator{cfg});
  cfg.start_offered = {5};  // more on offer than planned
  CHECK_THROWS_AS(ElasticCoordinator{cfg}, std::invalid_argument);
}


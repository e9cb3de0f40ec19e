// Elastic mode's runtime side end to end, without the launcher (ringrun(3), Elastic mode): this
// test hosts the job's store in-process and plays the launcher's elastic supervisor itself
// (publishes each world, watches its children). Real processes (elastic_rank.cpp) allreduce in a
// loop; one SIGKILLs itself; the survivors must see RINGRUN_ERR_RESET (not PEER), reset into the
// next world with the same pids and carry on, and leak no thread, descriptor, process or /dev/shm
// file.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "ringrun/elastic_wire.hpp"
#include "ringrun/runtime.hpp"
#include "ringrun/store.hpp"
#include "spawned_process.hpp"


namespace {

namespace wire = ringrun::store::elastic;
using Clock = std::chrono::steady_clock;

const std::string kRankProgram = std::string(RINGRUN_BINARY_DIR) + "/tests/runtime_elastic_rank";
const std::string kSecret(64, 'e');

// The KEY=VALUE fields of the nth line of `text` that starts with `name id=<id>` (up to the free
// text of error=...); empty when there is no such line.
std::map<std::string, std::string> event(const std::string& text, const std::string& name, std::uint64_t id,
                                         std::size_t nth = 0) {
  std::istringstream lines(text);
  std::string line;
  const std::string head = name + " id=" + std::to_string(id) + " ";
  for (std::size_t seen = 0; std::getline(lines, line);) {
    if (line.rfind(head, 0) != 0 || seen++ != nth) continue;
    std::map<std::string, std::string> fields;
    std::istringstream words(line.substr(name.size() + 1));
    for (std::string word; words >> word;) {
      auto eq = word.find('=');
      if (eq == std::string::npos) break;
      fields[word.substr(0, eq)] = word.substr(eq + 1);
      if (word.rfind("error=", 0) == 0) break;  // free text follows
    }
    return fields;
  }
  return {};
}

long long number(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  return it == fields.end() ? -999999 : std::stoll(it->second);
}

std::set<std::string> shm_files() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    // Not ringrun-mpi.PID.*: the launcher's watch folder of a local job, which another test's
    // ringrun keeps for its job's life (these jobs start no launcher).
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind("ringrun-", 0) == 0 && std::string(e->d_name).rfind("ringrun-mpi.", 0) != 0)
        names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// The processes of one case, in a process group of their own, and the store they rendezvous at.
// On any failure (a REQUIRE throws) the destructor kills the group and reaps every child.
class ElasticJob {
 public:
  ElasticJob() : server_("127.0.0.1", 0, kSecret), store_("127.0.0.1", server_.port(), kSecret) {
    static int jobs = 0;
    name_ = std::to_string(::getpid()) + "." + std::to_string(jobs++);
  }
  ~ElasticJob() {
    if (pgid_ > 0) ::kill(-pgid_, SIGKILL);
    for (auto& [id, child] : children_)
      if (!child.reaped) ::waitpid(child.pid, &child.status, 0);
  }
  ElasticJob(const ElasticJob&) = delete;
  ElasticJob& operator=(const ElasticJob&) = delete;

  void spawn(std::uint64_t id, int epoch, const std::vector<std::string>& args) {
    Child& child = children_[id];
    child.output = std::string(RINGRUN_BINARY_DIR) + "/tests/elastic_reset." + name_ + "." + std::to_string(id) + ".out";
    std::vector<std::string> env = ringrun::test::clean_environment();
    env.push_back("RINGRUN_STORE_ADDR=127.0.0.1:" + std::to_string(server_.port()));
    env.push_back("RINGRUN_JOB_SECRET=" + kSecret);
    env.push_back("RINGRUN_ELASTIC_ID=" + std::to_string(id));
    env.push_back("RINGRUN_ELASTIC_EPOCH=" + std::to_string(epoch));
    env.push_back("RINGRUN_ELASTIC_TIMEOUT=20");
    env.push_back("RINGRUN_START_TIMEOUT=20");
    std::vector<std::string> argv{kRankProgram};
    argv.insert(argv.end(), args.begin(), args.end());
    child.pid = start(argv, env, child.output);
  }

  // What the supervisor writes for a new world: the world, then `latest`.
  void publish(int epoch, const std::vector<std::uint64_t>& ids, bool added = false) {
    wire::PublishedWorld world{.epoch = epoch, .added = added, .end = false, .reason = "", .ids = ids};
    store_.set(wire::world_key(epoch), wire::encode_world(world));
    store_.set(wire::latest_key(), std::to_string(epoch));
  }
  void publish_end(int epoch, const std::string& reason) {
    store_.set(wire::world_key(epoch), wire::encode_world({.epoch = 0, .added = false, .end = true, .reason = reason, .ids = {}}));
    store_.set(wire::latest_key(), std::to_string(epoch));
  }
  ringrun::store::Client& store() { return store_; }

  // The child's wait status once it exits; fails the case (killing the group) after `limit`.
  int wait(std::uint64_t id, std::chrono::seconds limit) {
    Child& child = children_.at(id);
    const auto deadline = Clock::now() + limit;
    while (!child.reaped) {
      const pid_t got = ::waitpid(child.pid, &child.status, WNOHANG);
      if (got == child.pid) {
        child.reaped = true;
        break;
      }
      if (Clock::now() >= deadline)
        FAIL("id ", id, " still runs after ", limit.count(), " s; its output:\n", output(id));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return child.status;
  }
  void wait_all(std::chrono::seconds limit) {
    for (auto& [id, child] : children_) wait(id, limit);
  }

  pid_t pid(std::uint64_t id) const { return children_.at(id).pid; }
  std::string output(std::uint64_t id) const {
    std::ifstream in(children_.at(id).output);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // After wait_all: nothing of the group is left (no grandchild, no stray process).
  bool group_empty() const { return pgid_ > 0 && ::kill(-pgid_, 0) != 0 && errno == ESRCH; }

 private:
  struct Child {
    pid_t pid = -1;
    int status = -1;
    bool reaped = false;
    std::string output;
  };

  pid_t start(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& out) {
    const pid_t pid = ringrun::test::spawn_to_file(argv, env, out, pgid_ > 0 ? pgid_ : 0);  // the first leads the group
    if (pgid_ <= 0) pgid_ = pid;
    return pid;
  }

  ringrun::store::Server server_;
  ringrun::store::Client store_;
  std::map<std::uint64_t, Child> children_;
  pid_t pgid_ = -1;
  std::string name_;  // of the output files
};

bool exited_zero(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// What a survivor's output must show.
struct Survivor {
  std::uint64_t id;
  int final_epoch, final_rank, final_size, first_size;
  long long steps;
  bool failed = true;  // it saw a member die (else it reset because all agreed to)
};

// A survivor's story: RESET (not PEER) with later calls latched, the same pid in every world, the
// expected rank and size in the last one, all steps done, and as many threads and non-socket
// descriptors in every world (sockets differ by the mesh: one per peer), none after finalize.
void check_survivor(const ElasticJob& job, const Survivor& expected) {
  const std::uint64_t id = expected.id;
  const std::string out = job.output(id);
  INFO("id ", id, " output:\n", out);
  CHECK(out.find("UNEXPECTED") == std::string::npos);
  if (expected.failed) {
    CHECK(number(event(out, "RESET", id), "code") == RINGRUN_ERR_RESET);
    const auto latched = event(out, "LATCHED", id);
    CHECK(number(latched, "async") == RINGRUN_ERR_RESET);
    CHECK(number(latched, "sync") == RINGRUN_ERR_RESET);
  } else {
    CHECK(event(out, "RESET", id).empty());
  }
  const auto first = event(out, "EPOCH", id, 0);
  CHECK(number(first, "epoch") == 0);
  CHECK(number(first, "rank") == static_cast<long long>(id));
  CHECK(number(first, "size") == expected.first_size);
  std::map<std::string, std::string> last;
  for (std::size_t nth = 1; !event(out, "EPOCH", id, nth).empty(); ++nth) last = event(out, "EPOCH", id, nth);
  REQUIRE_FALSE(last.empty());
  CHECK(number(last, "epoch") == expected.final_epoch);
  CHECK(number(last, "rank") == expected.final_rank);
  CHECK(number(last, "size") == expected.final_size);
  CHECK(number(last, "pid") == job.pid(id));
  CHECK(number(first, "pid") == job.pid(id));
  CHECK(number(last, "threads") == number(first, "threads"));
  CHECK(number(last, "fds") - number(last, "sockets") == number(first, "fds") - number(first, "sockets"));
  CHECK(number(last, "sockets") - expected.final_size == number(first, "sockets") - expected.first_size);
  const auto done = event(out, "DONE", id);
  CHECK(number(done, "epoch") == expected.final_epoch);
  CHECK(number(done, "step") >= expected.steps);
  const auto start = event(out, "START", id), final = event(out, "FINAL", id);
  CHECK(number(final, "threads") == number(start, "threads"));
  CHECK(number(final, "fds") == number(start, "fds"));
  CHECK(number(final, "sockets") == number(start, "sockets"));
}

// No process of the job left, no shared-memory file of its worlds left behind (another test's
// may come and go meanwhile: only files that stay for a second count).
void check_nothing_left(const ElasticJob& job, const std::set<std::string>& shm_before) {
  CHECK(job.group_empty());
  std::set<std::string> left;
  for (int look = 0; look < 20; ++look) {
    left.clear();
    for (const auto& name : shm_files())
      if (!shm_before.count(name)) left.insert(name);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK_MESSAGE(left.empty(), "left in /dev/shm: ", left.size(), " ringrun-* file(s), e.g. ",
                left.empty() ? "" : *left.begin());
}

}  // namespace

TEST_CASE("a killed member: the survivors get RESET, reset into a 3-rank world with the same pids, and go on") {
  const auto shm_before = shm_files();
  ElasticJob job;
  for (std::uint64_t id = 0; id < 4; ++id) job.spawn(id, 0, {"2", "10", "40"});
  job.publish(0, {0, 1, 2, 3});
  const int dead = job.wait(2, std::chrono::seconds(20));
  INFO("id 2 output:\n", job.output(2));
  REQUIRE((WIFSIGNALED(dead) && WTERMSIG(dead) == SIGKILL));
  job.publish(1, {0, 1, 3});  // as the supervisor does on SIGCHLD: the survivors, in their old order
  job.wait_all(std::chrono::seconds(30));
  for (std::uint64_t id : {0, 1, 3}) CHECK_MESSAGE(exited_zero(job.wait(id, std::chrono::seconds(1))), "id ", id);
  check_survivor(job, {0, 1, 0, 3, 4, 40});
  check_survivor(job, {1, 1, 1, 3, 4, 40});
  check_survivor(job, {3, 1, 2, 3, 4, 40});
  // Each survivor said it left world 0 (one writer at a time: the last one's id stays).
  auto reset = job.store().try_get(wire::reset_key(0));
  REQUIRE(reset.has_value());
  CHECK((*reset == "0" || *reset == "1" || *reset == "3"));
  // Recovery: from the death to the last survivor's first completed step in world 1.
  const long long died = number(event(job.output(2), "DYING", 2), "t");
  long long recovered = 0;
  for (std::uint64_t id : {0, 1, 3}) recovered = std::max(recovered, number(event(job.output(id), "RECOVERED", id), "t"));
  REQUIRE(died > 0);
  REQUIRE(recovered > died);
  std::printf("elastic reset: recovery time %.1f ms (SIGKILL of id 2 to the last survivor's first allreduce in "
              "world 1 of 3 ranks)\n",
              (recovered - died) / 1e6);
  MESSAGE("recovery time ", (recovered - died) / 1e6, " ms");
  check_nothing_left(job, shm_before);
}

TEST_CASE("a member left out of the next world gets RINGRUN_ERR_REMOVED, finalizes and exits 0") {
  const auto shm_before = shm_files();
  ElasticJob job;
  for (std::uint64_t id = 0; id < 4; ++id) job.spawn(id, 0, {"2", "5", "20"});
  job.publish(0, {0, 1, 2, 3});
  const int dead = job.wait(2, std::chrono::seconds(20));
  REQUIRE(WIFSIGNALED(dead));
  job.publish(1, {0, 1});  // id 3 is alive but not in world 1
  job.wait_all(std::chrono::seconds(30));
  for (std::uint64_t id : {0, 1, 3}) CHECK_MESSAGE(exited_zero(job.wait(id, std::chrono::seconds(1))), "id ", id);
  check_survivor(job, {0, 1, 0, 2, 4, 20});
  check_survivor(job, {1, 1, 1, 2, 4, 20});
  const std::string out = job.output(3);
  INFO("id 3 output:\n", out);
  CHECK(number(event(out, "RESET", 3), "code") == RINGRUN_ERR_RESET);
  const auto removed = event(out, "REMOVED", 3), start = event(out, "START", 3), final = event(out, "FINAL", 3);
  REQUIRE_FALSE(removed.empty());
  CHECK(out.find("is not in world 1 (ids 0,1)") != std::string::npos);
  CHECK(number(removed, "threads") == number(start, "threads"));  // the engine's thread is gone
  CHECK(number(removed, "sockets") == number(start, "sockets") + 1);  // only the control connection
  CHECK(number(final, "threads") == number(start, "threads"));
  CHECK(number(final, "fds") == number(start, "fds"));
  CHECK(number(final, "sockets") == number(start, "sockets"));
  check_nothing_left(job, shm_before);
}

TEST_CASE("the job ends: a reset moves past a superseded world to the newest, the end: REMOVED") {
  ElasticJob job;
  for (std::uint64_t id = 0; id < 3; ++id) job.spawn(id, 0, {"1", "3", "20"});
  job.publish(0, {0, 1, 2});
  // Once all are past their join of world 0 (their addresses are in), world 1 comes and, at once,
  // the end as world 2: the survivors' resets wait for world 1, see that 2 is newer and take it.
  const std::string addr = wire::addr_prefix(0) + "/0/";
  job.store().wait({addr + "0", addr + "1", addr + "2"}, std::chrono::seconds(20));
  job.publish(1, {0, 2});
  job.publish_end(2, "below --min-np 3 for 600 s");
  const int dead = job.wait(1, std::chrono::seconds(20));
  REQUIRE(WIFSIGNALED(dead));
  job.wait_all(std::chrono::seconds(30));
  for (std::uint64_t id : {0, 2}) {
    const std::string out = job.output(id);
    INFO("id ", id, " output:\n", out);
    CHECK(exited_zero(job.wait(id, std::chrono::seconds(1))));
    CHECK_FALSE(event(out, "REMOVED", id).empty());
    CHECK(out.find("the job ended (below --min-np 3 for 600 s)") != std::string::npos);
  }
  CHECK(job.group_empty());
}

TEST_CASE("a member of the next world that never arrives: its tombstone resets the others into a newer world") {
  // Published before the tombstone, world 2 is joined within the same ringrun_reset(); published
  // after it, ringrun_reset() returns RESET and the next call joins it.
  for (bool newer_first : {true, false}) {
    CAPTURE(newer_first);
    ElasticJob job;
    for (std::uint64_t id = 0; id < 3; ++id) job.spawn(id, 0, {"1", "5", "20"});
    job.publish(0, {0, 1, 2});
    const int dead = job.wait(1, std::chrono::seconds(20));
    REQUIRE(WIFSIGNALED(dead));
    job.publish(1, {0, 2, 7});  // id 7 was to be started for world 1 and died before it published
    const std::string addr = wire::addr_prefix(1) + "/0/";
    job.store().wait({addr + "0", addr + "1"}, std::chrono::seconds(20));  // the survivors wait for rank 2
    if (newer_first) job.publish(2, {0, 2});
    job.store().set(addr + "2", std::string(wire::kTombstone));
    if (!newer_first) {
      job.store().wait({wire::reset_key(1)}, std::chrono::seconds(20));  // a survivor resets again
      job.publish(2, {0, 2});
    }
    job.wait_all(std::chrono::seconds(30));
    // Published after the tombstone, world 2 came when one survivor reset again (reset_key(1)); the
    // other may have seen it already when its own world 1 failed, and joined it at once.
    int reset_again = 0;
    for (std::uint64_t id : {0, 2}) {
      CHECK_MESSAGE(exited_zero(job.wait(id, std::chrono::seconds(1))), "id ", id);
      const std::string out = job.output(id);
      INFO("id ", id, " output:\n", out);
      const auto again = event(out, "RESET_FAILED", id);
      if (again.empty()) continue;
      ++reset_again;
      CHECK(number(again, "code") == RINGRUN_ERR_RESET);
      CHECK(out.find("left before publishing its address") != std::string::npos);
    }
    if (newer_first)
      CHECK(reset_again == 0);
    else
      CHECK(reset_again >= 1);
    check_survivor(job, {0, 2, 0, 2, 3, 20});
    check_survivor(job, {2, 2, 1, 2, 3, 20});
    CHECK(job.group_empty());
  }
}

TEST_CASE("growth: the members agree to reset into a newer world with a joiner, which gets their step") {
  const auto shm_before = shm_files();
  ElasticJob job;
  const std::vector<std::string> args{"-1", "0", "30", "1"};  // nobody dies; go on until in world 1
  for (std::uint64_t id = 0; id < 3; ++id) job.spawn(id, 0, args);
  job.publish(0, {0, 1, 2});
  const std::string addr = wire::addr_prefix(0) + "/0/";
  job.store().wait({addr + "0", addr + "1", addr + "2"}, std::chrono::seconds(20));  // all in world 0
  job.spawn(3, 1, args);  // started for world 1: its ringrun_init waits there for the members
  job.publish(1, {0, 1, 2, 3}, true);
  job.wait_all(std::chrono::seconds(30));
  long long steps_done = -1;
  for (std::uint64_t id : {0, 1, 2, 3}) {
    CHECK_MESSAGE(exited_zero(job.wait(id, std::chrono::seconds(1))), "id ", id);
    const std::string out = job.output(id);
    INFO("id ", id, " output:\n", out);
    const long long done = number(event(out, "DONE", id), "step");
    if (steps_done < 0) steps_done = done;
    CHECK(done == steps_done);  // one state everywhere
    if (id == 3) continue;
    const auto update = event(out, "UPDATE", id);
    CHECK(number(update, "latest") == 1);
    CHECK(number(update, "added") == 1);
    check_survivor(job, {id, 1, static_cast<int>(id), 4, 3, 30, false});
  }
  const std::string out = job.output(3);
  INFO("joiner output:\n", out);
  const auto epoch = event(out, "EPOCH", 3), start = event(out, "START", 3), final = event(out, "FINAL", 3);
  CHECK(number(epoch, "epoch") == 1);
  CHECK(number(epoch, "rank") == 3);
  CHECK(number(epoch, "size") == 4);
  // The members' step at their reset (they agreed after step S-1 and moved on to S).
  CHECK(number(event(out, "JOINED", 3), "step") == number(event(job.output(0), "UPDATE", 0), "step") + 1);
  CHECK(number(final, "threads") == number(start, "threads"));
  CHECK(number(final, "sockets") == number(start, "sockets"));
  check_nothing_left(job, shm_before);
}

TEST_CASE("StoreExchange: a tombstoned record is RINGRUN_ERR_RESET naming the rank") {
  ringrun::store::Server server("127.0.0.1", 0, kSecret);
  auto client = std::make_unique<ringrun::store::Client>("127.0.0.1", server.port(), kSecret);
  ringrun::store::Client launcher("127.0.0.1", server.port(), kSecret);
  launcher.set(wire::addr_prefix(4) + "/0/1", std::string(wire::kTombstone));
  ringrun::core::StoreExchange exchange(std::move(client), wire::addr_prefix(4), 0, 2, std::chrono::seconds(5));
  try {
    exchange.allgather("mine");
    FAIL("the allgather accepted a tombstone as an address");
  } catch (const ringrun::RuntimeError& e) {
    CHECK(e.code() == RINGRUN_ERR_RESET);
    CHECK(std::string(e.what()).find("rank 1 of 2 left before publishing its address") != std::string::npos);
  }
}

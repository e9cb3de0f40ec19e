// One process of the elastic reset test (elastic_reset_test.cpp), through the C API only. Started
// with RINGRUN_STORE_ADDR, RINGRUN_JOB_SECRET and RINGRUN_ELASTIC_ID/EPOCH/TIMEOUT; the test
// publishes the worlds in the store as the launcher's supervisor would.
//
//   elastic_rank DIE_IDS DIE_STEPS STEPS [FINAL_EPOCH]
//
// Runs STEPS steps (an async allreduce of a vector, a synchronous MAX of the step number, both
// checked); the process whose id is the i-th of DIE_IDS (comma-separated) SIGKILLs itself at the
// i-th of DIE_STEPS (-1: 0.5 s after start, before ringrun_init: a joiner lost while the members wait for it). With
// ELASTIC_RANK_LEAVE=ID:STEP in the environment, that process asks to leave at its first commit
// from STEP on (ringrun_elastic_leave, then the members agree and reset; it must be REMOVED). On a failure the
// others check that it is RINGRUN_ERR_RESET and that later calls fail alike, call ringrun_reset()
// and go on in the next world from rank 0's step. With FINAL_EPOCH, every 5 steps the members
// read ringrun_elastic_status, agree, and reset together into a newer world (growth: a joiner
// started for it syncs the step from rank 0); they go on past STEPS until they are in FINAL_EPOCH.
// One line per event, on stdout:
//   START id=I threads=T fds=F sockets=K                         before ringrun_init
//   EPOCH id=I epoch=E rank=R size=S pid=P threads=T fds=F sockets=K   after init and each reset
//   DYING id=I t=NS                                               CLOCK_MONOTONIC before SIGKILL
//   RESET id=I code=C step=N error=...                            a collective failed
//   LATCHED id=I async=C sync=C                                   later calls, before the reset
//   RECOVERED id=I epoch=E t=NS                                   first good step after a reset
//   REMOVED id=I threads=T fds=F sockets=K error=...              ringrun_reset said REMOVED
//   JOINED id=I step=N                                            a joiner synced its step
//   UPDATE id=I step=N latest=E added=A                           the members agreed to reset
//   DONE id=I epoch=E rank=R size=S step=N                        all steps done
//   FINAL id=I threads=T fds=F sockets=K                          after ringrun_finalize
// Exit 0 when done or removed; 4 for a failure other than RESET, 5 when a reset fails, 6 for a
// status read, 7 for a wrong result, 2 for init, 3 for finalize.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "process_counts.hpp"
#include "ringrun/ringrun.h"

using ringrun::test::process_counts;
using ringrun::test::ProcessCounts;

namespace {

const char* g_id = "?";

long long monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000ll + ts.tv_nsec;
}

void print_counts(const char* event, const std::string& extra = "") {
  const ProcessCounts c = process_counts();
  std::printf("%s id=%s threads=%d fds=%d sockets=%d%s\n", event, g_id, c.threads, c.fds, c.sockets, extra.c_str());
  std::fflush(stdout);
}

void print_epoch() {
  const ProcessCounts c = process_counts();
  std::printf("EPOCH id=%s epoch=%d rank=%d size=%d pid=%d threads=%d fds=%d sockets=%d\n", g_id, ringrun_epoch(),
              ringrun_rank(), ringrun_size(), static_cast<int>(::getpid()), c.threads, c.fds, c.sockets);
  std::fflush(stdout);
}

// One training step: an async allreduce (SUM of rank + 1 + i % 7) beside a synchronous MAX of the
// step, which every member must be on. Returns the first failure's code.
int run_step(long long step) {
  const int n = ringrun_size(), rank = ringrun_rank();
  std::vector<float> grad(4096);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
  ringrun_handle handle = nullptr;
  int rc = ringrun_allreduce_async("grad", grad.data(), grad.data(), grad.size(), RINGRUN_FLOAT32, RINGRUN_SUM, &handle);
  if (rc != RINGRUN_OK) return rc;
  long long agreed = step;
  const int sync_rc = ringrun_allreduce(&agreed, &agreed, 1, RINGRUN_INT64, RINGRUN_MAX);
  const int wait_rc = ringrun_wait(handle);
  if (sync_rc != RINGRUN_OK) return sync_rc;
  if (wait_rc != RINGRUN_OK) return wait_rc;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    const float expected = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
    if (grad[i] != expected || agreed != step) {
      std::printf("WRONG id=%s step=%lld grad[%zu]=%g expected %g agreed step %lld\n", g_id, step, i, grad[i],
                  expected, agreed);
      std::exit(7);
    }
  }
  return RINGRUN_OK;
}

// After a failure: it must be RESET, and the communicator stays latched until the reset.
void check_failure(int rc, long long step) {
  std::printf("RESET id=%s code=%d step=%lld error=%s\n", g_id, rc, step, ringrun_last_error());
  if (rc != RINGRUN_ERR_RESET) {
    std::printf("UNEXPECTED id=%s: code %d is not RINGRUN_ERR_RESET (%d)\n", g_id, rc, RINGRUN_ERR_RESET);
    std::exit(4);
  }
  float x = 1;
  ringrun_handle handle = nullptr;
  const int async_rc = ringrun_allreduce_async("after-failure", &x, &x, 1, RINGRUN_FLOAT32, RINGRUN_SUM, &handle);
  const int sync_rc = ringrun_barrier();
  std::printf("LATCHED id=%s async=%d sync=%d\n", g_id, async_rc, sync_rc);
  std::fflush(stdout);
  if (handle) ringrun_wait(handle);
  if (async_rc != RINGRUN_ERR_RESET || sync_rc != RINGRUN_ERR_RESET) std::exit(4);
}

// Joins the next world (again, when a member was lost while it formed); exits when removed.
void rejoin() {
  for (int attempt = 0;; ++attempt) {
    const int rc = ringrun_reset();
    if (rc == RINGRUN_OK) break;
    if (rc == RINGRUN_ERR_REMOVED) {
      print_counts("REMOVED", std::string(" error=") + ringrun_last_error());
      if (ringrun_finalize() != RINGRUN_OK) {
        std::printf("FAIL id=%s: ringrun_finalize after REMOVED: %s\n", g_id, ringrun_last_error());
        std::exit(3);
      }
      print_counts("FINAL");
      std::exit(0);
    }
    std::printf("RESET_FAILED id=%s code=%d attempt=%d error=%s\n", g_id, rc, attempt, ringrun_last_error());
    std::fflush(stdout);
    if (rc != RINGRUN_ERR_RESET || attempt == 3) std::exit(5);
  }
  print_epoch();
}

// Leaves the world (after a failure, or because every member agreed to), joins the next one and
// takes rank 0's step there, as a training script restores its state and syncs it.
void move_to_next_world(long long& step, int failure) {
  int rc = failure;
  do {
    if (rc != RINGRUN_OK) check_failure(rc, step);
    rejoin();
    rc = ringrun_broadcast(&step, 1, RINGRUN_INT64, 0);
  } while (rc != RINGRUN_OK);
}

// A commit (with FINAL_EPOCH): has the launcher published a newer world, or does a member leave?
// The members agree on the newest epoch any of them saw and on any leave (MAX), so that all reset
// at the same step. A leaver posts its leave before the agreement, as the design requires.
int commit(long long step, bool leaving, bool& update) {
  int latest = -1, added = -1;
  if (leaving && ringrun_elastic_leave() != RINGRUN_OK) {
    std::printf("FAIL id=%s: ringrun_elastic_leave: %s\n", g_id, ringrun_last_error());
    std::exit(6);
  }
  if (ringrun_elastic_status(&latest, &added) != RINGRUN_OK) {
    std::printf("FAIL id=%s: ringrun_elastic_status: %s\n", g_id, ringrun_last_error());
    std::exit(6);
  }
  long long agreed[2] = {latest, leaving ? 1 : 0};
  if (const int rc = ringrun_allreduce(agreed, agreed, 2, RINGRUN_INT64, RINGRUN_MAX); rc != RINGRUN_OK) return rc;
  update = agreed[0] > ringrun_epoch() || agreed[1] > 0;
  if (update)
    std::printf("UPDATE id=%s step=%lld latest=%d added=%d leave=%lld\n", g_id, step, latest, added, agreed[1]);
  return RINGRUN_OK;
}

// The step at which this process dies (argv lists), or -2 for never.
long long death_step(const char* ids, const char* steps, long long id) {
  std::string id_list = ids, step_list = steps;
  for (std::size_t i = 0, j = 0;;) {
    const std::size_t ie = id_list.find(',', i), je = step_list.find(',', j);
    if (std::atoll(id_list.substr(i, ie - i).c_str()) == id) return std::atoll(step_list.substr(j, je - j).c_str());
    if (ie == std::string::npos || je == std::string::npos) return -2;
    i = ie + 1;
    j = je + 1;
  }
}

// ELASTIC_RANK_LEAVE=ID:STEP: the step from which this process leaves, or -1 for never.
long long leave_step(long long id) {
  const char* spec = std::getenv("ELASTIC_RANK_LEAVE");
  if (!spec || !std::strchr(spec, ':') || std::atoll(spec) != id) return -1;
  return std::atoll(std::strchr(spec, ':') + 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: elastic_rank DIE_IDS DIE_STEPS STEPS [FINAL_EPOCH]\n");
    return 64;
  }
  const long long steps = std::atoll(argv[3]);
  const int final_epoch = argc == 5 ? std::atoi(argv[4]) : 0;
  if (const char* id = std::getenv("RINGRUN_ELASTIC_ID")) g_id = id;
  const long long die_step = death_step(argv[1], argv[2], std::atoll(g_id)), leave_from = leave_step(std::atoll(g_id));
  print_counts("START");
  if (die_step == -1) {  // late enough that the members wait for it in the new world's rendezvous
    ::usleep(500 * 1000);
    std::printf("DYING id=%s t=%lld\n", g_id, monotonic_ns());
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
  }
  if (ringrun_elastic_enabled() != 1 || ringrun_init() != RINGRUN_OK) {
    std::printf("FAIL id=%s: ringrun_init: %s\n", g_id, ringrun_last_error());
    return 2;
  }
  print_epoch();
  long long step = 0;
  if (ringrun_epoch() > 0) {  // a joiner: the members' state comes from rank 0
    if (const int rc = ringrun_broadcast(&step, 1, RINGRUN_INT64, 0); rc != RINGRUN_OK) move_to_next_world(step, rc);
    std::printf("JOINED id=%s step=%lld\n", g_id, step);
  }
  bool fresh_world = false;
  while (step < steps || ringrun_epoch() < final_epoch) {
    if (step == die_step) {
      std::printf("DYING id=%s t=%lld\n", g_id, monotonic_ns());
      std::fflush(stdout);
      ::kill(::getpid(), SIGKILL);
    }
    if (step >= steps) ::usleep(1000);  // done, but a newer world is still to come
    bool update = false;
    int rc = run_step(step);
    if (rc == RINGRUN_OK && final_epoch > 0 && (step + 1) % 5 == 0)
      rc = commit(step, leave_from >= 0 && step >= leave_from, update);
    if (rc != RINGRUN_OK) {
      move_to_next_world(step, rc);
      fresh_world = true;
      continue;
    }
    if (fresh_world) std::printf("RECOVERED id=%s epoch=%d t=%lld\n", g_id, ringrun_epoch(), monotonic_ns());
    fresh_world = false;
    ++step;
    if (update) move_to_next_world(step, RINGRUN_OK);
  }
  std::printf("DONE id=%s epoch=%d rank=%d size=%d step=%lld\n", g_id, ringrun_epoch(), ringrun_rank(), ringrun_size(),
              step);
  if (ringrun_finalize() != RINGRUN_OK) {
    std::printf("FAIL id=%s: ringrun_finalize: %s\n", g_id, ringrun_last_error());
    return 3;
  }
  print_counts("FINAL");
  return 0;
}

// One rank of the engine's process test, through the C API only: a synchronous allreduce before
// the engine starts, named async ops from two threads in a per-rank shuffled order, synchronous
// calls while the engine runs, ringrun_test polling, and ringrun_finalize with an op pending.
// Prints "engine rank R: ok" and exits 0, or prints what failed and exits 1.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "process_counts.hpp"
#include "ringrun/ringrun.h"

namespace {

int g_rank = -1;

int fail(const std::string& what) {
  std::printf("engine rank %d: FAILED: %s (last error: %s)\n", g_rank, what.c_str(), ringrun_last_error());
  return 1;
}

// Named async ops from two threads in a per-rank shuffled order, synchronous calls while the
// engine runs, then ringrun_test and ringrun_wait on each op. 0, or what fail() returned.
int async_ops_from_two_threads(int size) {
  constexpr int kTensors = 300;
  std::vector<std::vector<float>> data(kTensors);
  std::vector<ringrun_handle> handles(kTensors, nullptr);
  std::vector<int> order(kTensors);
  for (int k = 0; k < kTensors; ++k) {
    order[static_cast<std::size_t>(k)] = k;
    data[static_cast<std::size_t>(k)].assign(static_cast<std::size_t>(1 + k % 50), static_cast<float>(g_rank + k));
  }
  std::mt19937 rng(static_cast<unsigned>(17 + g_rank));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::thread> submitters;
  std::vector<int> submit_errors(2, 0);
  for (int t = 0; t < 2; ++t)
    submitters.emplace_back([&, t] {
      for (std::size_t j = static_cast<std::size_t>(t); j < order.size(); j += 2) {
        int k = order[j];
        auto& v = data[static_cast<std::size_t>(k)];
        std::string name = "grad." + std::to_string(k);
        if (ringrun_allreduce_async(name.c_str(), v.data(), v.data(), v.size(), RINGRUN_FLOAT32, RINGRUN_SUM,
                                    &handles[static_cast<std::size_t>(k)]) != RINGRUN_OK)
          ++submit_errors[static_cast<std::size_t>(t)];
      }
    });
  for (auto& t : submitters) t.join();
  if (submit_errors[0] + submit_errors[1]) return fail("async submissions");

  // Synchronous calls while the engine runs go through it.
  std::vector<int> gathered(static_cast<std::size_t>(size));
  int mine = g_rank * 10;
  if (ringrun_allgather(&mine, 1, RINGRUN_INT32, gathered.data()) != RINGRUN_OK) return fail("sync allgather");
  for (int r = 0; r < size; ++r)
    if (gathered[static_cast<std::size_t>(r)] != r * 10) return fail("sync allgather result");
  if (ringrun_barrier() != RINGRUN_OK) return fail("sync barrier");

  for (int k = 0; k < kTensors; ++k) {
    int done = 0;
    if (ringrun_test(handles[static_cast<std::size_t>(k)], &done) != RINGRUN_OK) return fail("ringrun_test");
    if (ringrun_wait(handles[static_cast<std::size_t>(k)]) != RINGRUN_OK) return fail("wait grad." + std::to_string(k));
    float expected = 0;
    for (int r = 0; r < size; ++r) expected += static_cast<float>(r + k);
    for (float x : data[static_cast<std::size_t>(k)])
      if (x != expected) return fail("result of grad." + std::to_string(k));
  }
  return 0;
}

void* allocate_floats(void* arg, size_t count, const size_t* rows, int nranks) {
  auto* out = static_cast<std::vector<float>*>(arg);
  out->assign(count + 1, -1.0f);  // one more: an empty result still has a buffer
  (void)rows;
  (void)nranks;
  return out->data();
}

// An output and the rows from each rank that the engine reported when it sized it.
struct SizedOutput {
  std::vector<float> data;
  std::vector<std::size_t> rows;
};

void* allocate_counting_rows(void* arg, size_t count, const size_t* rows, int nranks) {
  auto* out = static_cast<SizedOutput*>(arg);
  out->rows.assign(rows, rows + nranks);
  out->data.assign(count + 1, -1.0f);
  return out->data.data();
}

// Through ringrun_submit: process sets (the even ranks, then the odd), an allgather of a count per
// rank, an alltoall and a join; one set stays registered for ringrun_finalize to stop. 0, or 1.
int process_sets_and_general_submissions(int size) {
  std::vector<int> even, odd;
  for (int r = 0; r < size; ++r) (r % 2 ? odd : even).push_back(r);
  const int even_set = ringrun_add_process_set(even.data(), static_cast<int>(even.size()));
  const int odd_set = odd.empty() ? 0 : ringrun_add_process_set(odd.data(), static_cast<int>(odd.size()));
  if (even_set <= 0 || odd_set < 0) return fail(std::string("add_process_set: ") + ringrun_last_error());
  if (ringrun_add_process_set(even.data(), static_cast<int>(even.size())) != RINGRUN_ERR_INVALID_ARGUMENT)
    return fail("a duplicate process set was accepted");
  const int mine = g_rank % 2 ? odd_set : even_set;
  const auto& members = g_rank % 2 ? odd : even;
  if (ringrun_process_set_size(mine) != static_cast<int>(members.size()) || ringrun_process_set_included(mine) != 1)
    return fail("process set size or membership");
  ringrun_request r;
  ringrun_request_init(&r);
  float x = static_cast<float>(g_rank);
  r.name = "in.set";
  r.send = r.recv = &x;
  r.count = 1;
  r.process_set = mine;
  ringrun_handle h = nullptr;
  if (ringrun_submit(&r, &h) != RINGRUN_OK || ringrun_wait(h) != RINGRUN_OK) return fail("allreduce in a set");
  float want = 0;
  for (int m : members) want += static_cast<float>(m);
  if (x != want) return fail("allreduce in a set: result");
  // An allgather of g_rank + 1 elements each, sized by the engine.
  std::vector<float> mine_elems(static_cast<std::size_t>(g_rank) + 1, 1.0f), gathered;
  ringrun_request_init(&r);
  r.collective = RINGRUN_COLLECTIVE_ALLGATHER;
  r.name = "varying";
  r.send = mine_elems.data();
  r.count = mine_elems.size();
  r.allocate = allocate_floats;
  r.allocate_arg = &gathered;
  if (ringrun_submit(&r, &h) != RINGRUN_OK || ringrun_wait(h) != RINGRUN_OK) return fail("varying allgather");
  if (gathered.size() != static_cast<std::size_t>(size * (size + 1) / 2) + 1) return fail("varying allgather: size");
  // Rows of 3 elements, g_rank of them (none from rank 0): every rank, rank 0 too, counts each
  // rank's rows by the size of a row.
  std::vector<float> my_rows(static_cast<std::size_t>(g_rank) * 3, 2.0f);
  const std::int64_t shape[2] = {g_rank, 3};
  SizedOutput by_rows;
  ringrun_request_init(&r);
  r.collective = RINGRUN_COLLECTIVE_ALLGATHER;
  r.name = "varying.rows";
  r.send = my_rows.data();
  r.count = my_rows.size();
  r.shape = shape;
  r.ndim = 2;
  r.allocate = allocate_counting_rows;
  r.allocate_arg = &by_rows;
  if (ringrun_submit(&r, &h) != RINGRUN_OK || ringrun_wait(h) != RINGRUN_OK) return fail("allgather of rows");
  if (by_rows.rows.size() != static_cast<std::size_t>(size)) return fail("allgather of rows: one row count per rank");
  for (int k = 0; k < size; ++k)
    if (by_rows.rows[static_cast<std::size_t>(k)] != static_cast<std::size_t>(k))
      return fail("allgather of rows: the rows from rank " + std::to_string(k));
  // Rows of no elements cannot be counted: refused at submission, naming the tensor.
  const std::int64_t empty_rows[2] = {2, 0};
  r.name = "varying.empty";
  r.count = 0;
  r.shape = empty_rows;
  if (ringrun_submit(&r, &h) != RINGRUN_ERR_INVALID_ARGUMENT || !std::strstr(ringrun_last_error(), "'varying.empty'"))
    return fail("an allgather of rows without elements was not refused");
  // An alltoall of one element to each rank.
  std::vector<float> to_all(static_cast<std::size_t>(size), static_cast<float>(g_rank)), from_all;
  ringrun_request_init(&r);
  r.collective = RINGRUN_COLLECTIVE_ALLTOALL;
  r.name = "exchange";
  r.send = to_all.data();
  r.count = to_all.size();
  r.allocate = allocate_floats;
  r.allocate_arg = &from_all;
  if (ringrun_submit(&r, &h) != RINGRUN_OK || ringrun_wait(h) != RINGRUN_OK) return fail("alltoall");
  for (int k = 0; k < size; ++k)
    if (from_all[static_cast<std::size_t>(k)] != static_cast<float>(k)) return fail("alltoall: result");
  // Join: every rank at once; the last is a rank of the job.
  int last = -1;
  ringrun_request_init(&r);
  r.collective = RINGRUN_COLLECTIVE_JOIN;
  r.recv = &last;
  if (ringrun_submit(&r, &h) != RINGRUN_OK || ringrun_wait(h) != RINGRUN_OK || last < 0 || last >= size)
    return fail("join");
  if (odd_set && ringrun_remove_process_set(odd_set) != RINGRUN_OK) return fail("remove_process_set");
  return 0;  // the even set stays for ringrun_finalize
}

// A mismatch, then ringrun_finalize with an op pending and calls after it. 0, or fail()'s 1.
int mismatch_and_finalize() {
  // A mismatch through the C API: every rank gets RINGRUN_ERR_MISMATCH naming the tensor.
  std::vector<float> m(static_cast<std::size_t>(4 + g_rank), 1.0f);
  ringrun_handle mismatch = nullptr;
  if (ringrun_allreduce_async("mismatched", m.data(), m.data(), m.size(), RINGRUN_FLOAT32, RINGRUN_SUM, &mismatch) !=
      RINGRUN_OK)
    return fail("submit mismatched");
  if (ringrun_wait(mismatch) != RINGRUN_ERR_MISMATCH || !std::strstr(ringrun_last_error(), "'mismatched'"))
    return fail("mismatch not reported");

  // An op only this rank submits: ringrun_finalize completes it with an error.
  float lonely = 1;
  std::string name = "lonely." + std::to_string(g_rank);
  ringrun_handle pending = nullptr;
  if (ringrun_allreduce_async(name.c_str(), &lonely, &lonely, 1, RINGRUN_FLOAT32, RINGRUN_SUM, &pending) != RINGRUN_OK)
    return fail("submit lonely");
  if (ringrun_finalize() != RINGRUN_OK) return fail("ringrun_finalize");
  if (ringrun_wait(pending) != RINGRUN_ERR_NOT_INITIALIZED || !std::strstr(ringrun_last_error(), name.c_str()))
    return fail("pending op after finalize");
  std::printf("engine rank %d: pending op: %s\n", g_rank, ringrun_last_error());
  // After finalize the stopped engine is not used again: calls are refused, as before any init.
  ringrun_handle late = nullptr;
  if (ringrun_allreduce_async("late", &lonely, &lonely, 1, RINGRUN_FLOAT32, RINGRUN_SUM, &late) != RINGRUN_ERR_NOT_INITIALIZED ||
      late != nullptr || !std::strstr(ringrun_last_error(), "ringrun_init"))
    return fail("async call after finalize");
  if (ringrun_allreduce(&lonely, &lonely, 1, RINGRUN_FLOAT32, RINGRUN_SUM) != RINGRUN_ERR_NOT_INITIALIZED)
    return fail("sync call after finalize");
  return 0;
}

}  // namespace

int main() {
  const ringrun::test::ProcessCounts at_start = ringrun::test::process_counts();
  if (ringrun_init() != RINGRUN_OK) return fail("ringrun_init");
  g_rank = ringrun_rank();
  const int size = ringrun_size();

  float before = static_cast<float>(g_rank + 1);
  if (ringrun_allreduce(&before, &before, 1, RINGRUN_FLOAT32, RINGRUN_SUM) != RINGRUN_OK) return fail("sync allreduce");
  if (before != static_cast<float>(size * (size + 1) / 2)) return fail("sync allreduce result");
  if (int failed = async_ops_from_two_threads(size)) return failed;
  if (int failed = process_sets_and_general_submissions(size)) return failed;
  if (int failed = mismatch_and_finalize()) return failed;

  const ringrun::test::ProcessCounts after = ringrun::test::process_counts();
  if (after.threads != at_start.threads || after.sockets != 0)
    return fail("after finalize: " + std::to_string(after.threads) + " threads (" + std::to_string(at_start.threads) +
                " before init), " + std::to_string(after.sockets) + " sockets");
  std::printf("engine rank %d: ok\n", g_rank);
  return 0;
}

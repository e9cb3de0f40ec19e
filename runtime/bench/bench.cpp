// ringrun-bench: nccl-tests style sweep of ringrun's collectives, with a peer library (Open MPI or
// Gloo) timed on the same ranks and buffers in the same run, alternating sample by sample so both
// see the same machine state. One row per size in nccl-tests' columns, then the peer's; RESULTS.md
// describes them ("Columns") and the method ("Method") and holds the runs ("Collectives").
#include "bench_options.hpp"
#include "bound.hpp"
#include "check.hpp"
#include "common.hpp"
#include "engine_bench.hpp"
#include "dtype.hpp"
#include "peer.hpp"
#include "wire.hpp"

#include <ringrun/environment_variables.hpp>
#include <ringrun/ringrun.h>

#ifdef RINGRUN_BENCH_HAVE_MPI
#include <mpi.h>
#endif

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ringrun::bench {

std::string_view collective_name(Collective collective) {
  switch (collective) {
    case Collective::allreduce: return "allreduce";
    case Collective::broadcast: return "broadcast";
    case Collective::allgather: return "allgather";
  }
  return "unknown";
}

namespace {

constexpr std::size_t kMemcpyBytes = 64 * kMiB;
constexpr std::size_t kMemcpyFracMinBytes = 16 * kMiB;  // memcpy_frac is shown from this size on

// Single-core memcpy bandwidth in GB/s: rank 0 copies 64 MiB (3 warm-ups, median of 20) while the
// other ranks wait in a barrier. The ceiling a one-thread-per-rank allreduce can reach.
double measure_memcpy_GBps(int rank) {
  check_rc(ringrun_barrier(), "ringrun_barrier");
  double result = 0;
  if (rank == 0) {
    Buffer source(kMemcpyBytes), destination(kMemcpyBytes);
    std::memset(source.data(), 1, kMemcpyBytes);
    std::vector<double> seconds;
    for (int rep = 0; rep < 23; ++rep) {
      const auto start = Clock::now();
      std::memcpy(destination.data(), source.data(), kMemcpyBytes);
      asm volatile("" ::: "memory");  // the copy happens, whatever the optimiser thinks
      const double elapsed = seconds_since(start);
      if (rep >= 3) seconds.push_back(elapsed);
    }
    result = static_cast<double>(kMemcpyBytes) / median(seconds) / 1e9;
  }
  check_rc(ringrun_broadcast(&result, 1, RINGRUN_FLOAT64, 0), "ringrun_broadcast (memcpy result)");
  return result;
}

int ringrun_run(const CollectiveCall &call) {
  switch (call.collective) {
    case Collective::allreduce: return ringrun_allreduce(call.send, call.recv, call.count, call.dtype, call.op);
    case Collective::broadcast: return ringrun_broadcast(call.recv, call.count, call.dtype, call.root);
    case Collective::allgather: return ringrun_allgather(call.send, call.count, call.dtype, call.recv);
  }
  return RINGRUN_ERR_INVALID_ARGUMENT;
}

std::string ringrun_what(const CollectiveCall &call) {
  return fmt::format("ringrun_{} of {} x {}", collective_name(call.collective), call.count, dtype_name(call.dtype));
}

// The factor nccl-tests applies to algbw so that busbw compares with link bandwidth.
double busbw_factor(Collective collective, int ranks) {
  switch (collective) {
    case Collective::allreduce: return 2.0 * (ranks - 1) / ranks;
    case Collective::broadcast: return 1.0;
    case Collective::allgather: return static_cast<double>(ranks - 1) / ranks;
  }
  return 1.0;
}

struct Row {
  Collective collective{};
  std::size_t size = 0;   // bytes: the message (allgather: the gathered result, as nccl-tests)
  std::size_t count = 0;  // elements of that message
  double time_us = 0, algbw_GBps = 0, busbw_GBps = 0;
  std::optional<std::size_t> wrong;
  std::optional<double> peer_time_us, peer_busbw_GBps, ratio, memcpy_frac;
  std::optional<double> bound_time_us, bound_frac;  // allreduce on a modelled transport, from kBoundMinBytes
  std::optional<double> wire_time_us, wire_frac;    // allreduce across hosts, from kWireMinBytes
};

struct Context {
  explicit Context(const Options &options_in) : options(options_in) {}
  const Options &options;
  int rank = 0;
  int ranks = 1;
  Peer *peer = nullptr;
  std::string peer_name;
  double memcpy_GBps = 0;
  std::optional<StreamRates> stream;  // measured when the sweep has an allreduce
  std::string transport;              // ringrun_transport_name(): which bytes model applies
  std::optional<WireRate> wire;       // measured when an allreduce sweep reaches kWireMinBytes across hosts
  std::string wire_why_not;
};

void print_header(const Context &context, Collective collective, const std::string &peer_description) {
  const auto &options = context.options;
  fmt::print("# ringrun-bench {}: {} ranks, dtype {}, op {}, {} samples per size (median of the slowest rank), "
             "sizes {}..{} x{}\n",
             collective_name(collective), context.ranks, dtype_name(options.dtype),
             collective == Collective::allreduce ? op_name(options.op) : "none", options.iters,
             options.min_bytes, options.max_bytes, options.step_factor);
  fmt::print("# peer: {}\n", peer_description);
  fmt::print("# memcpy_1core_GBps {:.2f} (64 MiB glibc memcpy on rank 0, median of 20); memcpy_frac = "
             "busbw / memcpy_1core_GBps, shown from 16 MiB\n",
             context.memcpy_GBps);
  if (collective == Collective::allreduce && context.stream)
    fmt::print("{}", bound_header(*context.stream, context.ranks, context.transport));
  if (collective == Collective::allreduce && (context.wire || (!context.wire_why_not.empty() && context.wire_why_not != kOneHost)))
    fmt::print("{}", wire_header(context.wire, context.wire_why_not));
  fmt::print("#{:>11} {:>11} {:>8} {:>4} {:>11} {:>10} {:>10} {:>6} {:>12} {:>15} {:>6} {:>11} {:>10} {:>9}\n", "size",
             "count", "type", "op", "time_us", "algbw_GBps", "busbw_GBps", "wrong", "peer_time_us",
             "peer_busbw_GBps", "ratio", "memcpy_frac", "bound_frac", "wire_frac");
  std::fflush(stdout);
}

void print_row(const Context &context, const Row &row) {
  const char *op = row.collective == Collective::allreduce ? op_name(context.options.op).data() : "none";
  fmt::print("{:>12} {:>11} {:>8} {:>4} {:>11.2f} {:>10.3f} {:>10.3f} {:>6} {:>12} {:>15} {:>6} {:>11} {:>10} {:>9}\n",
             row.size, row.count, dtype_name(context.options.dtype), op, row.time_us, row.algbw_GBps,
             row.busbw_GBps, row.wrong ? fmt::format("{}", *row.wrong) : "-", or_dash(row.peer_time_us, 2),
             or_dash(row.peer_busbw_GBps, 3), or_dash(row.ratio, 2), or_dash(row.memcpy_frac, 2),
             or_dash(row.bound_frac, 2), or_dash(row.wire_frac, 2));
  std::fflush(stdout);
}

std::string row_json(const Context &context, const Row &row) {
  const bool reduces = row.collective == Collective::allreduce;
  return fmt::format(
      "{{\"collective\": \"{}\", \"size\": {}, \"count\": {}, \"type\": \"{}\", \"op\": \"{}\", "
      "\"ranks\": {}, \"time_us\": {}, \"algbw_GBps\": {}, \"busbw_GBps\": {}, \"wrong\": {}, "
      "\"peer\": {}, \"peer_time_us\": {}, \"peer_busbw_GBps\": {}, \"ratio\": {}, "
      "\"memcpy_GBps\": {}, \"memcpy_frac\": {}, \"stream_copy_GBps\": {}, \"stream_sum_GBps\": {}, "
      "\"bound_time_us\": {}, \"bound_frac\": {}, \"wire_GBps\": {}, \"wire_time_us\": {}, \"wire_frac\": {}}}",
      collective_name(row.collective), row.size, row.count, dtype_name(context.options.dtype),
      reduces ? op_name(context.options.op) : "none", context.ranks, json_number(row.time_us),
      json_number(row.algbw_GBps), json_number(row.busbw_GBps),
      row.wrong ? fmt::format("{}", *row.wrong) : "null",
      context.peer ? fmt::format("\"{}\"", context.peer_name) : "null", json_number(row.peer_time_us),
      json_number(row.peer_busbw_GBps), json_number(row.ratio), json_number(context.memcpy_GBps),
      json_number(row.memcpy_frac),
      json_number(context.stream ? std::optional<double>(context.stream->copy_GBps) : std::nullopt),
      json_number(context.stream ? std::optional<double>(context.stream->sum_GBps) : std::nullopt),
      json_number(row.bound_time_us), json_number(row.bound_frac),
      json_number(context.wire ? std::optional<double>(context.wire->host_GBps) : std::nullopt),
      json_number(row.wire_time_us), json_number(row.wire_frac));
}

// Sizes of the sweep for one collective, with the element count per rank each needs.
std::vector<std::pair<std::size_t, std::size_t>> sweep(const Options &options, Collective collective, int ranks) {
  const std::size_t element = dtype_bytes(options.dtype);
  const std::size_t ranks_in_message = collective == Collective::allgather ? static_cast<std::size_t>(ranks) : 1;
  std::vector<std::pair<std::size_t, std::size_t>> sizes;  // (message bytes, count per rank)
  for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.step_factor) {
    const std::size_t per_rank = std::max<std::size_t>(1, bytes / (element * ranks_in_message));
    const std::size_t message = per_rank * element * ranks_in_message;
    if (sizes.empty() || sizes.back().first != message) sizes.emplace_back(message, per_rank);
    if (bytes > options.max_bytes / options.step_factor) break;
  }
  return sizes;
}

// bound_time: the bytes each rank must move to and from memory at the streaming rate (bound.hpp).
void set_bound(const Context &context, Row &row, double seconds) {
  if (row.collective != Collective::allreduce || !context.stream || row.size < kBoundMinBytes) return;
  const auto bound_seconds = allreduce_bound_seconds(row.size, context.transport, *context.stream);
  if (!bound_seconds) return;
  row.bound_time_us = *bound_seconds * 1e6;
  row.bound_frac = *bound_seconds / seconds;
}

// wire_time: the bytes each host must send across the hosts at the raw TCP rate (wire.hpp).
void set_wire(const Context &context, Row &row, double seconds) {
  if (row.collective != Collective::allreduce || !context.wire || row.size < kWireMinBytes) return;
  const double wire_seconds = allreduce_wire_seconds(row.size, *context.wire);
  row.wire_time_us = wire_seconds * 1e6;
  row.wire_frac = wire_seconds / seconds;
}

// --check: the call once into zeroed memory (every input is >= 1; the broadcast root keeps its own
// data), and the wrong elements summed over the ranks.
std::size_t wrong_elements(const Context &context, const CollectiveCall &call) {
  void *recv = call.recv;
  const Options &options = context.options;
  const std::size_t count = call.count, element = dtype_bytes(options.dtype);
  if (!(call.collective == Collective::broadcast && context.rank == call.root))
    std::memset(recv, 0, (call.collective == Collective::allgather ? count * context.ranks : count) * element);
  check_rc(ringrun_run(call), ringrun_what(call));
  std::size_t wrong = 0;
  switch (call.collective) {
    case Collective::allreduce: wrong = count_wrong_allreduce(recv, count, options.dtype, options.op, context.ranks); break;
    case Collective::broadcast: wrong = count_wrong_broadcast(recv, count, options.dtype, call.root); break;
    case Collective::allgather: wrong = count_wrong_allgather(recv, count, options.dtype, context.ranks); break;
  }
  return sum_over_ranks(wrong);
}

// The row's times: warm-ups, then ringrun's and the peer's samples alternating so that both see
// the same machine state; medians of the slowest rank, and the bounds' fractions.
void time_row(const Context &context, const CollectiveCall &call, const std::function<void()> &peer_run, Row &row) {
  const Options &options = context.options;
  const std::size_t bytes = row.size;
  const Collective collective = call.collective;
  // The message is built only for a failure: formatting it on every call cost ringrun's samples
  // ~0.1 us each that the peer's (which checks nothing) never paid.
  auto run_ringrun = [&call] {
    if (const int rc = ringrun_run(call); rc != 0) check_rc(rc, ringrun_what(call));
  };
  auto ringrun_barrier_or_fail = [] { check_rc(ringrun_barrier(), "ringrun_barrier"); };
  auto peer_barrier = [&context] { context.peer->barrier(); };

  const int warmup = options.warmup >= 0 ? options.warmup : default_warmup(bytes);
  for (int i = 0; i < warmup; ++i) run_ringrun();
  const int ringrun_k = ops_per_sample(time_sample(ringrun_barrier_or_fail, run_ringrun, 1), options.sample_ms);
  int peer_k = 0;
  if (peer_run) {
    for (int i = 0; i < warmup; ++i) peer_run();
    peer_k = ops_per_sample(time_sample(peer_barrier, peer_run, 1), options.sample_ms);
  }

  // Alternate ringrun and peer samples so that both see the same machine state.
  std::vector<double> ringrun_seconds, peer_seconds;
  for (int sample = 0; sample < options.iters; ++sample) {
    ringrun_seconds.push_back(time_sample(ringrun_barrier_or_fail, run_ringrun, ringrun_k));
    if (peer_run) peer_seconds.push_back(time_sample(peer_barrier, peer_run, peer_k));
  }
  max_over_ranks(ringrun_seconds);
  const double seconds = median(ringrun_seconds);
  const double factor = busbw_factor(collective, context.ranks);
  row.time_us = seconds * 1e6;
  row.algbw_GBps = static_cast<double>(bytes) / seconds / 1e9;
  row.busbw_GBps = row.algbw_GBps * factor;
  if (peer_run) {
    max_over_ranks(peer_seconds);
    const double peer_seconds_median = median(peer_seconds);
    row.peer_time_us = peer_seconds_median * 1e6;
    row.peer_busbw_GBps = static_cast<double>(bytes) / peer_seconds_median / 1e9 * factor;
    if (*row.peer_busbw_GBps > 0) row.ratio = row.busbw_GBps / *row.peer_busbw_GBps;
  }
  if (bytes >= kMemcpyFracMinBytes && context.memcpy_GBps > 0) row.memcpy_frac = row.busbw_GBps / context.memcpy_GBps;
  set_bound(context, row, seconds);
  set_wire(context, row, seconds);
}

void run_collective(const Context &context, Collective collective, std::vector<std::string> &json_rows) {
  const Options &options = context.options;
  const auto sizes = sweep(options, collective, context.ranks);
  if (sizes.empty()) return;
  const std::size_t element = dtype_bytes(options.dtype);
  const std::size_t max_count = sizes.back().second;
  const std::size_t recv_count = collective == Collective::allgather ? max_count * context.ranks : max_count;

  // Persistent buffers at the largest size; every row uses their prefix, ringrun and peer alike.
  Buffer send(collective == Collective::broadcast ? 0 : max_count * element);
  Buffer recv(recv_count * element);
  const ringrun_op fill_op = collective == Collective::allreduce ? options.op : RINGRUN_SUM;
  if (collective != Collective::broadcast) fill_inputs(send.data(), max_count, options.dtype, context.rank, fill_op);
  if (collective == Collective::broadcast && context.rank == 0)
    fill_inputs(recv.data(), max_count, options.dtype, 0, RINGRUN_SUM);

  std::string peer_description = "none (--peer none)";
  if (context.peer) {
    peer_description = context.peer->description(collective);
    std::string why_not;
    CollectiveCall probe{collective, send.data(), recv.data(), 1, options.dtype, options.op, 0};
    if (!context.peer->prepare(probe, why_not)) peer_description += fmt::format(" - not measured: {}", why_not);
  }
  if (context.rank == 0 && !options.json) print_header(context, collective, peer_description);

  for (const auto &[bytes, count] : sizes) {
    const CollectiveCall call{collective, send.data(), recv.data(), count, options.dtype, options.op, 0};
    Row row;
    row.collective = collective;
    row.size = bytes;
    row.count = collective == Collective::allgather ? count * context.ranks : count;

    if (options.check) row.wrong = wrong_elements(context, call);
    std::string why_not;
    std::function<void()> peer_run = context.peer ? context.peer->prepare(call, why_not) : std::function<void()>{};
    time_row(context, call, peer_run, row);
    if (context.rank == 0) {
      if (options.json) {
        json_rows.push_back(row_json(context, row));
      } else {
        print_row(context, row);
      }
    }
  }
}

int cpus_bound() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

int run(int argc, char **argv) {
  Options options;
  if (const auto exit_code = parse_options(argc, argv, options)) return *exit_code;

#ifdef RINGRUN_BENCH_HAVE_MPI
  if (options.peer == "mpi") {
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) fail("MPI_Init failed: start the benchmark with mpirun, or pass --peer gloo|none");
    set_mpi_initialized(true);
  }
#endif
  // The collective rows measure the transports' own collectives, as before the engine started in
  // ringrun_init; --collective engine starts it with its first async op and measures it (and its
  // routed calls) beside the direct path. A value the user set wins.
  ::setenv(ringrun::variables::kEngineAtInit.name, "0", 0);
  if (const int rc = ringrun_init(); rc != 0)
    fail(fmt::format("ringrun_init failed ({}): {} (start it with `ringrun -np 2 build/bin/ringrun-bench` or "
                     "`mpirun --allow-run-as-root -np 2 build/bin/ringrun-bench`)",
                     rc, ringrun_last_error()));
  Context context{options};
  context.rank = ringrun_rank();
  context.ranks = ringrun_size();
  context.peer_name = options.peer;

  std::unique_ptr<Peer> peer;
#ifdef RINGRUN_BENCH_HAVE_MPI
  if (options.peer == "mpi") {
    int mpi_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    if (mpi_size != context.ranks)
      fail(fmt::format("MPI has {} ranks but ringrun has {}: start both from the same mpirun", mpi_size, context.ranks));
    peer = make_mpi_peer();
  }
#endif
#ifdef RINGRUN_BENCH_HAVE_GLOO
  if (options.peer == "gloo") peer = connect_gloo(context.rank, context.ranks);
#endif
  context.peer = peer.get();
  context.memcpy_GBps = measure_memcpy_GBps(context.rank);
  if (const char *transport = ringrun_transport_name()) context.transport = transport;
  // The streaming rates take ~1 s and 512 MiB a rank: only for a sweep that reaches bound_frac's sizes.
  if (options.max_bytes >= kBoundMinBytes &&
      std::find(options.collectives.begin(), options.collectives.end(), Collective::allreduce) != options.collectives.end())
    context.stream = measure_stream_rates();
  if (options.max_bytes >= kWireMinBytes &&
      std::find(options.collectives.begin(), options.collectives.end(), Collective::allreduce) != options.collectives.end())
    context.wire = measure_wire_rate(context.transport, context.wire_why_not);

  if (context.rank == 0 && !options.json) {
    const int cpus = cpus_bound();
    fmt::print("# rank 0 may run on {} cpu(s) of {} online\n", cpus, sysconf(_SC_NPROCESSORS_ONLN));
    if (options.peer == "gloo" && cpus == 1)
      fmt::print("# note: rank 0 is bound to one cpu, which Gloo's tcp loop thread shares; start with "
                 "--bind-to none for Gloo's best\n");
  }
  std::vector<std::string> json_rows;
  if (options.engine) {
    EngineBenchContext engine_context;
    engine_context.rank = context.rank;
    engine_context.ranks = context.ranks;
    engine_context.peer = context.peer;
    engine_context.peer_name = context.peer_name;
    engine_context.memcpy_GBps = context.memcpy_GBps;
    run_engine_bench(options.engine_options, engine_context, json_rows);
  }
  for (const Collective collective : options.collectives) run_collective(context, collective, json_rows);
  if (context.rank == 0 && options.json) {
    fmt::print("[\n");
    for (std::size_t i = 0; i < json_rows.size(); ++i)
      fmt::print("  {}{}\n", json_rows[i], i + 1 < json_rows.size() ? "," : "");
    fmt::print("]\n");
  }

  peer.reset();
  check_rc(ringrun_finalize(), "ringrun_finalize");
#ifdef RINGRUN_BENCH_HAVE_MPI
  if (options.peer == "mpi") MPI_Finalize();
#endif
  return 0;
}

}  // namespace
}  // namespace ringrun::bench

int main(int argc, char **argv) { return ringrun::bench::run(argc, argv); }

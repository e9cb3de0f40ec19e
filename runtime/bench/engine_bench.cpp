// The engine benchmark (README, Architecture: engine/): a training step's worth of named async
// allreduces through the engine, against one allreduce of the same total size ("one-big", what
// perfect fusion would cost), the same tensors one by one through ringrun_allreduce and through the
// peer, and the latency of one small tensor through the engine against a plain ringrun_allreduce of
// it.
//
// In phases, because the first async call starts the engine for good and from then on every
// synchronous ringrun_* call is routed through it (api/process_engine.hpp):
//   1. before the engine: ringrun's direct path (one-big, one-by-one) alternating sample by
//      sample with the peer's one-by-one and one-big;
//   2. with the engine: the engine step alternating with the peer's one-by-one again (the
//      speed-up column compares these two), and ringrun_allreduce of the total as the running
//      engine routes it;
//   3. latency, in rounds on fresh runtimes (ringrun_finalize, ringrun_init): in each, the plain
//      call before the engine starts, then the engine op, the routed call and the peer.
// The peer's one-by-one time from phases 1 and 2 is printed, so drift in machine load between
// them shows.
#include "engine_bench.hpp"
#include "engine_report.hpp"

#include "check.hpp"
#include "common.hpp"
#include "dtype.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ringrun::bench {
namespace {

constexpr std::size_t kTensorAlignBytes = 64;  // tensors start on cache lines, as framework allocations do
constexpr int kDefaultStepWarmup = 3;

// One tensor of a workload: a slice of the workload's send and recv buffers.
struct Tensor {
  std::size_t offset = 0;  // elements from the buffer start
  std::size_t count = 0;
};

struct Workload {
  std::string label;       // the row's name in the table
  std::vector<Tensor> tensors;  // in submission order
  std::size_t total_count = 0;  // elements over all tensors
  std::size_t buffer_count = 0; // elements the buffers need (tensors aligned)
};

// Tensor i is submitted as "grad.i" in every workload: all workloads share the first names, so a
// run needs max(tensors) response-cache entries rather than the sum (the default capacity is 1024,
// exactly the fusion workload), and each workload's steady state is what a program with only that
// model would see. The first step of a workload re-describes the names whose size changed.
std::string tensor_name(std::size_t index) { return fmt::format("grad.{}", index); }

Workload make_workload(std::string label, const std::vector<std::size_t> &counts, std::size_t element) {
  Workload workload;
  workload.label = std::move(label);
  const std::size_t align = std::max<std::size_t>(1, kTensorAlignBytes / element);
  std::size_t offset = 0;
  for (const std::size_t count : counts) {
    workload.tensors.push_back({offset, count});
    workload.total_count += count;
    offset += (count + align - 1) / align * align;
  }
  workload.buffer_count = offset;
  return workload;
}

// The 161 trainable parameters of torchvision's ResNet-50 (conv weights, batch-norm weight and
// bias, fc 2048x1000 + 1000), 25,557,032 elements, in the order backward produces their
// gradients (the reverse of model.parameters(): fc first, conv1 last), which is the order
// Horovod's hooks submit them in.
std::vector<std::size_t> resnet50_parameter_counts() {
  std::vector<std::size_t> forward;
  auto batch_norm = [&forward](std::size_t channels) {
    forward.push_back(channels);  // weight
    forward.push_back(channels);  // bias
  };
  forward.push_back(64 * 3 * 7 * 7);  // conv1
  batch_norm(64);
  std::size_t in_channels = 64;
  const std::size_t blocks[] = {3, 4, 6, 3};
  const std::size_t widths[] = {64, 128, 256, 512};
  for (int layer = 0; layer < 4; ++layer) {
    const std::size_t width = widths[layer], out_channels = 4 * width;  // bottleneck expansion 4
    for (std::size_t block = 0; block < blocks[layer]; ++block) {
      forward.push_back(width * in_channels);  // conv1 1x1
      batch_norm(width);
      forward.push_back(width * width * 9);  // conv2 3x3
      batch_norm(width);
      forward.push_back(out_channels * width);  // conv3 1x1
      batch_norm(out_channels);
      if (block == 0) {  // downsample: conv 1x1 + batch norm
        forward.push_back(out_channels * in_channels);
        batch_norm(out_channels);
      }
      in_channels = out_channels;
    }
  }
  forward.push_back(1000 * 2048);  // fc.weight
  forward.push_back(1000);         // fc.bias
  const std::size_t total = std::accumulate(forward.begin(), forward.end(), std::size_t{0});
  if (forward.size() != 161 || total != 25557032)
    fail(fmt::format("internal: ResNet-50 table has {} tensors and {} elements, expected 161 and 25557032",
                     forward.size(), total));
  return {forward.rbegin(), forward.rend()};
}

// One timed contender: `run_once` is one op (latency) or one whole step (workloads).
struct Contender {
  std::function<void()> barrier;
  std::function<void()> run_once;  // empty: not measured (no peer, or the peer lacks the op)
  int warmup = 0;
};

// Seconds per run_once of each contender (slowest rank), `iters` samples each, none for the empty
// ones. Warm-up and the probe for k runs per sample first, then samples alternate between the
// contenders so all see the same machine state (RESULTS.md, "Method").
std::vector<std::vector<double>> sample_alternating(const std::vector<Contender> &contenders,
                                                    const EngineBenchOptions &options, int iters) {
  std::vector<int> runs_per_sample(contenders.size(), 0);
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const Contender &contender = contenders[i];
    if (!contender.run_once) continue;
    for (int w = 0; w < contender.warmup; ++w) contender.run_once();
    runs_per_sample[i] = ops_per_sample(time_sample(contender.barrier, contender.run_once, 1), options.sample_ms);
  }
  std::vector<std::vector<double>> samples(contenders.size());
  for (int sample = 0; sample < iters; ++sample) {
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      if (contenders[i].run_once)
        samples[i].push_back(time_sample(contenders[i].barrier, contenders[i].run_once, runs_per_sample[i]));
    }
  }
  for (std::size_t i = 0; i < contenders.size(); ++i)
    if (contenders[i].run_once) max_over_ranks(samples[i]);
  return samples;
}

std::optional<double> median_of(const std::vector<double> &samples) {
  if (samples.empty()) return std::nullopt;
  return median(samples);
}

// Median seconds per run_once of each contender (slowest rank), nullopt for the empty ones.
std::vector<std::optional<double>> measure_alternating(const std::vector<Contender> &contenders,
                                                       const EngineBenchOptions &options) {
  std::vector<std::optional<double>> medians;
  for (const auto &samples : sample_alternating(contenders, options, options.iters)) medians.push_back(median_of(samples));
  return medians;
}

void ringrun_barrier_or_fail() { check_rc(ringrun_barrier(), "ringrun_barrier"); }

// Buffers and calls for one workload, shared by both phases.
class WorkloadRunner {
 public:
  WorkloadRunner(const Workload &workload, const EngineBenchOptions &options, const EngineBenchContext &context)
      : workload_(workload), options_(options), context_(context), element_(dtype_bytes(options.dtype)),
        send_(workload.buffer_count * element_), recv_(workload.buffer_count * element_),
        handles_(workload.tensors.size(), nullptr), order_(workload.tensors.size()),
        shuffler_(0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(context.rank + 1)) {
    for (const Tensor &tensor : workload.tensors)
      fill_inputs(send_.data() + tensor.offset * element_, tensor.count, options.dtype, context.rank, options.op);
    for (std::size_t i = 0; i < workload.tensors.size(); ++i) names_.push_back(tensor_name(i));
    std::iota(order_.begin(), order_.end(), std::size_t{0});
  }

  const Workload &workload() const { return workload_; }

  // ringrun_allreduce of the total on the persistent buffers: what perfect fusion would cost.
  void one_big() const {
    check_rc(ringrun_allreduce(send_.data(), recv_.data(), workload_.total_count, options_.dtype, options_.op),
             "ringrun_allreduce (one-big)");
  }

  void one_by_one() const {
    for (const Tensor &tensor : workload_.tensors)
      check_rc(ringrun_allreduce(send_.data() + tensor.offset * element_, recv_.data() + tensor.offset * element_,
                                 tensor.count, options_.dtype, options_.op),
               "ringrun_allreduce (one-by-one)");
  }

  // Every tensor submitted as a named async allreduce, then all waited for.
  void engine_step() {
    if (options_.shuffle) std::shuffle(order_.begin(), order_.end(), shuffler_);
    const auto start = Clock::now();
    for (const std::size_t i : order_) {
      const Tensor &tensor = workload_.tensors[i];
      check_rc(ringrun_allreduce_async(names_[i].c_str(), send_.data() + tensor.offset * element_,
                                       recv_.data() + tensor.offset * element_, tensor.count, options_.dtype,
                                       options_.op, &handles_[i]),
               "ringrun_allreduce_async");
    }
    submit_seconds_ += seconds_since(start);
    ++steps_;
    for (const std::size_t i : order_) check_rc(ringrun_wait(handles_[i]), "ringrun_wait");
  }

  // Mean time of a step's submission loop on this rank since the last reset: the part of the
  // step the engine's thread could overlap with.
  double mean_submit_seconds() const { return steps_ ? submit_seconds_ / static_cast<double>(steps_) : 0; }
  void reset_submit_seconds() {
    submit_seconds_ = 0;
    steps_ = 0;
  }

  // The peer's calls for the same tensors one by one, and for the total at once; empty when the
  // peer has none (why_not says why).
  std::function<void()> peer_one_by_one(std::string &why_not) const {
    if (!context_.peer) return {};
    std::vector<std::function<void()>> calls;
    for (const Tensor &tensor : workload_.tensors) {
      auto call = context_.peer->prepare(
          CollectiveCall{Collective::allreduce, send_.data() + tensor.offset * element_,
                         recv_.data() + tensor.offset * element_, tensor.count, options_.dtype, options_.op, 0},
          why_not);
      if (!call) return {};
      calls.push_back(std::move(call));
    }
    return [calls = std::move(calls)] {
      for (const auto &call : calls) call();
    };
  }

  std::function<void()> peer_one_big(std::string &why_not) const {
    if (!context_.peer) return {};
    return context_.peer->prepare(CollectiveCall{Collective::allreduce, send_.data(), recv_.data(),
                                                 workload_.total_count, options_.dtype, options_.op, 0},
                                  why_not);
  }

  void zero_results() const { std::memset(recv_.data(), 0, recv_.bytes()); }

  std::size_t count_wrong_results() const {
    std::size_t wrong = 0;
    for (const Tensor &tensor : workload_.tensors)
      wrong += count_wrong_allreduce(recv_.data() + tensor.offset * element_, tensor.count, options_.dtype,
                                     options_.op, context_.ranks);
    return wrong;
  }

 private:
  const Workload &workload_;
  const EngineBenchOptions &options_;
  const EngineBenchContext &context_;
  std::size_t element_;
  Buffer send_, recv_;
  std::vector<std::string> names_;
  std::vector<ringrun_handle> handles_;
  std::vector<std::size_t> order_;
  std::mt19937_64 shuffler_;  // seeded by rank: every rank submits in its own order
  double submit_seconds_ = 0;
  std::uint64_t steps_ = 0;
};

std::optional<double> to_us(const std::optional<double> &seconds) {
  if (!seconds) return std::nullopt;
  return *seconds * 1e6;
}

std::optional<double> quotient(const std::optional<double> &a, const std::optional<double> &b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

int step_warmup(const EngineBenchOptions &options) { return options.warmup >= 0 ? options.warmup : kDefaultStepWarmup; }

int op_warmup(const EngineBenchOptions &options, std::size_t bytes) {
  return options.warmup >= 0 ? options.warmup : default_warmup(bytes);
}

// Buffers for the latency rows: one tensor at a time, the largest size allocated once.
struct LatencyBuffers {
  LatencyBuffers(std::size_t max_count, const EngineBenchOptions &options, int rank)
      : send(max_count * dtype_bytes(options.dtype)), recv(max_count * dtype_bytes(options.dtype)) {
    fill_inputs(send.data(), max_count, options.dtype, rank, options.op);
  }
  Buffer send, recv;
};


// Phase 1: ringrun's direct path, the engine not yet started.
void measure_direct(WorkloadRunner &runner, WorkloadRow &row, const EngineBenchOptions &options,
                    const EngineBenchContext &context) {
  const std::size_t element = dtype_bytes(options.dtype);
  auto peer_barrier = [&context] { context.peer->barrier(); };
  row.label = runner.workload().label;
  row.tensors = runner.workload().tensors.size();
  row.bytes = runner.workload().total_count * element;
  std::string why_not;
  const int warmup = step_warmup(options);
  const auto results = measure_alternating(
      {Contender{ringrun_barrier_or_fail, [&runner] { runner.one_big(); }, op_warmup(options, row.bytes)},
       Contender{ringrun_barrier_or_fail, [&runner] { runner.one_by_one(); }, warmup},
       Contender{peer_barrier, runner.peer_one_by_one(why_not), warmup},
       Contender{peer_barrier, runner.peer_one_big(why_not), op_warmup(options, row.bytes)}},
      options);
  row.one_big_us = to_us(results[0]);
  row.one_by_one_us = to_us(results[1]);
  row.peer_one_by_one_before_us = to_us(results[2]);
  row.peer_one_big_us = to_us(results[3]);
  row.peer_note = why_not;
}

// Phase 2: the engine. The first async call starts it; from here on ringrun_barrier and the
// timing reductions go through it too.
void measure_engine(WorkloadRunner &runner, WorkloadRow &row, const EngineBenchOptions &options,
                    const EngineBenchContext &context) {
  auto peer_barrier = [&context] { context.peer->barrier(); };
  // The first step describes every name in full (new, or a size the cache has not seen): timed
  // on its own, and checked with --check.
  if (options.check) runner.zero_results();
  std::vector<double> first{time_sample(ringrun_barrier_or_fail, [&runner] { runner.engine_step(); }, 1)};
  if (options.check) row.wrong = sum_over_ranks(runner.count_wrong_results());
  max_over_ranks(first);
  row.first_step_us = first[0] * 1e6;

  std::string why_not;
  const int warmup = step_warmup(options);
  runner.reset_submit_seconds();
  const auto results = measure_alternating(
      {Contender{ringrun_barrier_or_fail, [&runner] { runner.engine_step(); }, warmup},
       Contender{peer_barrier, runner.peer_one_by_one(why_not), warmup},
       Contender{ringrun_barrier_or_fail, [&runner] { runner.one_big(); }, op_warmup(options, row.bytes)}},
      options);
  row.engine_us = to_us(results[0]);
  row.peer_one_by_one_us = to_us(results[1]);
  row.one_big_via_engine_us = to_us(results[2]);
  std::vector<double> submit{runner.mean_submit_seconds()};
  max_over_ranks(submit);
  row.submit_us = submit[0] * 1e6;
  row.fused_fraction = quotient(row.one_big_us, row.engine_us);
  row.fused_fraction_routed = quotient(row.one_big_via_engine_us, row.engine_us);
  row.speedup_vs_peer = quotient(row.peer_one_by_one_us, row.engine_us);
  if (row.peer_note.empty()) row.peer_note = why_not;
}

// Phase 3, latency: the plain call needs the engine stopped, the engine op needs it running. So
// each sample is a round on a fresh runtime (ringrun_finalize, ringrun_init, some
// milliseconds): the plain call first, then with the engine started the engine op, the routed
// synchronous call and the peer. Medians over the rounds: plain and engine see the same
// stretches of machine state, not two phases seconds apart.
void measure_latency(std::vector<LatencyRow> &latency_rows, LatencyBuffers &latency, const EngineBenchOptions &options,
                     const EngineBenchContext &context) {
  const std::size_t element = dtype_bytes(options.dtype);
  auto peer_barrier = [&context] { context.peer->barrier(); };
  const int rounds = options.iters;
  const int iters_per_round = 1;
  struct LatencySamples {
    std::vector<double> plain, engine, sync_via_engine, peer;
  };
  std::vector<LatencySamples> latency_samples(latency_rows.size());
  auto append = [](std::vector<double> &to, const std::vector<double> &from) { to.insert(to.end(), from.begin(), from.end()); };
  for (int round = 0; !latency_rows.empty() && round < rounds; ++round) {
    check_rc(ringrun_finalize(), "ringrun_finalize (latency round)");
    check_rc(ringrun_init(), "ringrun_init (latency round)");
    for (std::size_t k = 0; k < latency_rows.size(); ++k) {
      const LatencyRow &row = latency_rows[k];
      const auto samples = sample_alternating(
          {Contender{ringrun_barrier_or_fail,
                     [&] {
                       check_rc(ringrun_allreduce(latency.send.data(), latency.recv.data(), row.count, options.dtype,
                                                  options.op),
                                "ringrun_allreduce (plain)");
                     },
                     op_warmup(options, row.bytes)}},
          options, iters_per_round);
      append(latency_samples[k].plain, samples[0]);
    }
    for (std::size_t k = 0; k < latency_rows.size(); ++k) {
      LatencyRow &row = latency_rows[k];
      // Always the same name, as a program's one small tensor would be; its first op with a new
      // size is described in full and lands in the warm-up.
      const std::string name = tensor_name(0);
      auto engine_op = [&] {
        ringrun_handle handle = nullptr;
        check_rc(ringrun_allreduce_async(name.c_str(), latency.send.data(), latency.recv.data(), row.count,
                                         options.dtype, options.op, &handle),
                 "ringrun_allreduce_async");
        check_rc(ringrun_wait(handle), "ringrun_wait");
      };
      if (options.check && round == 0) {
        std::memset(latency.recv.data(), 0, row.count * element);
        engine_op();
        row.wrong = sum_over_ranks(
            count_wrong_allreduce(latency.recv.data(), row.count, options.dtype, options.op, context.ranks));
      }
      std::string why_not;
      std::function<void()> peer_op;
      if (context.peer)
        peer_op = context.peer->prepare(CollectiveCall{Collective::allreduce, latency.send.data(), latency.recv.data(),
                                                       row.count, options.dtype, options.op, 0},
                                        why_not);
      const int warmup = op_warmup(options, row.bytes);
      const auto samples = sample_alternating(
          {Contender{ringrun_barrier_or_fail, engine_op, warmup},
           Contender{ringrun_barrier_or_fail,
                     [&] {
                       check_rc(ringrun_allreduce(latency.send.data(), latency.recv.data(), row.count, options.dtype,
                                                  options.op),
                                "ringrun_allreduce (through the engine)");
                     },
                     warmup},
           Contender{peer_barrier, peer_op, warmup}},
          options, iters_per_round);
      append(latency_samples[k].engine, samples[0]);
      append(latency_samples[k].sync_via_engine, samples[1]);
      append(latency_samples[k].peer, samples[2]);
    }
  }
  for (std::size_t k = 0; k < latency_rows.size(); ++k) {
    LatencyRow &row = latency_rows[k];
    row.plain_us = to_us(median_of(latency_samples[k].plain));
    row.engine_us = to_us(median_of(latency_samples[k].engine));
    row.sync_via_engine_us = to_us(median_of(latency_samples[k].sync_via_engine));
    row.peer_us = to_us(median_of(latency_samples[k].peer));
    row.ratio = quotient(row.engine_us, row.plain_us);
  }
}

}  // namespace

void run_engine_bench(const EngineBenchOptions &options, const EngineBenchContext &context,
                      std::vector<std::string> &json_rows) {
  const std::size_t element = dtype_bytes(options.dtype);
  std::vector<Workload> workloads;
  if (options.run_fusion) {
    const std::size_t count = std::max<std::size_t>(1, options.fusion_tensor_bytes / element);
    workloads.push_back(make_workload(fmt::format("{}x{}", options.fusion_tensors, size_label(count * element)),
                                      std::vector<std::size_t>(options.fusion_tensors, count), element));
  }
  if (options.run_resnet50) workloads.push_back(make_workload("resnet50", resnet50_parameter_counts(), element));
  std::vector<std::unique_ptr<WorkloadRunner>> runners;
  for (const Workload &workload : workloads)
    runners.push_back(std::make_unique<WorkloadRunner>(workload, options, context));

  std::vector<LatencyRow> latency_rows;
  std::size_t max_latency_count = 1;
  if (options.run_latency) {
    for (const std::size_t bytes : options.latency_sizes) {
      LatencyRow row;
      row.count = std::max<std::size_t>(1, bytes / element);
      row.bytes = row.count * element;
      max_latency_count = std::max(max_latency_count, row.count);
      latency_rows.push_back(row);
    }
  }
  LatencyBuffers latency(max_latency_count, options, context.rank);

  if (context.rank == 0 && !options.json) print_header(options, context);

  std::vector<WorkloadRow> rows(workloads.size());
  for (std::size_t w = 0; w < workloads.size(); ++w) measure_direct(*runners[w], rows[w], options, context);
  for (std::size_t w = 0; w < workloads.size(); ++w) measure_engine(*runners[w], rows[w], options, context);
  measure_latency(latency_rows, latency, options, context);

  if (context.rank != 0) return;
  if (options.json) {
    for (const WorkloadRow &row : rows) json_rows.push_back(workload_json(row, options, context));
    for (const LatencyRow &row : latency_rows) json_rows.push_back(latency_json(row, options, context));
    return;
  }
  if (!rows.empty()) print_workload_table(rows);
  if (!latency_rows.empty()) print_latency_table(latency_rows);
}

}  // namespace ringrun::bench

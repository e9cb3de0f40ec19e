// ringrun-bench's command line (bench_options.hpp).
#include "bench_options.hpp"

#include "common.hpp"
#include "dtype.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <ringrun/environment_variables.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace ringrun::bench {
namespace {

// The options' words before they are checked and turned into Options.
struct OptionWords {
  std::string collective = "allreduce", min_bytes = "4", max_bytes = "256M", dtype = "float32", op = "sum";
  std::string engine_tensor_bytes = "4K", engine_rows = "fusion,resnet50,latency", latency_sizes = "4,4K,64K,1M";
};

std::vector<std::string> split_commas(const std::string &text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return parts;
}

// "4", "64K", "256M", "1G" (binary units, as nccl-tests reads them).
std::optional<std::size_t> parse_bytes(const std::string &text) {
  if (text.empty()) return std::nullopt;
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 12) return std::nullopt;  // 12 digits: up to about a terabyte
  const std::size_t value = std::stoull(text.substr(0, digits));
  const std::string suffix = text.substr(digits);
  if (suffix.empty() || suffix == "B") return value;
  if (suffix == "K" || suffix == "KiB" || suffix == "k") return value << 10;
  if (suffix == "M" || suffix == "MiB") return value << 20;
  if (suffix == "G" || suffix == "GiB") return value << 30;
  return std::nullopt;
}

void add_options(CLI::App &app, Options &options, OptionWords &words) {
  app.add_option("--collective", words.collective,
                 "allreduce, broadcast, allgather, all (those three), or engine: tensor fusion and latency of "
                 "the async engine (not part of all: once the engine runs, every synchronous call goes through it)")
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather", "all", "engine"}))
      ->capture_default_str();
  app.add_option("-b,--min-bytes", words.min_bytes, "smallest message (4, 64K, 1M, ...)")->capture_default_str();
  app.add_option("-e,--max-bytes", words.max_bytes, "largest message")->capture_default_str();
  app.add_option("-f,--step-factor", options.step_factor, "size multiplier between rows")
      ->check(CLI::Range(std::size_t{2}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("-n,--iters", options.iters, "timed samples per size and library (median reported; engine latency rows: one round "
                 "on a fresh runtime per sample)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("-w,--warmup", options.warmup,
                 "warm-up ops per size and library; default 50 below 1 MiB, 5 up to 16 MiB, 2 above "
                 "(engine: steps per workload, default 3, and ops per latency size and round as here)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--sample-ms", options.sample_ms, "target length of one sample (k ops back to back)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  app.add_option("-d,--dtype", words.dtype, "float32 float64 float16 bfloat16 int32 int64 uint8")->capture_default_str();
  app.add_option("-o,--op", words.op, "sum avg min max prod (allreduce)")->capture_default_str();
  app.add_option("--peer", options.peer,
                 "mpi (needs mpirun), gloo, none; auto = mpi under mpirun, else gloo, else none")
      ->check(CLI::IsMember({"auto", "mpi", "gloo", "none"}))
      ->capture_default_str();
  app.add_flag("-c,--check", options.check, "verify ringrun's results; the wrong column counts wrong elements");
  app.add_flag("--json", options.json, "print one JSON array of row objects instead of the table");
  EngineBenchOptions &engine = options.engine_options;
  app.add_option("--engine-tensors", engine.fusion_tensors, "engine: tensors of the fusion workload")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--engine-tensor-bytes", words.engine_tensor_bytes, "engine: bytes of each fusion-workload tensor")
      ->capture_default_str();
  app.add_option("--engine-rows", words.engine_rows,
                 "engine: comma list of fusion (N x B tensors), resnet50 (161 tensors, 25.6 M elements), latency")
      ->capture_default_str();
  app.add_option("--latency-sizes", words.latency_sizes, "engine: comma list of one-tensor sizes for the latency rows")
      ->capture_default_str();
  app.add_flag("--shuffle", engine.shuffle,
               "engine: every rank submits each step's tensors in its own random order (default: in order)");
}

// The words checked and turned into options: a usage error's exit code, else nullopt.
std::optional<int> apply_words(const OptionWords &words, Options &options) {
  EngineBenchOptions &engine = options.engine_options;
  auto usage_error = [](const std::string &message) -> std::optional<int> {
    if (launcher_rank() == 0) std::fprintf(stderr, "ringrun-bench: %s\n", message.c_str());
    return 2;
  };
  if (words.collective == "engine") {
    options.engine = true;
  } else if (words.collective == "all") {
    options.collectives = {Collective::allreduce, Collective::broadcast, Collective::allgather};
  } else if (words.collective == "broadcast") {
    options.collectives = {Collective::broadcast};
  } else if (words.collective == "allgather") {
    options.collectives = {Collective::allgather};
  } else {
    options.collectives = {Collective::allreduce};
  }
  const auto min = parse_bytes(words.min_bytes), max = parse_bytes(words.max_bytes);
  if (!min || *min == 0) return usage_error(fmt::format("--min-bytes '{}': expected a positive size like 4, 64K or 1M", words.min_bytes));
  if (!max || *max == 0) return usage_error(fmt::format("--max-bytes '{}': expected a positive size like 1M or 256M", words.max_bytes));
  if (*min > *max) return usage_error(fmt::format("--min-bytes {} is above --max-bytes {}: swap them", words.min_bytes, words.max_bytes));
  options.min_bytes = *min;
  options.max_bytes = *max;

  const auto tensor_bytes = parse_bytes(words.engine_tensor_bytes);
  if (!tensor_bytes || *tensor_bytes == 0)
    return usage_error(fmt::format("--engine-tensor-bytes '{}': expected a positive size like 4K", words.engine_tensor_bytes));
  engine.fusion_tensor_bytes = *tensor_bytes;
  engine.run_fusion = engine.run_resnet50 = engine.run_latency = false;
  for (const auto &row : split_commas(words.engine_rows)) {
    if (row == "fusion") engine.run_fusion = true;
    else if (row == "resnet50") engine.run_resnet50 = true;
    else if (row == "latency") engine.run_latency = true;
    else return usage_error(fmt::format("--engine-rows: '{}' is not a row; use fusion, resnet50 and/or latency", row));
  }
  engine.latency_sizes.clear();
  for (const auto &size : split_commas(words.latency_sizes)) {
    const auto bytes = parse_bytes(size);
    if (!bytes || *bytes == 0)
      return usage_error(fmt::format("--latency-sizes: '{}' is not a positive size like 4, 4K or 1M", size));
    engine.latency_sizes.push_back(*bytes);
  }
  const auto parsed_dtype = parse_dtype(words.dtype);
  if (!parsed_dtype) return usage_error(fmt::format("--dtype '{}': use float32, float64, float16, bfloat16, int32, int64 or uint8", words.dtype));
  options.dtype = *parsed_dtype;
  const auto parsed_op = parse_op(words.op);
  if (!parsed_op) return usage_error(fmt::format("--op '{}': use sum, avg, min, max or prod", words.op));
  options.op = *parsed_op;
  engine.dtype = options.dtype;
  engine.op = options.op;
  engine.iters = options.iters;
  engine.warmup = options.warmup;
  engine.sample_ms = options.sample_ms;
  engine.check = options.check;
  engine.json = options.json;

  if (options.peer == "auto") {
#if defined(RINGRUN_BENCH_HAVE_MPI)
    if (started_by_mpirun()) options.peer = "mpi";
#endif
#if defined(RINGRUN_BENCH_HAVE_GLOO)
    if (options.peer == "auto") options.peer = "gloo";
#endif
    if (options.peer == "auto") options.peer = "none";
  }
#ifndef RINGRUN_BENCH_HAVE_MPI
  if (options.peer == "mpi") return usage_error("--peer mpi: this build has no MPI (install libopenmpi-dev and reconfigure), or use --peer gloo|none");
#else
  if (options.peer == "mpi" && !started_by_mpirun())
    return usage_error("--peer mpi needs Open MPI's mpirun: run `mpirun --allow-run-as-root -np 2 build/bin/ringrun-bench`, or pass --peer gloo|none");
#endif
#ifndef RINGRUN_BENCH_HAVE_GLOO
  if (options.peer == "gloo") return usage_error("--peer gloo: this build has no Gloo (install libgloo-dev and reconfigure), or use --peer mpi|none");
#endif
  return std::nullopt;
}

}  // namespace

int launcher_rank() {
  for (const char *name : {ringrun::variables::kRank.name, "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char *value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

bool started_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::optional<int> parse_options(int argc, char **argv, Options &options) {
  CLI::App app{"ringrun-bench: ringrun's collectives against Open MPI or Gloo on the same ranks.\n"
               "Run under a launcher, e.g. `mpirun --allow-run-as-root -np 2 --bind-to core "
               "build/bin/ringrun-bench`."};
  OptionWords words;
  add_options(app, options, words);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &error) {
    if (launcher_rank() != 0) return error.get_exit_code() == 0 ? 0 : 2;
    const int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  return apply_words(words, options);
}

}  // namespace ringrun::bench

// One rank of the fault-injection tests, through the C API only.
//   fault_rank loop SECONDS     allreduce (64 Ki floats) in a loop for SECONDS; writes its pid to
//                               $FAULT_PID_DIR/RANK once initialised (when set); on an error prints
//                               "rank R: failed after T ms: <error>" and exits 3; else "rank R: ok"
//   fault_rank late SECONDS     rank 1 sleeps SECONDS before ringrun_init(); the others init
//                               (their start timeout should name rank 1) and exit 2 on failure
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ringrun/ringrun.h"

namespace {

using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

int init_or_report() {
  const auto start = Clock::now();
  if (ringrun_init() != 0) {
    std::fprintf(stderr, "fault_rank: ringrun_init failed after %lld ms: %s\n", ms_since(start), ringrun_last_error());
    return 2;
  }
  return 0;
}

int loop(double seconds) {
  if (int rc = init_or_report()) return rc;
  const int rank = ringrun_rank();
  if (const char* dir = std::getenv("FAULT_PID_DIR")) {
    std::ofstream(std::string(dir) + "/" + std::to_string(rank) + ".tmp") << ::getpid() << "\n";
    std::rename((std::string(dir) + "/" + std::to_string(rank) + ".tmp").c_str(),
                (std::string(dir) + "/" + std::to_string(rank)).c_str());
  }
  std::vector<float> data(64 * 1024, 1.0f);
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  long iterations = 0;
  for (;;) {
    // Every 16 allreduces the ranks agree whether anyone's time is up (MAX of the flags), so all
    // stop after the same allreduce.
    if (iterations % 16 == 0) {
      std::int32_t stop = Clock::now() >= deadline ? 1 : 0;
      if (ringrun_allreduce(&stop, &stop, 1, RINGRUN_INT32, RINGRUN_MAX) != 0) {
        std::printf("rank %d: failed after 0 ms: %s\n", rank, ringrun_last_error());
        std::fflush(stdout);
        return 3;
      }
      if (stop) break;
    }
    const auto start = Clock::now();
    if (ringrun_allreduce(data.data(), data.data(), data.size(), RINGRUN_FLOAT32, RINGRUN_MAX) != 0) {
      std::printf("rank %d: failed after %lld ms: %s\n", rank, ms_since(start), ringrun_last_error());
      std::fflush(stdout);
      return 3;
    }
    ++iterations;
  }
  std::printf("rank %d: ok after %ld allreduces\n", rank, iterations);
  ringrun_finalize();
  return 0;
}

int late(double seconds) {
  const char* rank = std::getenv("RINGRUN_RANK");
  if (rank && std::string(rank) == "1") std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  if (int rc = init_or_report()) return rc;
  ringrun_finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 10;
  if (mode == "loop") return loop(seconds);
  if (mode == "late") return late(seconds);
  std::fprintf(stderr, "usage: fault_rank loop|late SECONDS\n");
  return 64;
}

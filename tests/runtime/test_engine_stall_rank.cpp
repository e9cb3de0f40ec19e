// One rank of the stall warning's process test, through the C API only: `late_rank delay_ms`.
// Every rank's first named op is "late.first"; rank `late_rank` submits it delay_ms after
// ringrun_init(). Prints "stall rank R: ok" and exits 0, or prints what failed and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <chrono>

#include "ringrun/ringrun.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LATE_RANK DELAY_MS\n", argv[0]);
    return 2;
  }
  const int late_rank = std::atoi(argv[1]);
  const int delay_ms = std::atoi(argv[2]);
  if (ringrun_init() != RINGRUN_OK) {
    std::printf("stall rank ?: FAILED: ringrun_init: %s\n", ringrun_last_error());
    return 1;
  }
  const int rank = ringrun_rank();
  const int size = ringrun_size();
  if (rank == late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  float x[4] = {1, 1, 1, 1}, y[4] = {0, 0, 0, 0};
  ringrun_handle handle = nullptr;
  int code = ringrun_allreduce_async("late.first", x, y, 4, RINGRUN_FLOAT32, RINGRUN_SUM, &handle);
  if (code == RINGRUN_OK) code = ringrun_wait(handle);
  if (code != RINGRUN_OK || y[0] != static_cast<float>(size)) {
    std::printf("stall rank %d: FAILED: code %d, sum %g (last error: %s)\n", rank, code, static_cast<double>(y[0]),
                ringrun_last_error());
    return 1;
  }
  if (ringrun_finalize() != RINGRUN_OK) {
    std::printf("stall rank %d: FAILED: ringrun_finalize: %s\n", rank, ringrun_last_error());
    return 1;
  }
  std::printf("stall rank %d: ok\n", rank);
  return 0;
}

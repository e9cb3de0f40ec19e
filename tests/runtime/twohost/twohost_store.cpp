// The rendezvous store of the two-host test, as ringrun would host it: serves on ADDRESS (port
// chosen by the system), prints the port on one line, and serves until stdin closes or it is
// killed. The job secret comes from RINGRUN_JOB_SECRET (never from the command line).
//   twohost_store ADDRESS
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ringrun/store.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: twohost_store ADDRESS (secret in RINGRUN_JOB_SECRET)\n");
    return 2;
  }
  const char* secret = std::getenv("RINGRUN_JOB_SECRET");
  if (!secret || !*secret) {
    std::fprintf(stderr, "twohost_store: RINGRUN_JOB_SECRET is not set\n");
    return 2;
  }
  try {
    ringrun::store::Server server(argv[1], 0, secret);
    std::printf("%u\n", static_cast<unsigned>(server.port()));
    std::fflush(stdout);
    char byte;
    while (::read(STDIN_FILENO, &byte, 1) > 0) {
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "twohost_store: %s\n", e.what());
    return 1;
  }
  return 0;
}

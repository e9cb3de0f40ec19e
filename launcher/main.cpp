// ringrun: thin entry point. Parsing, planning and launching live in the launcher library.
#include <ringrun/launch.hpp>
#include <ringrun/task.hpp>
#include <ringrun/topology.hpp>

#include <iostream>
#include <string>

#include <unistd.h>

extern char** environ;

namespace {
// The error as one line in one write(): under mpirun --tag-output every write is tagged apart.
int fail(std::string message, int code) {
  if (!message.starts_with("ringrun")) message = "ringrun: " + message;
  message += "\n";
  (void)!::write(STDERR_FILENO, message.data(), message.size());
  return code;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace ringrun;
  block_supervisor_signals();
  try {
    Invocation inv = parse_command_line(std::vector<std::string>(argv, argv + argc));
    switch (inv.command) {
      case Command::help:
      case Command::version: std::cout << inv.help_text; return 0;
      case Command::task: return run_task(inv.launch.program, environment_from(environ));
      default: return run_invocation(inv, environment_from(environ));
    }
  } catch (const UsageError& e) {
    return fail(e.what(), 2);
  } catch (const InputError& e) {
    return fail(e.what(), 2);
  } catch (const topology::TopologyError& e) {
    return fail(e.what(), 2);
  } catch (const LaunchError& e) {
    return fail(e.what(), e.exit_code);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}

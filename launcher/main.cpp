// ringrun: thin entry point. Parsing, planning and launching live in the launcher library.
#include <ringrun/launch.hpp>
#include <ringrun/topology.hpp>

#include <iostream>

extern char** environ;

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
    std::cerr << "ringrun: " << e.what() << "\n";
    return 2;
  } catch (const InputError& e) {
    std::cerr << "ringrun: " << e.what() << "\n";
    return 2;
  } catch (const topology::TopologyError& e) {
    std::cerr << e.what() << "\n";  // already "ringrun: ..."
    return 2;
  } catch (const LaunchError& e) {
    std::cerr << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "ringrun: " << e.what() << "\n";
    return 1;
  }
}

// The network interface NCCL and the runtime use on a multi-node job, chosen from what every node
// has. One cheap step (`srun --ntasks-per-node=1 ringrun task --probe-interfaces`, in parallel
// over the nodes; mpirun with one slot per host outside Slurm) prints each node's interfaces and
// IPv4 addresses as one line; a pure function picks a name present and up on all of them.
#pragma once

#include <ringrun/allocation.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ringrun::netprobe {

struct Interface {
  std::string name;
  bool up = false;        // IFF_UP and IFF_RUNNING
  bool loopback = false;  // IFF_LOOPBACK
  std::vector<std::string> ipv4;  // "10.77.0.1/24"
};

struct NodeInterfaces {
  std::string host;
  std::vector<Interface> interfaces;
};

struct SharedChoice {
  std::optional<std::string> name;  // nullopt: no interface qualifies on every node
  std::string reason;               // why this one (or why none), for --verbose and warnings
};

// This host's interfaces (getifaddrs), in the kernel's order.
std::vector<Interface> local_interfaces();

// One line per node: `ringrun-interfaces HOST NAME|STATE|ADDR/LEN,ADDR/LEN ...`, STATE one of
// up, down, loopback. parse_probe_output reads the lines of every node (other lines are
// ignored, so srun's own messages do no harm) and throws InputError on a malformed one.
std::string format_probe_line(const std::string& host, const std::vector<Interface>& interfaces);
std::vector<NodeInterfaces> parse_probe_output(const std::string& text);

// Pure. A name up on every node, never lo/docker*/veth*/virbr*, with a non-link-local IPv4
// address on every node; ib* first, then one whose addresses put all nodes in one subnet, then
// the first in the first node's order.
SharedChoice choose_shared_interface(const std::vector<NodeInterfaces>& nodes);

// The first IPv4 address (no prefix length) of `name` on this host, if any.
std::optional<std::string> local_ipv4_of(const std::string& name);

// argv as one line a shell would split back into the same words (for --dry-run and --verbose
// only; ringrun itself never runs anything through a shell).
std::string shell_words(const std::vector<std::string>& argv);

// The probe step's argv: srun inside a Slurm allocation, else mpirun with one slot per host.
std::vector<std::string> probe_argv(const std::vector<std::string>& hosts, bool in_slurm, const std::string& self);

// Runs the probe for `hosts` (cached per Slurm job and host list under /tmp/ringrun-UID, so
// later launches in the same allocation skip the step), prints the step's argv when verbose and
// a warning when no interface qualifies, and returns the choice (the plan reports it with
// --verbose). Throws LaunchError when the step fails.
SharedChoice probe_shared_interface(const std::vector<std::string>& hosts, bool in_slurm, const Environment& env,
                                    bool verbose);

}  // namespace ringrun::netprobe

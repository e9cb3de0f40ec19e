// The NCCL options of the command line (--nccl-algo, --nccl-proto, --nccl-ib-gid-index, --tcp):
// their values, their checks against the NCCL version, and the user's own NCCL_* variables that
// contradict them. Below the plan (ringrun/plan.hpp), which carries them to every rank.
#pragma once

#include <ringrun/allocation.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ringrun {

// NCCL knobs from the command line. Each is also passed to every rank as a RINGRUN_* variable so
// the task shim on another node plans the same way (variables that `travel`,
// ringrun/environment_variables.hpp).
struct NcclOptions {
  std::optional<std::string> algo;          // --nccl-algo LIST -> NCCL_ALGO
  std::optional<std::string> proto;         // --nccl-proto LIST -> NCCL_PROTO
  std::optional<std::string> ib_gid_index;  // --nccl-ib-gid-index auto|N -> NCCL_IB_GID_INDEX
  bool tcp = false;                         // --tcp -> NCCL_IB_DISABLE=1
};

// NCCL's version code as ncclGetVersion returns it (2.21.5 -> 22105; 2.8.4 -> 2804) as "2.21.5".
std::string format_nccl_version(int code);
// The code of MAJOR.MINOR.PATCH in ncclGetVersion's encoding.
constexpr int nccl_version_code(int major, int minor, int patch) {
  return major <= 2 && minor <= 8 ? major * 1000 + minor * 100 + patch : major * 10000 + minor * 100 + patch;
}

// Checks an NCCL_ALGO / NCCL_PROTO value against the names the given NCCL version accepts
// (unknown version: every name any version accepts). Case-insensitive, `^` excludes, and for
// algorithms the NCCL 2.24 per-function form "ring;allreduce:tree". Throws InputError naming the
// option, the bad value and the accepted ones.
void validate_nccl_algo(const std::string& list, std::optional<int> nccl_version);
void validate_nccl_proto(const std::string& list);

// One warning line for each NCCL_* variable the user sets (by -x, `user_env`, or in ringrun's
// environment) against what ringrun's options ask for (`nccl`, and --network-interface for
// NCCL_SOCKET_IFNAME); the ranks keep the user's value.
std::vector<std::string> nccl_contradictions(const NcclOptions& nccl, const std::optional<std::string>& network_interface,
                                             const std::map<std::string, std::string>& user_env,
                                             const Environment& launcher_env);

}  // namespace ringrun

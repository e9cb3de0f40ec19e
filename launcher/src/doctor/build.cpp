// `ringrun check-build`'s report: what this build and this host offer (APIs, launchers,
// transports, topology) as checkboxes, each unchecked one with its reason on the line.
#include "doctor/checks.hpp"

#include <fmt/format.h>

namespace ringrun::diagnostics {

bool ompi_has_slurm_support(std::string_view ompi_info_output) {
  std::size_t pos = 0;
  while (pos < ompi_info_output.size()) {
    std::size_t end = ompi_info_output.find('\n', pos);
    if (end == std::string_view::npos) end = ompi_info_output.size();
    std::string_view line = ompi_info_output.substr(pos, end - pos);
    // "                 MCA ras: slurm (MCA v2.1.0, API v2.0.0, Component v4.1.4)"
    if (line.find("MCA ") != std::string_view::npos && line.find(": slurm ") != std::string_view::npos) return true;
    pos = end + 1;
  }
  return false;
}

namespace {

std::string box(bool checked, const std::string& text) {
  return fmt::format("    [{}] {}\n", checked ? 'X' : ' ', text);
}

std::string api_boxes(const BuildFacts& facts) {
  std::string out;
  if (facts.runtime_library) {
    out += box(true, "C (ringrun/ringrun.h, " + *facts.runtime_library + ")");
    out += box(true, "C++ (ringrun/runtime.hpp, the same library)");
  } else {
    out += box(false, "C: " + facts.runtime_library_error);
    out += box(false, "C++: " + facts.runtime_library_error);
  }
  const auto [python_ready, python_text] = python_binding_line(facts.python);
  const auto [tensorflow_ready, tensorflow_text] = tensorflow_binding_line(facts.python);
  return out + box(python_ready, python_text) + box(tensorflow_ready, tensorflow_text);
}

std::string mpirun_box(const BuildFacts& facts) {
  if (!facts.mpirun_path) return box(false, "mpirun: not found in PATH");
  std::string version = facts.mpirun_version.value_or("`mpirun --version` failed");
  bool open_mpi = version.find("Open MPI") != std::string::npos || version.find("OpenRTE") != std::string::npos;
  if (!open_mpi)
    return box(false, fmt::format("mpirun: {} is not Open MPI ({}); the mpirun backend needs Open MPI",
                                  *facts.mpirun_path, version));
  std::string slurm = !facts.ompi_info ? "; SLURM support unknown: `ompi_info` failed"
                      : ompi_has_slurm_support(*facts.ompi_info)
                          ? "; SLURM support: yes"
                          : "; SLURM support: no (ompi_info, and prte_info for Open MPI 5, list no slurm component)";
  return box(true, fmt::format("mpirun ({}; {}{})", *facts.mpirun_path, version, slurm));
}

std::string launcher_boxes(const BuildFacts& facts) {
  std::string out = box(true, "local");
  if (!facts.srun_path)
    out += box(false, "srun: not found in PATH");
  else if (!facts.srun_mpi_list)
    // Outside an allocation srun cannot reach a controller; its fatal message would only confuse.
    out += box(true, fmt::format("srun ({}; PMIx support unknown until inside an allocation: `srun --mpi=list` "
                                 "needs a reachable SLURM controller)",
                                 *facts.srun_path));
  else
    out += box(true, fmt::format("srun ({}; MPI plugins: {})", *facts.srun_path,
                                 join(parse_srun_mpi_list(*facts.srun_mpi_list))));
  return out + mpirun_box(facts);
}

std::string transport_boxes(const BuildFacts& facts) {
  std::string out = box(true, "TCP");
  if (!facts.shm_total_bytes)
    out += box(false, "Shared memory: /dev/shm is missing (mount a tmpfs there)");
  else
    out += box(true, fmt::format("Shared memory (/dev/shm: {}, {} free)", format_bytes(*facts.shm_total_bytes),
                                 format_bytes(facts.shm_free_bytes.value_or(0))));
  std::string nccl_found =
      facts.nccl.version ? fmt::format("NCCL {} ({}, from {})", *facts.nccl.version, facts.nccl.path, facts.nccl.origin)
                         : "";
  if (facts.runtime_has_nccl == false)
    out += box(false, fmt::format("NCCL: the runtime library was built without the NCCL transport (it names no nccl "
                                  "symbol); {}",
                                  facts.nccl.version ? "found " + nccl_found : facts.nccl.error));
  else if (facts.nccl.version)
    out += box(true, nccl_found);
  else
    out += box(false, "NCCL: " + facts.nccl.error);
  // NCCL and the CUDA runtime load when a job passes a CUDA tensor; both and a device are needed.
  if (facts.cuda_runtime.version)
    out += box(true, fmt::format("CUDA runtime {} ({}, from {})", *facts.cuda_runtime.version,
                                 facts.cuda_runtime.path, facts.cuda_runtime.origin));
  else
    out += box(false, "CUDA runtime: " + facts.cuda_runtime.error);
  if (facts.cuda_devices > 0)
    out += box(true, fmt::format("CUDA devices: {}", facts.cuda_devices));
  else
    out += box(false, fmt::format("CUDA devices: the GPU cannot be used here: {}", facts.cuda_devices_reason));
  return out;
}

std::string topology_boxes(const BuildFacts& facts) {
  std::string out = box(true, "hwloc " + facts.hwloc_version);
  if (!facts.gpus) {
    out += box(false, "GPUs: hwloc could not read this host: " + facts.topology_error);
    out += box(false, "NICs: hwloc could not read this host: " + facts.topology_error);
    return out;
  }
  if (facts.gpus->empty())
    out += box(false, "GPUs: none seen by hwloc (no NVIDIA/AMD GPU on the PCI bus, or its driver is not loaded)");
  else
    out += box(true, fmt::format("GPUs: {} ({})", facts.gpus->size(), join(*facts.gpus)));
  if (facts.nics->empty())
    out += box(false, "NICs: none seen by hwloc (no IB/RoCE/EFA HCA or Ethernet NIC on the PCI bus)");
  else
    out += box(true, fmt::format("NICs: {} ({})", facts.nics->size(), join(*facts.nics)));
  return out;
}

}  // namespace

std::string render_check_build(const BuildFacts& facts) {
  return fmt::format("ringrun v{}:\n\nAvailable APIs:\n", facts.version) + api_boxes(facts) +
         "\nAvailable launchers:\n" + launcher_boxes(facts) + "\nAvailable transports:\n" + transport_boxes(facts) +
         "\nTopology:\n" + topology_boxes(facts);
}

}  // namespace ringrun::diagnostics

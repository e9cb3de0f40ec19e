// libpmix: the PMIx client library of the host's launcher (srun --mpi=pmix, Open MPI's mpirun),
// loaded when a rank first meets its peers through PMIx and never linked, so that no copy ringrun
// carries can disagree with the host's PMIx server and a host without PMIx runs the rest (README,
// "On a GPU cluster"). Found in: RINGRUN_PMIX_LIBRARY (it must load); a copy the process already
// loaded; PMIX_INSTALL_PREFIX/lib; the library folder the build was configured with; the system's
// library path; Debian's and Ubuntu's /usr/lib/<arch>/pmix2/lib.
#pragma once

#include <pmix.h>

#include <string>

namespace ringrun::core {

// PMIx's client calls since PMIx 2; the types are the header's own.
struct PmixApi {
  decltype(&::PMIx_Init) Init;
  decltype(&::PMIx_Finalize) Finalize;
  decltype(&::PMIx_Error_string) Error_string;
  decltype(&::PMIx_Put) Put;
  decltype(&::PMIx_Commit) Commit;
  decltype(&::PMIx_Fence) Fence;
  decltype(&::PMIx_Get) Get;
  std::string path;  // the file loaded
};

// Loaded on the first call, once per process; throws RuntimeError (RINGRUN_ERR_BOOTSTRAP) with
// one line naming what was searched and the fix, on this call and every later one.
const PmixApi& pmix_api();

}  // namespace ringrun::core

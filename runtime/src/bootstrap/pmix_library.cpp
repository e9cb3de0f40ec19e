#include "bootstrap/pmix_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/env.hpp"
#include "ringrun/environment_variables.hpp"
#include "ringrun/runtime.hpp"

namespace ringrun::core {
namespace {

constexpr const char* kSoname = "libpmix.so.2";  // PMIx 2 to 5 keep this soname

struct Loaded {
  PmixApi api{};
  std::string error;
};

// libpmix loads its own plugins, which resolve its symbols through the global scope: RTLD_GLOBAL.
void* open_pmix(const std::string& file, std::vector<std::string>& failures) {
  ::dlerror();
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* error = ::dlerror();
    failures.push_back(error ? error : file + ": dlopen failed");
  }
  return handle;
}

Loaded load() {
  Loaded loaded;
  std::vector<std::string> failures;
  void* handle = nullptr;
  const std::string named = env_text(variables::kPmixLibrary).value_or("");
  if (!named.empty()) {
    handle = open_pmix(named, failures);
    if (!handle) {
      loaded.error = fmt::format("{}={}: {}; point it at the host's {} or unset it", variables::kPmixLibrary.name,
                                 named, failures.back(), kSoname);
      return loaded;
    }
  }
  if (!handle) handle = ::dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);  // one the process loaded
  std::vector<std::string> files;
  if (std::string prefix = env_string("PMIX_INSTALL_PREFIX").value_or(""); !prefix.empty()) files.push_back(prefix + "/lib/" + kSoname);
#ifdef RINGRUN_PMIX_BUILD_LIBDIR
  files.push_back(std::string(RINGRUN_PMIX_BUILD_LIBDIR) + "/" + kSoname);
#endif
  files.push_back(kSoname);  // the system's library path
#if defined(__x86_64__)
  files.push_back(std::string("/usr/lib/x86_64-linux-gnu/pmix2/lib/") + kSoname);  // Debian's and Ubuntu's
#elif defined(__aarch64__)
  files.push_back(std::string("/usr/lib/aarch64-linux-gnu/pmix2/lib/") + kSoname);
#endif
  for (std::size_t i = 0; !handle && i < files.size(); ++i) handle = open_pmix(files[i], failures);
  if (!handle) {
    loaded.error = fmt::format(
        "PMIX_NAMESPACE is set (a PMIx launcher started this rank) but {} could not be loaded ({}); set {} to the "
        "host's {}, or start the job with ringrun (which needs no PMIx)",
        kSoname, fmt::join(failures, "; "), variables::kPmixLibrary.name, kSoname);
    return loaded;
  }
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) loaded.api.path = map->l_name;
  std::string missing;
  auto resolve = [&](auto& field, const char* name) {
    field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(::dlsym(handle, name));
    if (!field && missing.empty()) missing = name;
  };
  resolve(loaded.api.Init, "PMIx_Init");
  resolve(loaded.api.Finalize, "PMIx_Finalize");
  resolve(loaded.api.Error_string, "PMIx_Error_string");
  resolve(loaded.api.Put, "PMIx_Put");
  resolve(loaded.api.Commit, "PMIx_Commit");
  resolve(loaded.api.Fence, "PMIx_Fence");
  resolve(loaded.api.Get, "PMIx_Get");
  if (!missing.empty())
    loaded.error = fmt::format("{} has no {}: it is not a PMIx client library (PMIx 2 or newer)", loaded.api.path,
                               missing);
  return loaded;
}

}  // namespace

const PmixApi& pmix_api() {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, loaded.error);
  return loaded.api;
}

}  // namespace ringrun::core

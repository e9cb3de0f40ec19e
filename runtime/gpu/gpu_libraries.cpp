// The search for NCCL and the CUDA runtime (ringrun/gpu_libraries.hpp), and the driver's devices.
#include "ringrun/gpu_libraries.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "ringrun/environment_variables.hpp"

namespace ringrun::gpu {
namespace fs = std::filesystem;

namespace {

struct Spec {
  std::string_view name;                       // for messages
  std::string_view variable;                   // names the file
  std::vector<std::string_view> sonames;       // newest first
  std::vector<std::string_view> python_lib;    // under a site-packages folder
  std::string_view home;                       // NCCL_HOME, CUDA_HOME
  std::vector<std::string_view> home_lib;      // under it
  std::string_view version_symbol;             // int f(int*), 0 on success
  std::string_view install_hint;  // completed with ", or set <variable> to a <soname>"
};

const Spec& spec(Library library) {
  static const Spec nccl{"NCCL",
                         variables::kNcclLibrary.name,
                         {"libnccl.so.2"},
                         {"nvidia/nccl/lib"},
                         variables::kNcclHome.name,
                         {"lib", "lib64"},
                         "ncclGetVersion",
                         "pip install nvidia-nccl-cu13 (nvidia-nccl-cu12 beside a CUDA 12 torch)"};
  static const Spec cuda_runtime{"the CUDA runtime",
                                 variables::kCudartLibrary.name,
                                 {"libcudart.so.13", "libcudart.so.12"},
                                 {"nvidia/cu13/lib", "nvidia/cuda_runtime/lib"},
                                 variables::kCudaHome.name,
                                 {"lib64", "lib"},
                                 "cudaRuntimeGetVersion",
                                 "pip install nvidia-cuda-runtime (nvidia-cuda-runtime-cu12 for CUDA 12)"};
  return library == Library::nccl ? nccl : cuda_runtime;
}

constexpr std::string_view kCudaFolders[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"};

void add_folder(std::vector<std::string>& out, const fs::path& folder) {
  std::error_code ec;
  if (folder.empty() || !fs::is_directory(folder, ec)) return;
  std::string text = fs::weakly_canonical(folder, ec).string();
  if (ec) text = folder.lexically_normal().string();
  for (const auto& seen : out)
    if (seen == text) return;
  out.push_back(text);
}

// <prefix>/lib/python3.X/site-packages (a venv, a conda environment, an install prefix).
void add_prefix(std::vector<std::string>& out, const fs::path& prefix) {
  std::error_code ec;
  for (const char* lib : {"lib", "lib64"}) {
    std::vector<fs::path> pythons;
    for (const auto& entry : fs::directory_iterator(prefix / lib, ec))
      if (entry.path().filename().string().starts_with("python3")) pythons.push_back(entry.path());
    std::sort(pythons.begin(), pythons.end());
    for (const auto& python : pythons) {
      add_folder(out, python / "site-packages");
      add_folder(out, python / "dist-packages");
    }
  }
}

std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return fallback;
}

// Opens `file` and asks its version; on failure the handle is closed and `why` says what failed.
std::optional<Found> open_library(const Spec& s, const std::string& file, int flags, std::string& why) {
  ::dlerror();
  void* handle = ::dlopen(file.c_str(), flags);
  if (!handle) {
    const char* error = ::dlerror();
    why = error ? error : "dlopen failed";
    return std::nullopt;
  }
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(::dlsym(handle, std::string(s.version_symbol).c_str()));
  int code = 0;
  if (!get || get(&code) != 0 || code <= 0) {
    why = fmt::format("{}: {} {}", loaded_path(handle, file), s.version_symbol, get ? "failed" : "is missing");
    ::dlclose(handle);
    return std::nullopt;
  }
  return Found{handle, loaded_path(handle, file), "", code};
}

std::vector<std::string> split_path_list(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Steps 3 and 4 as (origin, file) pairs, in order.
std::vector<std::pair<std::string, std::string>> search_files(const Spec& s, const SearchContext& context) {
  std::vector<std::pair<std::string, std::string>> files;
  auto add = [&](const std::string& origin, const fs::path& folder) {
    for (auto soname : s.sonames) files.emplace_back(origin, (folder / soname).string());
  };
  for (const auto& site : python_site_folders(context))
    for (auto lib : s.python_lib) add(fmt::format("the Python environment {}", site), fs::path(site) / lib);
  if (auto home = context.variable(s.home))
    for (auto lib : s.home_lib) add(std::string(s.home), fs::path(*home) / lib);
  if (auto list = context.variable("LD_LIBRARY_PATH"))
    for (const auto& folder : split_path_list(*list)) add("LD_LIBRARY_PATH", folder);
  for (auto folder : kCudaFolders) add("/usr/local/cuda", fs::path(folder));
  return files;
}

std::string searched_summary(const Spec& s, const SearchContext& context) {
  auto sites = python_site_folders(context);
  std::string python = sites.empty() ? "no Python environment (none beside ringrun, in VIRTUAL_ENV or in CONDA_PREFIX)"
                                     : fmt::format("{} in {}{}", s.python_lib.front(), sites.front(),
                                                   sites.size() > 1 ? fmt::format(" and {} more", sites.size() - 1) : "");
  return fmt::format("{} is unset; searched {}, {} ({}), LD_LIBRARY_PATH, /usr/local/cuda and the system's library path",
                     s.variable, python, s.home, context.variable(s.home) ? "set" : "unset");
}

}  // namespace

VariableReader process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (!value || !*value) return std::nullopt;
    return std::string(value);
  };
}

VariableReader variables_of(const std::map<std::string, std::string>& env) {
  return [&env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

std::vector<std::string> python_site_folders(const SearchContext& context) {
  std::vector<std::string> out;
  if (!context.anchor.empty()) {
    fs::path anchor = fs::path(context.anchor).lexically_normal();
    for (fs::path p = anchor; p.has_relative_path(); p = p.parent_path()) {
      auto name = p.filename().string();
      if (name == "site-packages" || name == "dist-packages") add_folder(out, p);
    }
    auto name = anchor.filename().string();
    if (name == "bin" || name == "lib" || name == "lib64") add_prefix(out, anchor.parent_path());
  }
  for (const char* prefix : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (auto value = context.variable(prefix)) add_prefix(out, fs::path(*value));
  return out;
}

std::vector<std::string> candidate_files(Library library, const SearchContext& context) {
  const Spec& s = spec(library);
  std::vector<std::string> out;
  if (auto named = context.variable(s.variable)) out.push_back(*named);
  for (const auto& [origin, file] : search_files(s, context)) out.push_back(file);
  return out;
}

Lookup find(Library library, const SearchContext& context, bool lazy) {
  const Spec& s = spec(library);
  const int flags = (lazy ? RTLD_LAZY : RTLD_NOW) | RTLD_LOCAL;
  Lookup lookup;
  std::string why;
  if (auto named = context.variable(s.variable)) {
    if ((lookup.found = open_library(s, *named, flags, why)))
      lookup.found->origin = std::string(s.variable);
    else
      lookup.error = fmt::format("{}={}: {}; point it at {} or unset it", s.variable, *named, why, s.sonames.front());
    return lookup;
  }
  for (auto soname : s.sonames) {
    std::string name(soname);
    if (void* loaded = ::dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      ::dlclose(loaded);
      if ((lookup.found = open_library(s, name, flags, why))) {
        lookup.found->origin = "already loaded by this process";
        return lookup;
      }
    }
  }
  std::vector<std::string> failures;
  std::error_code ec;
  for (const auto& [origin, file] : search_files(s, context)) {
    if (!fs::exists(file, ec)) continue;
    if ((lookup.found = open_library(s, file, flags, why))) {
      lookup.found->origin = origin;
      return lookup;
    }
    failures.push_back(why);
  }
  for (auto soname : s.sonames) {
    if ((lookup.found = open_library(s, std::string(soname), flags, why))) {
      lookup.found->origin = "the system's library path";
      return lookup;
    }
  }
  lookup.error = fmt::format("{} not found ({}{}); {}, or set {} to a {}", s.sonames.front(),
                             searched_summary(s, context),
                             failures.empty() ? "" : fmt::format("; failed to load: {}", fmt::join(failures, "; ")),
                             s.install_hint, s.variable, s.sonames.front());
  return lookup;
}

void release(Found& found) {
  if (found.handle) ::dlclose(found.handle);
  found.handle = nullptr;
}

std::string library_name(Library library) { return std::string(spec(library).name); }

std::string version_text(Library library, int code) {
  if (library == Library::cuda_runtime) return fmt::format("{}.{}", code / 1000, (code % 1000) / 10);
  // NCCL's NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before.
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100);
}

std::string describe(Library library, const Found& found) {
  return fmt::format("{} {} ({}, from {})", library == Library::nccl ? "NCCL" : "CUDA runtime",
                     version_text(library, found.version), found.path, found.origin);
}

std::string folder_of_object_at(const void* address) {
  Dl_info info{};
  if (::dladdr(address, &info) == 0 || !info.dli_fname || !*info.dli_fname) return {};
  // The name it was loaded by (absolute for a library found through a RUNPATH); no link resolved.
  std::error_code ec;
  fs::path file = fs::absolute(fs::path(info.dli_fname), ec);
  return (ec ? fs::path(info.dli_fname) : file).lexically_normal().parent_path().string();
}

Devices cuda_devices() {
  Devices devices;
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) {
    devices.reason = "no CUDA device (no NVIDIA driver: libcuda.so.1 not found)";
    return devices;
  }
  // Kept loaded: a driver is not unloaded once initialised.
  using IntQuery = int (*)(int*);
  using Init = int (*)(unsigned);
  using ErrorName = int (*)(int, const char**);
  auto driver_version = reinterpret_cast<IntQuery>(::dlsym(driver, "cuDriverGetVersion"));
  auto init = reinterpret_cast<Init>(::dlsym(driver, "cuInit"));
  auto count = reinterpret_cast<IntQuery>(::dlsym(driver, "cuDeviceGetCount"));
  auto error_name = reinterpret_cast<ErrorName>(::dlsym(driver, "cuGetErrorName"));
  if (driver_version) driver_version(&devices.driver_version);
  int rc = init && count ? init(0) : -1;
  if (rc == 0) rc = count(&devices.count);
  if (rc != 0) {
    const char* name = nullptr;
    if (rc < 0 || !error_name || error_name(rc, &name) != 0 || !name) name = "an unknown error";
    devices.count = 0;
    devices.reason = rc == 100 ? "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"
                               : fmt::format("no usable CUDA device (cuInit: {})", name);
  } else if (devices.count == 0) {
    devices.reason = "no CUDA device (the driver reports none)";
  }
  return devices;
}

}  // namespace ringrun::gpu

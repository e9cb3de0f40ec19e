// The search for NCCL and the CUDA runtime (ringrun/gpu_libraries.hpp) on made-up folders: its
// order, the Python environments it finds from where ringrun is installed, and its errors. The
// real libraries (PyPI's nvidia-nccl-cu13) are loaded in tests/python/test_gpu_libraries.py.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "ringrun/gpu_libraries.hpp"

namespace fs = std::filesystem;
using namespace ringrun::gpu;

namespace {

struct TempTree {
  fs::path root;
  TempTree() {
    root = fs::temp_directory_path() / ("ringrun-gpu-test-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~TempTree() { fs::remove_all(root); }
  fs::path file(const fs::path& relative, const std::string& text = "not a library\n") {
    fs::create_directories((root / relative).parent_path());
    std::ofstream(root / relative) << text;
    return fs::weakly_canonical(root / relative);
  }
};

VariableReader variables(std::map<std::string, std::string> values) {
  return [values](std::string_view name) -> std::optional<std::string> {
    auto it = values.find(std::string(name));
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("a wheel's library finds the site-packages it is installed in") {
  TempTree tree;
  fs::path site = tree.root / "venv/lib/python3.11/site-packages";
  fs::create_directories(site / "ringrun/lib");
  SearchContext context{(site / "ringrun/lib").string(), variables({})};
  auto folders = python_site_folders(context);
  REQUIRE(folders.size() == 1);
  CHECK(fs::path(folders[0]) == fs::weakly_canonical(site));
}

TEST_CASE("an install prefix's bin/ and lib/ and VIRTUAL_ENV name environments too") {
  TempTree tree;
  fs::path prefix_site = tree.root / "prefix/lib/python3.12/site-packages";
  fs::path venv_site = tree.root / "venv/lib/python3.11/site-packages";
  fs::create_directories(prefix_site);
  fs::create_directories(venv_site);
  fs::create_directories(tree.root / "prefix/bin");
  SearchContext context{(tree.root / "prefix/bin").string(), variables({{"VIRTUAL_ENV", (tree.root / "venv").string()}})};
  auto folders = python_site_folders(context);
  REQUIRE(folders.size() == 2);
  CHECK(fs::path(folders[0]) == fs::weakly_canonical(prefix_site));
  CHECK(fs::path(folders[1]) == fs::weakly_canonical(venv_site));
}

TEST_CASE("the files are tried in the documented order") {
  TempTree tree;
  fs::path site = tree.root / "venv/lib/python3.11/site-packages";
  fs::create_directories(site / "ringrun/lib");
  SearchContext context{(site / "ringrun/lib").string(),
                        variables({{"RINGRUN_NCCL_LIBRARY", "/named/libnccl.so.2"},
                                   {"NCCL_HOME", "/nccl-home"},
                                   {"LD_LIBRARY_PATH", "/first:/second"}})};
  auto files = candidate_files(Library::nccl, context);
  std::vector<std::string> expected = {"/named/libnccl.so.2",
                                       (fs::weakly_canonical(site) / "nvidia/nccl/lib/libnccl.so.2").string(),
                                       "/nccl-home/lib/libnccl.so.2",
                                       "/nccl-home/lib64/libnccl.so.2",
                                       "/first/libnccl.so.2",
                                       "/second/libnccl.so.2",
                                       "/usr/local/cuda/lib64/libnccl.so.2",
                                       "/usr/local/cuda/lib/libnccl.so.2"};
  CHECK(files == expected);
  auto cudart = candidate_files(Library::cuda_runtime, SearchContext{(site / "ringrun/lib").string(), variables({})});
  REQUIRE(cudart.size() >= 4);
  CHECK(cudart[0] == (fs::weakly_canonical(site) / "nvidia/cu13/lib/libcudart.so.13").string());
  CHECK(cudart[1] == (fs::weakly_canonical(site) / "nvidia/cu13/lib/libcudart.so.12").string());
}

TEST_CASE("a named library that does not load is an error naming the variable, with no fallback") {
  Lookup lookup = find(Library::nccl, SearchContext{"", variables({{"RINGRUN_NCCL_LIBRARY", "/no/such/libnccl.so.2"}})});
  CHECK_FALSE(lookup.found);
  CHECK(lookup.error.starts_with("RINGRUN_NCCL_LIBRARY=/no/such/libnccl.so.2: "));
  CHECK(lookup.error.find("point it at libnccl.so.2 or unset it") != std::string::npos);
  CHECK(lookup.error.find('\n') == std::string::npos);
}

TEST_CASE("a file that is no library is skipped and named; the error says how to get NCCL") {
  TempTree tree;
  fs::path site = tree.root / "venv/lib/python3.11/site-packages";
  fs::create_directories(site / "ringrun/lib");
  fs::path broken = tree.file("venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2");
  Lookup lookup = find(Library::nccl, SearchContext{(site / "ringrun/lib").string(), variables({})});
  if (lookup.found) {  // a host with an NCCL in its system path finds that one after the broken file
    CHECK(lookup.found->origin == "the system's library path");
    release(*lookup.found);
    return;
  }
  CHECK(lookup.error.starts_with("libnccl.so.2 not found (RINGRUN_NCCL_LIBRARY is unset; searched nvidia/nccl/lib in "));
  CHECK(lookup.error.find("failed to load: " + broken.string()) != std::string::npos);
  CHECK(lookup.error.find("pip install nvidia-nccl-cu13") != std::string::npos);
  CHECK(lookup.error.find('\n') == std::string::npos);
}

TEST_CASE("version codes read as NCCL and CUDA print them") {
  CHECK(version_text(Library::nccl, 23203) == "2.32.3");
  CHECK(version_text(Library::nccl, 22105) == "2.21.5");
  CHECK(version_text(Library::nccl, 2804) == "2.8.4");  // NCCL before 2.9: major*1000 + minor*100 + patch
  CHECK(version_text(Library::cuda_runtime, 13000) == "13.0");
  CHECK(version_text(Library::cuda_runtime, 12090) == "12.9");
}

TEST_CASE("the driver's devices: a count, or the reason there are none") {
  Devices devices = cuda_devices();
  if (devices.count > 0) {
    CHECK(devices.reason.empty());
  } else {
    CHECK(devices.reason.find("CUDA device") != std::string::npos);
  }
}

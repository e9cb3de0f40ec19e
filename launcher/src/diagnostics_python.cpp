// The Python binding (ringrun.torch) in the diagnostics: found beside this executable as the
// launcher finds it for the ranks' PYTHONPATH, and the torch that /usr/bin/python3 imports.
#include "diagnostics.hpp"
#include "python_package.hpp"

#include <fmt/format.h>

#include <filesystem>

namespace ringrun::diagnostics {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";  // what the ranks of `ringrun python3 ...` run on Debian
constexpr std::chrono::seconds kTorchImportTimeout{20};

// The last non-empty line: a traceback's exception ("ModuleNotFoundError: No module named 'torch'");
// its first line is only "Traceback (most recent call last):".
std::string last_line(const std::string& text) {
  std::size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "no output";
  std::size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

std::string import_torch_error(const std::optional<ProgramOutput>& result) {
  if (!result) return fmt::format("{} could not be started", kPython);
  if (result->exit_code < 0) return fmt::format("`import torch` took more than {} s", kTorchImportTimeout.count());
  return last_line(result->output);
}

}  // namespace

PythonBindingFacts probe_python_binding() {
  PythonBindingFacts facts;
  const fs::path bin_dir = executable_dir();
  facts.package_dir = find_python_package_dir(bin_dir);
  facts.searched = python_package_candidates(bin_dir);
  if (facts.package_dir) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(*facts.package_dir) / "ringrun", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("_ringrun", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) {
        facts.module = entry.path().string();
        break;
      }
    }
  }
  std::error_code ec;
  if (!fs::exists(kPython, ec)) {
    facts.torch_error = fmt::format("{} not found", kPython);
    return facts;
  }
  auto result = run_program({kPython, "-c", "import torch; print(torch.__version__)"}, kTorchImportTimeout);
  if (result && result->exit_code == 0)
    facts.torch_version = last_line(result->output);
  else
    facts.torch_error = import_torch_error(result);
  return facts;
}

// The missing piece's reason and fix, or nullopt when ringrun.torch is ready.
static std::optional<std::pair<std::string, std::string>> python_binding_problem(const PythonBindingFacts& facts) {
  if (!facts.package_dir)
    return std::pair{fmt::format("the ringrun package is not in {}", facts.searched),
                     "build with python3-dev and pybind11-dev installed (the ringrun_python target), or install "
                     "ringrun"};
  if (!facts.module)
    return std::pair{fmt::format("no _ringrun*.so in {}/ringrun", *facts.package_dir),
                     "build the ringrun_python target (needs python3-dev and pybind11-dev)"};
  if (!facts.torch_version)
    return std::pair{fmt::format("ringrun.torch in {}, but torch not importable: {}", *facts.package_dir,
                                 facts.torch_error),
                     "apt-get install python3-torch"};
  return std::nullopt;
}

std::pair<bool, std::string> python_binding_line(const PythonBindingFacts& facts) {
  if (auto problem = python_binding_problem(facts))
    return {false, fmt::format("Python binding: {} ({})", problem->first, problem->second)};
  return {true, fmt::format("Python binding: ringrun.torch in {} (torch {})", *facts.package_dir, *facts.torch_version)};
}

Check check_python_binding(const PythonBindingFacts& facts) {
  if (auto problem = python_binding_problem(facts))
    return {"python binding", Status::warn, problem->first, problem->second};
  return {"python binding", Status::pass,
          fmt::format("ringrun.torch in {} (torch {})", *facts.package_dir, *facts.torch_version), ""};
}

}  // namespace ringrun::diagnostics

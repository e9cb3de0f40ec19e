// The Python binding (ringrun.torch) in the diagnostics: found beside this executable as the
// launcher finds it for the ranks' PYTHONPATH, imported with torch by the python3 that
// `ringrun python3 train.py` runs (the first on PATH, which need not be /usr/bin/python3: a pyenv
// shim, a virtualenv, a container's own Python).
#include "doctor/doctor.hpp"
#include "facts/python_package.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <vector>

namespace ringrun::diagnostics {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, the one ringrun's binding is built for
constexpr std::chrono::seconds kTorchImportTimeout{20};

// The last non-empty line: a traceback's exception ("ModuleNotFoundError: No module named 'torch'");
// its first line is only "Traceback (most recent call last):".
std::string last_line(const std::string& text) {
  std::size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "no output";
  std::size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

std::string import_error(const std::string& interpreter, const std::optional<ProgramOutput>& result) {
  if (!result) return fmt::format("{} could not be started", interpreter);
  if (result->exit_code < 0) return fmt::format("`import torch` took more than {} s", kTorchImportTimeout.count());
  return last_line(result->output);
}

// Asks `interpreter` to import the binding (from package_dir, as a rank's PYTHONPATH has it) and
// torch; torch's version, or the error's last line in `error`.
std::optional<std::string> torch_through(const std::string& interpreter, const std::optional<std::string>& package_dir,
                                         std::string& error) {
  std::vector<std::string> argv{interpreter, "-c", "import torch; print(torch.__version__)"};
  if (package_dir) {
    argv[2] = "import sys; sys.path.insert(0, sys.argv[1]); import ringrun._ringrun, torch; print(torch.__version__)";
    argv.push_back(*package_dir);
  }
  auto result = run_program(argv, kTorchImportTimeout);
  if (result && result->exit_code == 0) return last_line(result->output);
  error = import_error(interpreter, result);
  return std::nullopt;
}

}  // namespace

PythonBindingFacts probe_python_binding(const Environment& env) {
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
  facts.interpreter = find_in_path(env, "python3").value_or(kPython);
  std::error_code ec;
  if (!fs::exists(facts.interpreter, ec)) {
    facts.torch_error = fmt::format("{} not found", facts.interpreter);
    return facts;
  }
  const auto package = facts.module ? facts.package_dir : std::nullopt;
  facts.torch_version = torch_through(facts.interpreter, package, facts.torch_error);
  if (!facts.torch_version && facts.interpreter != kPython && fs::exists(kPython, ec)) {
    std::string ignored;
    facts.system_torch_version = torch_through(kPython, package, ignored);
  }
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
  if (!facts.torch_version && facts.system_torch_version)
    return std::pair{fmt::format("ringrun.torch in {}, but python3 on PATH ({}) cannot import it with torch: {}; "
                                 "{} can (torch {})",
                                 *facts.package_dir, facts.interpreter, facts.torch_error, kPython,
                                 *facts.system_torch_version),
                     fmt::format("start the ranks with {} (ringrun {} train.py), or install torch for {}", kPython,
                                 kPython, facts.interpreter)};
  if (!facts.torch_version)
    return std::pair{fmt::format("ringrun.torch in {}, but {} cannot import it with torch: {}", *facts.package_dir,
                                 facts.interpreter, facts.torch_error),
                     facts.interpreter == kPython ? std::string("apt-get install python3-torch")
                                                  : fmt::format("install torch for {}, or start the ranks with {} "
                                                                "after apt-get install python3-torch",
                                                                facts.interpreter, kPython)};
  return std::nullopt;
}

std::pair<bool, std::string> python_binding_line(const PythonBindingFacts& facts) {
  if (auto problem = python_binding_problem(facts))
    return {false, fmt::format("Python binding: {} ({})", problem->first, problem->second)};
  return {true, fmt::format("Python binding: ringrun.torch in {} (torch {}, {})", *facts.package_dir,
                            *facts.torch_version, facts.interpreter)};
}

Check check_python_binding(const PythonBindingFacts& facts) {
  if (auto problem = python_binding_problem(facts))
    return {"python binding", Status::warn, problem->first, problem->second};
  return {"python binding", Status::pass,
          fmt::format("ringrun.torch in {} (torch {}, {})", *facts.package_dir, *facts.torch_version,
                      facts.interpreter),
          ""};
}

}  // namespace ringrun::diagnostics

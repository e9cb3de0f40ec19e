// The Python bindings (ringrun.torch, ringrun.tensorflow) in the diagnostics: the package found
// beside this executable as the launcher finds it for the ranks' PYTHONPATH, or by the interpreter
// itself where pip installed it; imported with torch and TensorFlow by the python3 that
// `ringrun python3 train.py` runs (the virtualenv's ringrun was installed into, else the first on
// PATH, which need not be /usr/bin/python3: a pyenv shim, a container's own Python).
#include "doctor/doctor.hpp"
#include "facts/python_package.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>
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

// What a rank's interpreter says about itself, ringrun's package, torch and TensorFlow: one
// `key=value` line each (a failed import as `key_error=` and the exception's last line). argv[1]:
// the package folder a rank gets on PYTHONPATH, or "" when it finds the package itself (pip).
constexpr const char* kProbeScript = R"PY(
import sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
def report(key, action):
    try:
        print(f"{key}={action()}", flush=True)
        return True
    except BaseException as e:
        print(f"{key}_error={type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        return False
print(f"python={sys.version.split()[0]}")
if report("package", lambda: __import__("ringrun._ringrun").__path__[0].rsplit("/", 1)[0]):
    if report("torch", lambda: __import__("torch").__version__):
        report("binding", lambda: __import__("ringrun.torch") and "ok")
if report("tensorflow", lambda: __import__("tensorflow").__version__):
    def tensorflow_binding():
        # An op library still to be compiled on first import is reported, not compiled here.
        try:
            from ringrun import tensorflow_build
            if "on first import" in tensorflow_build.status():
                return tensorflow_build.status()
        except ImportError:
            pass
        import ringrun.tensorflow as rt
        return rt._build_status() if hasattr(rt, "_build_status") else "ok"
    report("tf_binding", tensorflow_binding)
)PY";

// key -> value of the probe's output.
std::map<std::string, std::string> parse_probe(const std::string& output) {
  std::map<std::string, std::string> out;
  std::size_t at = 0;
  while (at < output.size()) {
    std::size_t end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(at, end - at);
    if (auto eq = line.find('='); eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    at = end + 1;
  }
  return out;
}

std::optional<std::string> value(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::nullopt : std::optional(it->second);
}

// Runs the probe in `interpreter`; nullopt (with error set) when it did not run to the end.
std::optional<std::map<std::string, std::string>> probe(const std::string& interpreter,
                                                        const std::optional<std::string>& package_dir,
                                                        std::string& error) {
  auto result = run_program({interpreter, "-c", kProbeScript, package_dir.value_or("")}, kTorchImportTimeout);
  if (!result) {
    error = fmt::format("{} could not be started", interpreter);
    return std::nullopt;
  }
  if (result->exit_code != 0) {
    error = result->exit_code < 0 ? fmt::format("importing torch and TensorFlow took more than {} s",
                                                 kTorchImportTimeout.count())
                                  : last_line(result->output);
    return std::nullopt;
  }
  return parse_probe(result->output);
}

// The facts the probe's answers give (torch's part; the rest by the caller).
void read_torch(const std::map<std::string, std::string>& m, PythonBindingFacts& facts) {
  facts.python_version = value(m, "python");
  if (auto error = value(m, "package_error")) {
    facts.torch_error = *error;
    return;
  }
  if (auto error = value(m, "torch_error")) {
    facts.torch_error = *error;
    return;
  }
  if (auto error = value(m, "binding_error")) facts.binding_error = *error;
  facts.torch_version = value(m, "torch");
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
  // pip installed ringrun into a virtualenv: the ranks run its python (their PATH starts there).
  std::error_code ec;
  if (const auto venv = find_virtualenv(bin_dir); venv && fs::exists(fs::path(*venv) / "bin" / "python3", ec))
    facts.interpreter = (fs::path(*venv) / "bin" / "python3").string();
  else
    facts.interpreter = find_in_path(env, "python3").value_or(kPython);
  if (!fs::exists(facts.interpreter, ec)) {
    facts.torch_error = fmt::format("{} not found", facts.interpreter);
    return facts;
  }
  const auto package = facts.module ? facts.package_dir : std::nullopt;
  if (auto answers = probe(facts.interpreter, package, facts.torch_error)) {
    read_torch(*answers, facts);
    // Without a package beside this ringrun (pip), the interpreter found it on its own path.
    if (!facts.package_dir)
      if (auto found = value(*answers, "package")) {
        facts.package_dir = *found;
        facts.module = *found + "/ringrun";
      }
    facts.tensorflow_version = value(*answers, "tensorflow");
    facts.tensorflow_status = value(*answers, "tf_binding").value_or(value(*answers, "tf_binding_error").value_or(
        value(*answers, "tensorflow_error").value_or("")));
  }
  if (!facts.torch_version && facts.interpreter != kPython && fs::exists(kPython, ec)) {
    std::string ignored;
    if (auto answers = probe(kPython, package, ignored)) {
      PythonBindingFacts system;
      read_torch(*answers, system);
      if (!system.binding_error) facts.system_torch_version = system.torch_version;
    }
  }
  return facts;
}

// The missing piece's reason and fix, or nullopt when ringrun.torch is ready.
static std::optional<std::pair<std::string, std::string>> python_binding_problem(const PythonBindingFacts& facts) {
  if (!facts.package_dir)
    return std::pair{fmt::format("the ringrun package is not in {}, nor importable by {}", facts.searched,
                                 facts.interpreter),
                     "pip install . into the environment that runs the ranks, or build with python3-dev and "
                     "pybind11-dev installed (the ringrun_python target)"};
  if (!facts.module)
    return std::pair{fmt::format("no _ringrun*.so in {}/ringrun", *facts.package_dir),
                     "build the ringrun_python target (needs python3-dev and pybind11-dev)"};
  if (facts.binding_error)
    return std::pair{fmt::format("ringrun.torch in {} does not import with torch {} ({}): {}", *facts.package_dir,
                                 facts.torch_version.value_or("?"), facts.interpreter, *facts.binding_error),
                     "use a torch of the supported range (README), or rebuild ringrun for this Python"};
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
                                                  : fmt::format("install torch for {} (pip install torch), or start the "
                                                                "ranks with {} after apt-get install python3-torch",
                                                                facts.interpreter, kPython)};
  return std::nullopt;
}

// "ringrun.torch in DIR (torch 2.13.0, Python 3.11.7, /venv/bin/python3)"
static std::string ready_text(const PythonBindingFacts& facts) {
  const std::string python = facts.python_version ? "Python " + *facts.python_version + ", " : std::string();
  return fmt::format("ringrun.torch in {} (torch {}, {}{})", *facts.package_dir, *facts.torch_version, python,
                     facts.interpreter);
}

std::pair<bool, std::string> python_binding_line(const PythonBindingFacts& facts) {
  if (auto problem = python_binding_problem(facts))
    return {false, fmt::format("Python binding: {} ({})", problem->first, problem->second)};
  return {true, "Python binding: " + ready_text(facts)};
}

std::pair<bool, std::string> tensorflow_binding_line(const PythonBindingFacts& facts) {
  if (!facts.tensorflow_version)
    return {false, fmt::format("TensorFlow binding: {} cannot import tensorflow{}", facts.interpreter,
                               facts.tensorflow_status.empty() ? "" : ": " + facts.tensorflow_status)};
  if (facts.tensorflow_status != "ok" && facts.tensorflow_status.rfind("ringrun.tensorflow", 0) != 0)
    return {false, fmt::format("TensorFlow binding: TensorFlow {} imports, ringrun.tensorflow does not: {}",
                               *facts.tensorflow_version, facts.tensorflow_status)};
  // "ringrun.tensorflow: built for TensorFlow X" says nothing more; where the op library was or
  // will be compiled does.
  std::string how;
  if (facts.tensorflow_status.rfind("ringrun.tensorflow: compiled", 0) == 0)
    how = "; " + facts.tensorflow_status.substr(std::string("ringrun.tensorflow: ").size());
  return {true, fmt::format("TensorFlow binding: ringrun.tensorflow (TensorFlow {}, {}){}", *facts.tensorflow_version,
                            facts.interpreter, how)};
}

Check check_python_binding(const PythonBindingFacts& facts) {
  if (auto problem = python_binding_problem(facts))
    return {"python binding", Status::warn, problem->first, problem->second};
  return {"python binding", Status::pass, ready_text(facts), ""};
}

}  // namespace ringrun::diagnostics

// Where the `ringrun` Python package (ringrun.torch) lives relative to this executable, so that
// `ringrun` can put it on every rank's PYTHONPATH and the diagnostics can report it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ringrun {

// The folder that holds ringrun/ beside the executables in `bin_dir`: `bin_dir/../python` when it
// has ringrun/__init__.py (the build tree: build/bin -> build/python), else
// `bin_dir/../lib/python3/dist-packages` when it has ringrun/ (an install prefix); nullopt when
// neither (a build without the binding). Normalized, without a trailing slash.
std::optional<std::string> find_python_package_dir(const std::filesystem::path& bin_dir);

// The root of the environment whose programs are in bin_dir: <root> for <root>/bin, and for pip's
// layout, where the programs are inside the package (<root>/lib/pythonX.Y/site-packages/ringrun/bin,
// cmake/layout.cmake), the root above site-packages.
std::filesystem::path installed_root(const std::filesystem::path& bin_dir);

// The Python virtualenv ringrun's programs in bin_dir were installed into (pip: its root, by
// installed_root, holds pyvenv.cfg); nullopt otherwise. Normalized, without a trailing slash.
std::optional<std::string> find_virtualenv(const std::filesystem::path& bin_dir);

// This executable (/proc/self/exe, symlinks resolved): what ranks and probe steps run as the task
// shim; "ringrun" (looked up on PATH) when unreadable.
std::filesystem::path executable_path();

// The directory of this executable; empty when /proc/self/exe is unreadable.
std::filesystem::path executable_dir();

// The two candidates find_python_package_dir looks at, for messages ("A or B").
std::string python_package_candidates(const std::filesystem::path& bin_dir);

}  // namespace ringrun

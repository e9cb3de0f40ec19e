// Whether a program is an MPI program, so `--launcher auto` can start it under mpirun instead of
// as N MPI singletons. The parsers are pure (bytes in, facts out); detect_mpi_program reads files.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringrun {

// Reads `length` bytes at `offset` of a file; fewer (or none) past its end.
using ReadAt = std::function<std::string(std::uint64_t offset, std::size_t length)>;

// The DT_NEEDED entries of an ELF executable or library (32/64-bit, either byte order), read
// through `read`; empty when it is not ELF, is static, or is malformed.
std::vector<std::string> elf_needed_libraries(const ReadAt& read);

// libmpi.so.40, libmpi_cxx.so, libmpich.so.12 (MPICH, Cray, Intel MPI's libmpi.so.12): MPI itself.
bool is_mpi_library(std::string_view soname);

// The interpreter and its arguments named by a `#!` line at the start of `head`; empty when none.
// `#!/usr/bin/env python3` gives {"/usr/bin/env", "python3"}.
std::vector<std::string> shebang_words(std::string_view head);

// Whether `name` (a path or a file name) is a Python interpreter: python, python3, python3.11.
bool is_python_interpreter(std::string_view name);

// The last part of a path: "python3" for "/usr/bin/python3".
std::string basename_of(std::string_view path);

// Whether Python source imports mpi4py (`import mpi4py`, `from mpi4py import MPI`), line by line.
bool python_source_imports_mpi4py(std::string_view source);

// What a Python command line runs: `-m mpi4py...` or `-c CODE` importing it says so at once; else
// the script file (the first argument that is not an option), nullopt when there is none.
struct PythonTarget {
  bool runs_mpi4py = false;
  std::optional<std::string> script;
};
PythonTarget python_target(const std::vector<std::string>& args_after_interpreter);

// The reason `program` (argv, argv[0] found through `path` as execvp would) is an MPI program,
// e.g. "links libmpi.so.40" or "imports mpi4py"; nullopt when nothing says so. Looks at the
// program's own DT_NEEDED (not its libraries' dependencies), a script's Python interpreter and
// the first 256 KiB of a Python script. Never throws: an unreadable program is not MPI.
std::optional<std::string> detect_mpi_program(const std::vector<std::string>& program, const std::string& path);

}  // namespace ringrun

// Which programs are MPI programs (so --launcher auto starts them under mpirun; ringrun(1), MPI
// PROGRAMS), with plain data and this test's own ELF file; and the ssh_config names the host check
// accepts.
#include "launch/mpi_programs.hpp"
#include "facts/mpi_program.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>

using namespace ringrun;

namespace {

ReadAt read_string(const std::string& bytes) {
  return [bytes](std::uint64_t offset, std::size_t length) {
    return offset >= bytes.size() ? std::string() : bytes.substr(static_cast<std::size_t>(offset), length);
  };
}

ReadAt read_file(int fd) {
  return [fd](std::uint64_t offset, std::size_t length) {
    std::string out(length, '\0');
    ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return out;
  };
}

void put(std::string& b, std::size_t at, std::uint64_t v, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// A minimal little-endian ELF64 file: one PT_LOAD covering the file, one PT_DYNAMIC with the
// given DT_NEEDED names.
std::string tiny_elf(const std::vector<std::string>& needed) {
  std::string strings(1, '\0');
  std::vector<std::uint64_t> offsets;
  for (const auto& n : needed) {
    offsets.push_back(strings.size());
    strings += n + '\0';
  }
  const std::size_t phoff = 64, dynoff = phoff + 2 * 56, dynsize = (needed.size() + 3) * 16,
                    stroff = dynoff + dynsize;
  std::string b(stroff + strings.size(), '\0');
  b.replace(0, 4, "\x7f" "ELF");
  b[4] = 2;  // ELFCLASS64
  b[5] = 1;  // little endian
  put(b, 32, phoff, 8);
  put(b, 54, 56, 2);
  put(b, 56, 2, 2);
  put(b, phoff, 1, 4);  // PT_LOAD at vaddr 0x400000
  put(b, phoff + 16, 0x400000, 8);
  put(b, phoff + 32, b.size(), 8);
  put(b, phoff + 56, 2, 4);  // PT_DYNAMIC
  put(b, phoff + 56 + 8, dynoff, 8);
  put(b, phoff + 56 + 32, dynsize, 8);
  std::size_t at = dynoff;
  for (auto o : offsets) {
    put(b, at, 1, 8);
    put(b, at + 8, o, 8);
    at += 16;
  }
  put(b, at, 5, 8);
  put(b, at + 8, 0x400000 + stroff, 8);
  put(b, at + 16, 10, 8);
  put(b, at + 24, strings.size(), 8);
  b.replace(stroff, strings.size(), strings);
  return b;
}

}  // namespace

TEST_CASE("DT_NEEDED of a built ELF file and of this test itself") {
  CHECK(elf_needed_libraries(read_string(tiny_elf({"libmpi.so.40", "libc.so.6"}))) ==
        std::vector<std::string>{"libmpi.so.40", "libc.so.6"});
  CHECK(elf_needed_libraries(read_string(tiny_elf({}))).empty());
  CHECK(elf_needed_libraries(read_string("#!/bin/sh\necho hi\n")).empty());
  CHECK(elf_needed_libraries(read_string("")).empty());
  // Truncated or corrupt: nothing, never a crash.
  const std::string whole = tiny_elf({"libmpi.so.40"});
  for (std::size_t cut = 0; cut < whole.size(); cut += 7) CHECK_NOTHROW(elf_needed_libraries(read_string(whole.substr(0, cut))));
  int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto own = elf_needed_libraries(read_file(fd));
  ::close(fd);
  CHECK(std::find(own.begin(), own.end(), "libc.so.6") != own.end());
}

TEST_CASE("MPI libraries by soname") {
  for (const char* yes : {"libmpi.so.40", "libmpi.so", "libmpi_cxx.so.40", "libmpi_mpifh.so", "libmpich.so.12"})
    CHECK_MESSAGE(is_mpi_library(yes), yes);
  for (const char* no : {"libmpfr.so.6", "libm.so.6", "libmpio.so", "libc.so.6", "libompitrace.so"})
    CHECK_MESSAGE(!is_mpi_library(no), no);
}

TEST_CASE("Python command lines and sources that run mpi4py") {
  CHECK(python_target({"-m", "mpi4py", "prog.py"}).runs_mpi4py);
  CHECK(python_target({"-u", "-m", "mpi4py.futures", "prog.py"}).runs_mpi4py);
  CHECK(python_target({"-mmpi4py", "prog.py"}).runs_mpi4py);
  CHECK(python_target({"-c", "from mpi4py import MPI; print(1)"}).runs_mpi4py);
  CHECK(!python_target({"-m", "torch.distributed.run", "x.py"}).runs_mpi4py);
  CHECK(!python_target({"-c", "print('mpi4py')"}).runs_mpi4py);
  CHECK(python_target({"-u", "-W", "ignore", "train.py", "--lr", "1"}).script == "train.py");
  CHECK(!python_target({"-u"}).script);
  CHECK(python_source_imports_mpi4py("import os\nfrom mpi4py import MPI\n"));
  CHECK(python_source_imports_mpi4py("import os, mpi4py\n"));
  CHECK(python_source_imports_mpi4py("def f():\n    import mpi4py.MPI as M\n"));
  CHECK(!python_source_imports_mpi4py("# from mpi4py import MPI\nprint('import mpi4py')\n"));
  CHECK(!python_source_imports_mpi4py("import mpi4pyx\n"));
  CHECK(shebang_words("#!/usr/bin/env python3 -u\nx") == std::vector<std::string>{"/usr/bin/env", "python3", "-u"});
  CHECK(shebang_words("\x7f" "ELF").empty());
  CHECK(is_python_interpreter("/usr/bin/python3.11"));
  CHECK(is_python_interpreter("python"));
  CHECK(!is_python_interpreter("/usr/bin/pythonista"));
}

TEST_CASE("detect_mpi_program: not found, not MPI, a shell") {
  CHECK(!detect_mpi_program({"no-such-program-x"}, "/usr/bin:/bin"));
  CHECK(!detect_mpi_program({"sh", "-c", "true"}, "/usr/bin:/bin"));
  CHECK(!detect_mpi_program({}, "/usr/bin:/bin"));
}

TEST_CASE("ssh_config Host names stand for hosts ssh can reach without DNS") {
  CHECK(ssh_config_host_names("Host a b\n  HostName 10.0.0.1\nhost *.lab !x c?\nMatch all\n") ==
        std::vector<std::string>{"a", "b"});
}

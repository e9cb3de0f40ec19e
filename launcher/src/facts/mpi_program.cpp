#include "facts/mpi_program.hpp"

#include "common/subprocess.hpp"

#include <ringrun/process.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace ringrun {
namespace {

// Bounds on what a malformed file can make us read: real programs are far below them.
constexpr std::uint64_t kMaxTableBytes = 1 << 20;
constexpr std::size_t kScriptBytes = 256 * 1024;

struct ElfReader {
  const ReadAt& read;
  bool is64 = true;
  bool little = true;

  // An unsigned field of `size` bytes at `at` in `bytes`, in the file's byte order; 0 past the end.
  std::uint64_t field(const std::string& bytes, std::size_t at, std::size_t size) const {
    if (at + size > bytes.size()) return 0;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < size; ++i) {
      const auto b = static_cast<unsigned char>(bytes[little ? at + size - 1 - i : at + i]);
      v = (v << 8) | b;
    }
    return v;
  }
  std::size_t word() const { return is64 ? 8 : 4; }
};

struct Segment {
  std::uint32_t type;
  std::uint64_t offset, vaddr, filesz;
};

std::vector<Segment> program_headers(const ElfReader& elf, const std::string& header) {
  const std::uint64_t phoff = elf.field(header, elf.is64 ? 32 : 28, elf.word());
  const std::uint64_t phentsize = elf.field(header, elf.is64 ? 54 : 42, 2);
  const std::uint64_t phnum = elf.field(header, elf.is64 ? 56 : 44, 2);
  if (phentsize < (elf.is64 ? 56u : 32u) || phnum == 0 || phentsize * phnum > kMaxTableBytes) return {};
  const std::string table = elf.read(phoff, static_cast<std::size_t>(phentsize * phnum));
  std::vector<Segment> out;
  for (std::uint64_t i = 0; i < phnum; ++i) {
    const std::size_t at = static_cast<std::size_t>(i * phentsize);
    Segment s{};
    s.type = static_cast<std::uint32_t>(elf.field(table, at, 4));
    s.offset = elf.field(table, at + (elf.is64 ? 8 : 4), elf.word());
    s.vaddr = elf.field(table, at + (elf.is64 ? 16 : 8), elf.word());
    s.filesz = elf.field(table, at + (elf.is64 ? 32 : 16), elf.word());
    out.push_back(s);
  }
  return out;
}

// DT_STRTAB holds an address; the loadable segment containing it says where it is in the file.
std::optional<std::uint64_t> file_offset_of(const std::vector<Segment>& segments, std::uint64_t vaddr) {
  for (const Segment& s : segments)
    if (s.type == 1 /* PT_LOAD */ && vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz) return s.offset + (vaddr - s.vaddr);
  return std::nullopt;
}

std::string read_head(const std::string& file, std::size_t bytes) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out(bytes, '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  ::close(fd);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

std::optional<std::string> elf_mpi_reason(const std::string& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  ReadAt read = [fd](std::uint64_t offset, std::size_t length) {
    std::string out(length, '\0');
    ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return out;
  };
  std::optional<std::string> reason;
  for (const std::string& lib : elf_needed_libraries(read))
    if (!reason && is_mpi_library(lib)) reason = "links " + lib;
  ::close(fd);
  return reason;
}

// `python3 ARGS`: the interpreter must be Python and the command line or script name mpi4py.
// A script that is not found as given is not searched in PATH: python does not either.
std::optional<std::string> python_mpi_reason(const std::vector<std::string>& args) {
  PythonTarget target = python_target(args);
  if (target.runs_mpi4py) return std::string("runs mpi4py");
  if (target.script && python_source_imports_mpi4py(read_head(*target.script, kScriptBytes)))
    return "imports mpi4py (" + *target.script + ")";
  return std::nullopt;
}

}  // namespace

std::vector<std::string> elf_needed_libraries(const ReadAt& read) {
  const std::string header = read(0, 64);
  if (header.size() < 52 || header.compare(0, 4, "\x7f" "ELF") != 0) return {};
  ElfReader elf{read};
  elf.is64 = header[4] == 2;
  elf.little = header[5] != 2;
  if (elf.is64 && header.size() < 64) return {};
  const std::vector<Segment> segments = program_headers(elf, header);
  auto dynamic = std::find_if(segments.begin(), segments.end(), [](const Segment& s) { return s.type == 2; });
  if (dynamic == segments.end() || dynamic->filesz > kMaxTableBytes) return {};
  const std::string table = read(dynamic->offset, static_cast<std::size_t>(dynamic->filesz));
  const std::size_t entry = 2 * elf.word();
  std::vector<std::uint64_t> needed;
  std::uint64_t strtab = 0, strsz = 0;
  for (std::size_t at = 0; at + entry <= table.size(); at += entry) {
    const std::uint64_t tag = elf.field(table, at, elf.word());
    const std::uint64_t value = elf.field(table, at + elf.word(), elf.word());
    if (tag == 0) break;  // DT_NULL
    if (tag == 1) needed.push_back(value);
    if (tag == 5) strtab = value;
    if (tag == 10) strsz = value;
  }
  auto strings_at = file_offset_of(segments, strtab);
  if (needed.empty() || !strings_at || strsz == 0 || strsz > kMaxTableBytes) return {};
  const std::string strings = read(*strings_at, static_cast<std::size_t>(strsz));
  std::vector<std::string> out;
  for (std::uint64_t offset : needed) {
    if (offset >= strings.size()) continue;
    const auto end = strings.find('\0', static_cast<std::size_t>(offset));
    if (end == std::string::npos) continue;
    out.push_back(strings.substr(static_cast<std::size_t>(offset), end - static_cast<std::size_t>(offset)));
  }
  return out;
}

bool is_mpi_library(std::string_view soname) {
  if (!soname.starts_with("libmpi")) return false;
  soname.remove_prefix(6);
  return soname.starts_with(".so") || soname.starts_with("_") || soname.starts_with("ch");
}

std::vector<std::string> shebang_words(std::string_view head) {
  if (!head.starts_with("#!")) return {};
  head.remove_prefix(2);
  head = head.substr(0, head.find('\n'));
  std::vector<std::string> words;
  std::string word;
  for (char c : head) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

bool is_python_interpreter(std::string_view name) {
  // python, python3, python3.11: "python" and then digits and dots only.
  const std::string name_only = basename_of(name);
  std::string_view base = name_only;
  if (!base.starts_with("python")) return false;
  base.remove_prefix(6);
  return std::all_of(base.begin(), base.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

namespace {

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_blank(char c) { return c == ' ' || c == '\t'; }

void skip_blanks(std::string_view& s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
}

// Takes a keyword followed by at least one blank off the front of s.
bool take_keyword(std::string_view& s, std::string_view keyword) {
  if (!s.starts_with(keyword) || s.size() == keyword.size() || !is_blank(s[keyword.size()])) return false;
  s.remove_prefix(keyword.size());
  skip_blanks(s);
  return true;
}

// A dotted module name off the front of s ("mpi4py", "os.path"); empty when none.
std::string_view take_module(std::string_view& s) {
  std::size_t n = 0;
  while (n < s.size() && (is_word_char(s[n]) || s[n] == '.')) ++n;
  std::string_view module = s.substr(0, n);
  s.remove_prefix(n);
  return module;
}

bool is_mpi4py(std::string_view module) { return module == "mpi4py" || module.starts_with("mpi4py."); }

// `import a, mpi4py.MPI as m` or `from mpi4py import MPI`, at the start of a line (indented or not).
bool line_imports_mpi4py(std::string_view line) {
  skip_blanks(line);
  if (take_keyword(line, "from")) return is_mpi4py(take_module(line));
  if (!take_keyword(line, "import")) return false;
  for (;;) {
    if (is_mpi4py(take_module(line))) return true;
    const std::size_t comma = line.find(',');
    if (comma == std::string_view::npos) return false;
    line.remove_prefix(comma + 1);
    skip_blanks(line);
  }
}

}  // namespace

bool python_source_imports_mpi4py(std::string_view source) {
  while (!source.empty()) {
    const std::size_t end = std::min(source.find('\n'), source.size());
    const std::string_view line = source.substr(0, end);
    if (line.find("mpi4py") != std::string_view::npos && line_imports_mpi4py(line)) return true;
    source.remove_prefix(std::min(end + 1, source.size()));
  }
  return false;
}

PythonTarget python_target(const std::vector<std::string>& args) {
  PythonTarget out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.starts_with("-m") || a.starts_with("-c")) {
      // `-m MODULE` or `-mMODULE`; what follows belongs to the module or the code.
      if (a.size() == 2 && i + 1 >= args.size()) return out;
      const std::string value = a.size() > 2 ? a.substr(2) : args[i + 1];
      out.runs_mpi4py = a[1] == 'm' ? (value == "mpi4py" || value.starts_with("mpi4py."))
                                    : python_source_imports_mpi4py(value);
      return out;
    }
    if (a == "-W" || a == "-X" || a == "--check-hash-based-pycs") {
      ++i;  // options with a separate value
      continue;
    }
    if (a == "-" || a == "--") {
      if (a == "--" && i + 1 < args.size()) out.script = args[i + 1];
      return out;
    }
    if (a.size() > 1 && a[0] == '-') continue;
    out.script = a;
    return out;
  }
  return out;
}

std::optional<std::string> detect_mpi_program(const std::vector<std::string>& program, const std::string& path) {
  if (program.empty()) return std::nullopt;
  std::string file;
  try {
    file = resolve_program(program.front(), path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::vector<std::string> args(program.begin() + 1, program.end());
  if (is_python_interpreter(file)) return python_mpi_reason(args);
  if (auto reason = elf_mpi_reason(file)) return reason;
  // A script: `#!/usr/bin/python3` or `#!/usr/bin/env python3` run it as `python3 FILE ARGS`.
  std::vector<std::string> words = shebang_words(read_head(file, 512));
  if (!words.empty() && basename_of(words.front()) == "env") words.erase(words.begin());
  while (!words.empty() && words.front().starts_with("-")) words.erase(words.begin());  // env -S
  if (words.empty() || !is_python_interpreter(words.front())) return std::nullopt;
  std::vector<std::string> python_args(words.begin() + 1, words.end());
  python_args.push_back(file);
  python_args.insert(python_args.end(), args.begin(), args.end());
  return python_mpi_reason(python_args);
}

std::string basename_of(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace ringrun

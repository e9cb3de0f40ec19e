// hwloc 2.x XML exports read without hwloc. hwloc's import inserts every object by cpuset and so is
// quadratic: a 102,400-core export takes tens of seconds. This reader makes one pass over the
// mmap'd file, keeps a flat array of the objects it needs (attribute values stay views into the
// mapping; cpusets are parsed only for the objects that are asked about), then derives the
// Topology with exactly the rules of load.cpp's Reader. test_native.cpp checks that both agree
// on every fixture; anything this reader does not know makes it answer nullopt so hwloc decides.
// This file maps the file and answers; xml_parse.cpp reads the XML into a flat Tree,
// xml_build.cpp derives the Topology from it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "readers.hpp"
#include "xml_tree.hpp"

namespace ringrun::topology::native {
namespace {

// A read-only private mapping of the whole file, unmapped on scope exit.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      size_ = static_cast<size_t>(st.st_size);
      // MAP_POPULATE: the whole file is read anyway; faulting it in up front is cheaper than
      // one fault per page during the scan.
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const char*>(p);
        ::madvise(p, size_, MADV_SEQUENTIAL);
      }
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::optional<Topology> read_xml(const std::string& path) {
  Mapping file(path);
  if (!file.data()) return std::nullopt;
  try {
    xml::Tree tree;
    if (!xml::parse_tree(file.data(), file.data() + file.size(), tree)) return std::nullopt;
    return xml::build_topology(tree, path);
  } catch (const std::exception&) {
    // A value this reader cannot interpret (bad cpuset, unknown entity): hwloc decides.
    return std::nullopt;
  }
}

}  // namespace ringrun::topology::native

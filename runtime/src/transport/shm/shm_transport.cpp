#include "transport/shm/shm_transport.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/runtime.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RINGRUN_CPU_RELAX() _mm_pause()
#else
#define RINGRUN_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace ringrun::core {
namespace {

constexpr std::uint64_t kMagic = 0x31534D4852525249ull;  // "IRRRHMS1"
constexpr std::size_t kLine = 64;
constexpr std::size_t kPage = 4096;

// Spin this long, then yield this long, then sleep on the futex in short naps.
constexpr auto kSpinFor = std::chrono::microseconds(20);
constexpr auto kYieldFor = std::chrono::microseconds(500);
constexpr long kNapNanoseconds = 2'000'000;

struct SegmentHeader {
  std::atomic<std::uint64_t> magic;  // set last by the creator
  std::uint64_t ranks;
  std::uint64_t slot_bytes;
};

// The header a rank describes its collective with (plain fields, published by arrived).
struct SharedHeader {
  std::uint64_t seq, count;
  std::uint32_t kind, dtype, op;
  std::int32_t root;
};

bool reached(std::uint32_t value, std::uint32_t target) { return static_cast<std::int32_t>(value - target) >= 0; }

std::size_t round_up(std::size_t value, std::size_t to) { return (value + to - 1) / to * to; }

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected) {
  timespec nap{0, kNapNanoseconds};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &nap, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

struct Range {
  std::size_t begin, size;
};
// Shard p of m elements split over n ranks in units of whole cache lines.
Range shard(std::size_t m, std::size_t esize, int n, int p) {
  std::size_t unit = std::max<std::size_t>(1, kLine / esize);
  std::size_t units = (m + unit - 1) / unit;
  std::size_t base = units / n, extra = units % n;
  std::size_t up = static_cast<std::size_t>(p);
  std::size_t first = up * base + std::min(up, extra);
  std::size_t count = base + (up < extra ? 1 : 0);
  std::size_t begin = std::min(m, first * unit);
  std::size_t end = std::min(m, (first + count) * unit);
  return {begin, end - begin};
}

std::string segment_name(const World& world) {
  return fmt::format("/ringrun-{:016x}-{}", world.peers[0].nonce, world.size);
}

}  // namespace

struct ShmTransport::Control {
  alignas(kLine) std::atomic<std::uint32_t> arrived;
  alignas(kLine) std::atomic<std::uint32_t> reduced;
  alignas(kLine) std::atomic<std::uint32_t> consumed;
  alignas(kLine) std::atomic<std::uint32_t> sleepers;  // peers asleep on one of this rank's counters
  alignas(kLine) SharedHeader header[2];
};

namespace {
std::size_t controls_offset() { return round_up(sizeof(SegmentHeader), kPage); }
std::size_t slots_offset(int n) { return round_up(controls_offset() + sizeof(ShmTransport::Control) * n, kPage); }
std::size_t segment_bytes(int n, std::size_t slot_bytes) { return slots_offset(n) + 2 * slot_bytes * n; }
}  // namespace

std::unique_ptr<ShmTransport> ShmTransport::create(TcpMesh& mesh, std::size_t slot_bytes, std::string* why_not) {
  const World& world = mesh.world();
  slot_bytes = round_up(std::max<std::size_t>(slot_bytes, kPage), kPage);
  const std::size_t bytes = segment_bytes(world.size, slot_bytes);
  const std::string name = segment_name(world);
  std::string failure;
  void* base = MAP_FAILED;

  auto map = [&](int fd) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) failure = fmt::format("mmap of /dev/shm{} ({} bytes): {}", name, bytes, std::strerror(errno));
  };
  // Rank 0 creates and initialises the segment; posix_fallocate reserves the pages now, so a full
  // /dev/shm fails here with ENOSPC instead of a SIGBUS in the middle of a collective.
  if (world.rank == 0) {
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      failure = fmt::format("cannot create /dev/shm{}: {}", name, std::strerror(errno));
    } else {
      int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (rc != 0) failure = fmt::format("cannot reserve {} bytes in /dev/shm{}: {}", bytes, name, std::strerror(rc));
      else map(fd);
      ::close(fd);
      if (base != MAP_FAILED) {
        auto* header = new (base) SegmentHeader{};
        header->ranks = static_cast<std::uint64_t>(world.size);
        header->slot_bytes = slot_bytes;
        for (int r = 0; r < world.size; ++r)
          new (static_cast<char*>(base) + controls_offset() + sizeof(Control) * r) Control{};
        header->magic.store(kMagic, std::memory_order_release);
      }
    }
  }
  auto created = mesh.exchange_all(failure.empty() ? "1" : "0", "shared-memory setup");
  if (created[0] != "1") {
    if (base != MAP_FAILED) ::munmap(base, bytes);
    if (world.rank == 0) ::shm_unlink(name.c_str());
    *why_not = world.rank == 0 ? failure : "rank 0 could not create the shared-memory segment";
    return nullptr;
  }
  if (world.rank != 0) {
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    struct stat info {};
    if (fd < 0) {
      failure = fmt::format("cannot open /dev/shm{}: {}", name, std::strerror(errno));
    } else if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) != bytes) {
      failure = fmt::format("/dev/shm{} has {} bytes, expected {}", name, info.st_size, bytes);
    } else {
      map(fd);
    }
    if (fd >= 0) ::close(fd);
    if (base != MAP_FAILED) {
      auto* header = static_cast<SegmentHeader*>(base);
      if (header->magic.load(std::memory_order_acquire) != kMagic || header->slot_bytes != slot_bytes)
        failure = fmt::format("/dev/shm{} was not set up for this job", name);
    }
  }
  auto attached = mesh.exchange_all(failure.empty() ? "1" : "0", "shared-memory setup");
  // Every rank has mapped it (or given up): the name is no longer needed, and unlinking now means
  // a crash leaves nothing behind in /dev/shm.
  if (world.rank == 0) ::shm_unlink(name.c_str());
  for (int r = 0; r < world.size; ++r) {
    if (attached[r] != "1") {
      if (base != MAP_FAILED) ::munmap(base, bytes);
      *why_not = r == world.rank ? failure : fmt::format("{} could not map the shared-memory segment", world.describe(r));
      return nullptr;
    }
  }
  return std::unique_ptr<ShmTransport>(new ShmTransport(mesh, base, bytes, slot_bytes));
}

ShmTransport::ShmTransport(TcpMesh& mesh, void* base, std::size_t bytes, std::size_t slot_bytes)
    : mesh_(mesh), world_(mesh.world()), base_(base), bytes_(bytes), slot_bytes_(slot_bytes) {}

ShmTransport::~ShmTransport() { ::munmap(base_, bytes_); }

ShmTransport::Control& ShmTransport::control(int rank) const {
  return *reinterpret_cast<Control*>(static_cast<char*>(base_) + controls_offset() + sizeof(Control) * rank);
}

char* ShmTransport::slot(int rank, std::uint32_t round) const {
  return static_cast<char*>(base_) + slots_offset(world_.size) + slot_bytes_ * (2 * rank + (round & 1));
}

void ShmTransport::publish(std::atomic<std::uint32_t>& counter) {
  counter.store(round_, std::memory_order_seq_cst);
  if (control(world_.rank).sleepers.load(std::memory_order_seq_cst) > 0) futex_wake(&counter);
}

void ShmTransport::wait(int peer, std::atomic<std::uint32_t>& counter, std::uint32_t target, const char* what) {
  if (reached(counter.load(std::memory_order_acquire), target)) return;
  auto start = std::chrono::steady_clock::now();
  for (unsigned i = 1;; ++i) {
    if (reached(counter.load(std::memory_order_acquire), target)) return;
    RINGRUN_CPU_RELAX();
    if ((i & 63) == 0 && std::chrono::steady_clock::now() - start > kSpinFor) break;
  }
  while (std::chrono::steady_clock::now() - start < kYieldFor) {
    if (reached(counter.load(std::memory_order_acquire), target)) return;
    ::sched_yield();
  }
  std::atomic<std::uint32_t>& sleepers = control(peer).sleepers;
  for (;;) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    std::uint32_t value = counter.load(std::memory_order_seq_cst);
    if (!reached(value, target)) futex_wait(&counter, value);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(counter.load(std::memory_order_acquire), target)) return;
    try {
      mesh_.check_alive(what);
    } catch (const RuntimeError&) {
      // The peer may have finished this round and left just after publishing it.
      if (reached(counter.load(std::memory_order_acquire), target)) return;
      throw;
    }
  }
}

void ShmTransport::wait_all(std::atomic<std::uint32_t> Control::*counter, std::uint32_t target, const char* what) {
  for (int p = 0; p < world_.size; ++p)
    if (p != world_.rank) wait(p, control(p).*counter, target, what);
}

void ShmTransport::begin_round(const OpHeader& header, bool first) {
  ++round_;
  // My slot of this parity was last used two rounds ago; every peer must be done reading it.
  wait_all(&Control::consumed, round_ - 2, collective_name(header.kind));
  if (first) {
    SharedHeader& h = control(world_.rank).header[round_ & 1];
    h = {header.seq, header.count, static_cast<std::uint32_t>(header.kind), static_cast<std::uint32_t>(header.dtype),
         static_cast<std::uint32_t>(header.op), header.root};
  }
}

void ShmTransport::check_headers(const OpHeader& header) {
  for (int p = 0; p < world_.size; ++p) {
    if (p == world_.rank) continue;
    const SharedHeader& h = control(p).header[round_ & 1];
    OpHeader theirs;
    theirs.seq = h.seq;
    theirs.count = h.count;
    theirs.kind = static_cast<Collective>(h.kind);
    theirs.dtype = static_cast<ringrun_dtype>(h.dtype);
    theirs.op = static_cast<ringrun_op>(h.op);
    theirs.root = h.root;
    if (!header.matches(theirs)) throw_mismatch(world_, header, p, theirs);
  }
}

void ShmTransport::barrier(const OpHeader& header) {
  Control& me = control(world_.rank);
  begin_round(header, true);
  publish(me.arrived);
  wait_all(&Control::arrived, round_, "barrier");
  check_headers(header);
  publish(me.consumed);
}

void ShmTransport::allreduce_direct(const OpHeader& header, const char* send, char* recv) {
  const int n = world_.size;
  Control& me = control(world_.rank);
  const std::size_t bytes = header.bytes();
  begin_round(header, true);
  std::memcpy(slot(world_.rank, round_), send, bytes);
  publish(me.arrived);
  wait_all(&Control::arrived, round_, "allreduce");
  check_headers(header);
  // Every rank reduces everything in rank order: identical results everywhere, one sync.
  reduce(recv, slot(0, round_), slot(1, round_), header.count, header.dtype, header.op);
  for (int p = 2; p < n; ++p) reduce(recv, recv, slot(p, round_), header.count, header.dtype, header.op);
  if (header.op == RINGRUN_AVERAGE) finish_average(recv, header.count, header.dtype, n);
  publish(me.consumed);
}

void ShmTransport::allreduce(const OpHeader& header, const void* send_ptr, void* recv_ptr) {
  const auto* send = static_cast<const char*>(send_ptr);
  auto* recv = static_cast<char*>(recv_ptr);
  const std::size_t bytes = header.bytes();
  if (bytes <= kDirectMaxBytes && bytes <= slot_bytes_) return allreduce_direct(header, send, recv);

  const int n = world_.size, r = world_.rank;
  Control& me = control(r);
  const std::size_t esize = dtype_size(header.dtype);
  const std::size_t per_round = slot_bytes_ / esize;
  for (std::size_t begin = 0; begin < header.count; begin += per_round) {
    const std::size_t m = std::min(per_round, header.count - begin);
    const char* in = send + begin * esize;
    char* out = recv + begin * esize;
    begin_round(header, begin == 0);
    char* mine = slot(r, round_);
    // 1. Export the parts of my input that the other ranks reduce.
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      Range s = shard(m, esize, n, p);
      std::memcpy(mine + s.begin * esize, in + s.begin * esize, s.size * esize);
    }
    publish(me.arrived);
    wait_all(&Control::arrived, round_, "allreduce");
    if (begin == 0) check_headers(header);
    // 2. Reduce my shard, in rank order, into my slot.
    Range own = shard(m, esize, n, r);
    if (own.size > 0) {
      const std::size_t at = own.begin * esize;
      auto source = [&](int p) -> const char* { return p == r ? in + at : slot(p, round_) + at; };
      reduce(mine + at, source(0), source(1), own.size, header.dtype, header.op);
      for (int p = 2; p < n; ++p) reduce(mine + at, mine + at, source(p), own.size, header.dtype, header.op);
      if (header.op == RINGRUN_AVERAGE) finish_average(mine + at, own.size, header.dtype, n);
    }
    publish(me.reduced);
    wait_all(&Control::reduced, round_, "allreduce");
    // 3. Collect every shard from its owner's slot.
    for (int p = 0; p < n; ++p) {
      Range s = shard(m, esize, n, p);
      std::memcpy(out + s.begin * esize, slot(p, round_) + s.begin * esize, s.size * esize);
    }
    publish(me.consumed);
  }
}

void ShmTransport::broadcast(const OpHeader& header, void* buf_ptr) {
  auto* buf = static_cast<char*>(buf_ptr);
  const std::size_t bytes = header.bytes();
  Control& me = control(world_.rank);
  std::size_t begin = 0;
  do {
    const std::size_t chunk = std::min(slot_bytes_, bytes - begin);
    begin_round(header, begin == 0);
    if (world_.rank == header.root) std::memcpy(slot(world_.rank, round_), buf + begin, chunk);
    publish(me.arrived);
    // Everyone waits for everyone (not only the root) so that a mismatch is seen on every rank.
    if (begin == 0) {
      wait_all(&Control::arrived, round_, "broadcast");
      check_headers(header);
    } else if (world_.rank != header.root) {
      wait(header.root, control(header.root).arrived, round_, "broadcast");
    }
    if (world_.rank != header.root) std::memcpy(buf + begin, slot(header.root, round_), chunk);
    publish(me.consumed);
    begin += chunk;
  } while (begin < bytes);
}

void ShmTransport::allgather(const OpHeader& header, const void* send_ptr, void* recv_ptr) {
  const auto* send = static_cast<const char*>(send_ptr);
  auto* recv = static_cast<char*>(recv_ptr);
  const std::size_t block = header.bytes();
  const int n = world_.size, r = world_.rank;
  Control& me = control(r);
  std::size_t begin = 0;
  do {
    const std::size_t chunk = std::min(slot_bytes_, block - begin);
    begin_round(header, begin == 0);
    std::memcpy(slot(r, round_), send + begin, chunk);
    publish(me.arrived);
    wait_all(&Control::arrived, round_, "allgather");
    if (begin == 0) check_headers(header);
    for (int p = 0; p < n; ++p) std::memcpy(recv + block * p + begin, slot(p, round_), chunk);
    publish(me.consumed);
    begin += chunk;
  } while (begin < block);
}

}  // namespace ringrun::core

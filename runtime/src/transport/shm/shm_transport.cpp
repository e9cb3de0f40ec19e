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
#include <bit>
#include <climits>
#include <cstring>
#include <ctime>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "ringrun/runtime.hpp"
#include "transport/shm/cpu_hints.hpp"
#include "transport/shm/shm_copy.hpp"
#include "transport/shm/shm_layout.hpp"

namespace ringrun::core {
using shm::cpu_demotes_lines, shm::demote, shm::own_line, shm::InlineLine, shm::kInlineBytes, shm::kInlineStride, shm::kLine, shm::kLineBytes, shm::kPostBytes, shm::reached, shm::SharedHeader;

namespace {

constexpr std::uint64_t kMagic = 0x31534D4852525249ull;  // "IRRRHMS1"
constexpr std::size_t kPage = 4096;

// Spin this long, then yield this long, then sleep on the futex in short naps. No spinning past
// the first few loads where the machine has more ranks than CPUs: the peer waited for may need
// the CPU (8 ranks on 2 CPUs, 4 namespace hosts x 2: 4-byte hierarchical allreduce 155-182 us
// spinning 20 us, 84-110 not).
constexpr auto kSpinFor = std::chrono::microseconds(20);
constexpr auto kYieldFor = std::chrono::microseconds(500);
constexpr long kNapNanoseconds = 2'000'000;

struct SegmentHeader {
  std::atomic<std::uint64_t> magic;  // set last by the creator
  std::uint64_t ranks;
  std::uint64_t slot_bytes;
  std::uint64_t ring_bytes;
  std::uint64_t inline_bytes;  // the largest allreduce sent inline: the creator's CPU chose it for all
};

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

// Unique per group: the first rank's nonce is random per process, and a process is the first of
// at most one group (its host's).
std::string segment_name(const World& world, const Group& group) {
  return fmt::format("/ringrun-{:016x}-{}", world.peers[static_cast<std::size_t>(group.ranks[0])].nonce, group.size());
}

}  // namespace


namespace {
std::size_t controls_offset() { return round_up(sizeof(SegmentHeader), kPage); }
std::size_t slots_offset(int n) { return round_up(controls_offset() + sizeof(ShmTransport::Control) * n, kPage); }
std::size_t ring_offset(int n, std::size_t slot_bytes) { return slots_offset(n) + 2 * slot_bytes * n; }
std::size_t segment_bytes(int n, std::size_t slot_bytes, std::size_t ring_bytes) {
  return ring_offset(n, slot_bytes) + ShmTransport::kRingDepth * ring_bytes * n;
}
}  // namespace

std::size_t ShmTransport::default_ring_bytes(int ranks) {
  // Half the L2 a chunk (measured on a 2 MiB L2, 2 ranks: 256 MiB in 56 ms at 1 MiB, 62-70 ms at
  // 256 KiB), between 256 KiB and 1 MiB, and at most 64 MiB of ring per host however many ranks.
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  std::size_t chunk = l2 > 0 ? std::bit_floor(static_cast<std::size_t>(l2) / 2) : kDefaultSlotBytes;
  chunk = std::min(chunk, (std::size_t{64} << 20) / (kRingDepth * static_cast<std::size_t>(std::max(ranks, 1))));
  return std::clamp(chunk, kDefaultSlotBytes, std::size_t{1} << 20);
}

std::unique_ptr<ShmTransport> ShmTransport::create(TcpMesh& mesh, std::size_t slot_bytes, std::string* why_not) {
  return create(mesh, whole_world(mesh.world()), slot_bytes, why_not);
}

std::unique_ptr<ShmTransport> ShmTransport::create(TcpMesh& mesh, Group group, std::size_t slot_bytes,
                                                   std::string* why_not) {
  const World& world = mesh.world();
  const int n = group.size(), me = group.index;  // the group's first rank creates the segment
  const std::size_t ring_bytes = slot_bytes ? round_up(std::max<std::size_t>(slot_bytes, kPage), kPage) : default_ring_bytes(n);
  slot_bytes = slot_bytes ? ring_bytes : kDefaultSlotBytes;
  const std::size_t bytes = segment_bytes(n, slot_bytes, ring_bytes);
  const std::string name = segment_name(world, group);
  std::string failure;
  void* base = MAP_FAILED;

  auto map = [&](int fd) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) failure = fmt::format("mmap of /dev/shm{} ({} bytes): {}", name, bytes, std::strerror(errno));
  };
  // Rank 0 creates and initialises the segment; posix_fallocate reserves the pages now, so a full
  // /dev/shm fails here with ENOSPC instead of a SIGBUS in the middle of a collective.
  if (me == 0) {
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
        header->ranks = static_cast<std::uint64_t>(n);
        header->slot_bytes = slot_bytes;
        header->ring_bytes = ring_bytes;
        header->inline_bytes = cpu_demotes_lines() ? kInlineBytes : shm::kInlineBytesWithoutDemote;
        for (int r = 0; r < n; ++r)
          new (static_cast<char*>(base) + controls_offset() + sizeof(Control) * r) Control{};
        header->magic.store(kMagic, std::memory_order_release);
      }
    }
  }
  auto created = mesh.exchange_among(group, failure.empty() ? "1" : "0", "shared-memory setup");
  if (created[0] != "1") {
    if (base != MAP_FAILED) ::munmap(base, bytes);
    if (me == 0) ::shm_unlink(name.c_str());
    *why_not = me == 0 ? failure
                       : fmt::format("rank {} could not create the shared-memory segment", group.ranks[0]);
    return nullptr;
  }
  if (me != 0) {
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
      if (header->magic.load(std::memory_order_acquire) != kMagic || header->slot_bytes != slot_bytes ||
          header->ring_bytes != ring_bytes)
        failure = fmt::format("/dev/shm{} was not set up for this job", name);
    }
  }
  auto attached = mesh.exchange_among(group, failure.empty() ? "1" : "0", "shared-memory setup");
  // Every rank has mapped it (or given up): the name is no longer needed, and unlinking now means
  // a crash leaves nothing behind in /dev/shm.
  if (me == 0) ::shm_unlink(name.c_str());
  for (int r = 0; r < n; ++r) {
    if (attached[r] != "1") {
      if (base != MAP_FAILED) ::munmap(base, bytes);
      *why_not = r == me ? failure
                         : fmt::format("{} could not map the shared-memory segment", world.describe(group.ranks[r]));
      return nullptr;
    }
  }
  return std::unique_ptr<ShmTransport>(new ShmTransport(mesh, std::move(group), base, bytes, slot_bytes, ring_bytes));
}

ShmTransport::ShmTransport(TcpMesh& mesh, Group group, void* base, std::size_t bytes, std::size_t slot_bytes,
                           std::size_t ring_bytes)
    : mesh_(mesh), world_(mesh.world()), group_(std::move(group)), base_(base), bytes_(bytes),
      slot_bytes_(slot_bytes), ring_bytes_(ring_bytes),
      spin_for_(machine_oversubscribed(world_) ? std::chrono::microseconds(0) : kSpinFor),
      inline_bytes_(static_cast<const SegmentHeader*>(base)->inline_bytes), own_inline_lines_(!cpu_demotes_lines()),
      inputs_(kInlineStride * static_cast<std::size_t>(group_.size())),
      seen_(static_cast<std::size_t>(group_.size())) {}

ShmTransport::~ShmTransport() { ::munmap(base_, bytes_); }

ShmTransport::Control& ShmTransport::control(int rank) const {
  return *reinterpret_cast<Control*>(static_cast<char*>(base_) + controls_offset() + sizeof(Control) * rank);
}

char* ShmTransport::slot(int rank, std::uint32_t round) const {
  return static_cast<char*>(base_) + slots_offset(group_.size()) + slot_bytes_ * (2 * rank + (round & 1));
}

char* ShmTransport::ring(int rank, std::uint32_t chunk) const {
  return static_cast<char*>(base_) + ring_offset(group_.size(), slot_bytes_) +
         ring_bytes_ * (static_cast<std::size_t>(kRingDepth) * rank + chunk % kRingDepth);
}

std::size_t ShmTransport::chunk_bytes(std::size_t bytes, std::size_t pieces) const {
  // About `pieces` chunks per message so the steps overlap, but at least 16 KiB so the three
  // counter updates per chunk stay cheap against the copying, and at most a ring chunk.
  std::size_t chunk = round_up(std::max<std::size_t>(bytes / pieces, 16 * 1024), kLine);
  return std::min(chunk, ring_bytes_);
}

void ShmTransport::publish(std::atomic<std::uint32_t>& counter, std::uint32_t value) {
  counter.store(value, std::memory_order_seq_cst);
  if (control(group_.index).sleepers.load(std::memory_order_seq_cst) > 0) futex_wake(&counter);
}

void ShmTransport::arrive_unfenced() { arrived(group_.index).store(round_, std::memory_order_release); }

void ShmTransport::publish_after_arrival(std::atomic<std::uint32_t>& counter) {
  counter.store(round_, std::memory_order_seq_cst);  // the fence orders the arrival's store too
  if (control(group_.index).sleepers.load(std::memory_order_seq_cst) > 0) {
    futex_wake(&arrived(group_.index));
    futex_wake(&counter);
  }
}

void ShmTransport::wait(int peer, std::atomic<std::uint32_t>& counter, std::uint32_t target, const char* what) {
  // A first short spin before reading the clock: on the latency path the peer is usually a few
  // hundred nanoseconds away, and a clock read costs about as much as the wait.
  for (unsigned i = 0; i < 64; ++i) {
    if (reached(counter.load(std::memory_order_acquire), target)) return;
    RINGRUN_CPU_RELAX();
  }
  auto start = std::chrono::steady_clock::now();
  for (unsigned i = 1;; ++i) {
    if (reached(counter.load(std::memory_order_acquire), target)) return;
    RINGRUN_CPU_RELAX();
    if ((i & 63) == 0 && std::chrono::steady_clock::now() - start > spin_for_) break;
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

std::atomic<std::uint32_t>& ShmTransport::arrived(int rank) const { return control(rank).inbox[round_ & 1].post.round; }

void ShmTransport::wait_arrived(const char* what) {
  for (int p = 0; p < group_.size(); ++p)
    if (p != group_.index) wait(p, arrived(p), round_, what);
  seen_arrived_ = round_;
}

void ShmTransport::wait_all(std::atomic<std::uint32_t> Control::*counter, std::uint32_t target, const char* what) {
  for (int p = 0; p < group_.size(); ++p)
    if (p != group_.index) wait(p, control(p).*counter, target, what);
}

void ShmTransport::begin_round(const OpHeader& header, bool first) {
  ++round_;
  // My slot of this parity was last used two rounds ago; every peer must be done reading it. A
  // peer publishes consumed before it arrives at the next round, so having seen every peer arrive
  // at the last round says so without reading their consumed lines (a miss each, per op).
  if (seen_arrived_ != round_ - 1) wait_all(&Control::consumed, round_ - 2, collective_name(header.kind));
  if (first) {
    SharedHeader& h = control(group_.index).inbox[round_ & 1].post.header;
    h = {static_cast<std::uint8_t>(header.kind), static_cast<std::uint8_t>(header.dtype),
         static_cast<std::uint8_t>(header.op), 0, header.root, header.seq, header.count};
  }
}

std::uint32_t ShmTransport::begin_streamed(const OpHeader& header, std::size_t chunks) {
  begin_round(header, true);
  publish(arrived(group_.index));
  const std::uint32_t first = chunk_ + 1;
  chunk_ += static_cast<std::uint32_t>(chunks);
  return first;
}

void ShmTransport::reserve_ring(std::uint32_t chunk, const char* what) {
  // Ring chunk `chunk` last held chunk - kRingDepth; every peer must be done reading it.
  wait_all(&Control::chunk_consumed, chunk - kRingDepth, what);
}

void ShmTransport::barrier(const OpHeader& header) {
  if (const HeaderVerdict verdict = host_round(header); verdict.disagree) throw_mismatch(world_, header, verdict);
}

// The spans of a call as one logical buffer: each(offset, length, f) calls
// f(send, recv, bytes, done) for every piece of [offset, offset + length), done counting the bytes
// before it. A plain allreduce is one span.
class ShmTransport::Pieces {
 public:
  explicit Pieces(std::span<const BufferSpan> spans) : spans_(spans) {
    if (spans.size() == 1) {  // a plain allreduce: no allocation on the latency path
      total_ = spans[0].bytes;
      return;
    }
    starts_.reserve(spans.size());
    std::size_t at = 0;
    for (const auto& span : spans) {
      starts_.push_back(at);
      at += span.bytes;
    }
    total_ = at;
  }
  std::size_t bytes() const { return total_; }
  template <typename F> void each(std::size_t offset, std::size_t length, F&& f) const {
    if (length == 0) return;
    if (spans_.size() == 1) {
      f(static_cast<const char*>(spans_[0].send) + offset, static_cast<char*>(spans_[0].recv) + offset, length, std::size_t{0});
      return;
    }
    std::size_t i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
    std::size_t done = 0;
    while (done < length) {
      const BufferSpan& span = spans_[i];
      const std::size_t within = offset + done - starts_[i];
      const std::size_t n = std::min(length - done, span.bytes - within);
      if (n > 0) f(static_cast<const char*>(span.send) + within, static_cast<char*>(span.recv) + within, n, done);
      done += n;
      ++i;
    }
  }

 private:
  std::span<const BufferSpan> spans_;
  std::vector<std::size_t> starts_;
  std::size_t total_ = 0;
};

void ShmTransport::allreduce_direct(const OpHeader& header, const Pieces& pieces, HeaderVerdict* verdict) {
  const int n = group_.size();
  Control& me = control(group_.index);
  const std::size_t bytes = header.bytes();
  const std::size_t esize = dtype_size(header.dtype);
  begin_round(header, true);
  const bool inline_data = bytes <= inline_bytes_;
  // Inline: every rank's input gathered into inputs_ (see collect_inline); else in the slots.
  auto input = [&](int p) -> const char* { return inline_data ? inline_input(p) : slot(p, round_); };
  char* mine = inline_data ? inline_input(group_.index) : slot(group_.index, round_);
  pieces.each(0, bytes, [&](const char* in, char*, std::size_t len, std::size_t done) { std::memcpy(mine + done, in, len); });
  if (inline_data) {
    post_inline(mine, bytes);
    collect_inline(bytes);
  } else {
    arrive_unfenced();
    wait_arrived("allreduce");
  }
  if (!verdict) {
    check_headers(header);
  } else if ((*verdict = host_verdict()).disagree) {
    publish_after_arrival(me.consumed);
    own_next_post(inline_data ? bytes : 0);
    return;
  }
  // Every rank reduces everything in rank order: identical results everywhere, one sync.
  pieces.each(0, bytes, [&](const char*, char* out, std::size_t len, std::size_t done) {
    const std::size_t m = len / esize;
    reduce(out, input(0) + done, input(1) + done, m, header.dtype, header.op);
    for (int p = 2; p < n; ++p) reduce(out, out, input(p) + done, m, header.dtype, header.op);
    if (header.op == RINGRUN_AVERAGE && !verdict) finish_average(out, m, header.dtype, n);
  });
  publish_after_arrival(me.consumed);
  own_next_post(inline_data ? bytes : 0);
}

HeaderVerdict ShmTransport::host_allreduce(const OpHeader& header, const void* send, void* recv) {
  HeaderVerdict verdict;
  const BufferSpan span{send, recv, header.bytes()};
  allreduce_direct(header, Pieces(std::span(&span, 1)), &verdict);
  return verdict;
}

// Every peer has arrived at this round, so none still reads my post of the other parity (last
// round's): take that line back for writing now, so that the next round's post does not wait for
// the peers' copies to be invalidated. 4-256 bytes: 0.04-0.07 us less a call (Intel). The inline
// lines this round used too where the CPU cannot demote them (AMD EPYC, 64-256 bytes: 0.31-0.35 us
// against 0.43-0.50; on Intel with CLDEMOTE it measured no better).
void ShmTransport::own_next_post(std::size_t inline_bytes) {
  shm::Inbox& next = control(group_.index).inbox[(round_ + 1) & 1];
  own_line(&next.post);
  if (!own_inline_lines_) return;
  for (std::size_t at = kPostBytes, k = 0; at < inline_bytes; at += kLineBytes, ++k) own_line(&next.lines[k]);
}

char* ShmTransport::inline_input(int rank) { return inputs_.data() + kInlineStride * static_cast<std::size_t>(rank); }

// The inline lines first, each with its round; the post last, so a peer that has to sleep waits on
// the post alone and finds every line written when it wakes.
void ShmTransport::post_inline(const char* input, std::size_t bytes) {
  Control& me = control(group_.index);
  const unsigned parity = round_ & 1;
  for (std::size_t at = kPostBytes, k = 0; at < bytes; at += kLineBytes, ++k) {
    InlineLine& line = me.inbox[parity].lines[k];
    std::memcpy(line.data, input + at, std::min(kLineBytes, bytes - at));
    line.round.store(round_, std::memory_order_release);
    demote(&line);
  }
  std::memcpy(me.inbox[parity].post.data, input, std::min(bytes, kPostBytes));
  arrive_unfenced();
  demote(&me.inbox[parity].post);
}

// Copies every peer's post and inline lines of this round into inputs_: first polling all of them
// at once (the misses overlap), then, if they are slow to come, waiting on their posts the usual way
// (spin, yield, sleep, a dead peer noticed).
void ShmTransport::collect_inline(std::size_t bytes) {
  const int n = group_.size();
  const unsigned parity = round_ & 1;
  const std::size_t lines = 1 + (bytes > kPostBytes ? (bytes - kPostBytes + kLineBytes - 1) / kLineBytes : 0);
  auto flag = [&](int p, std::size_t k) -> std::atomic<std::uint32_t>& {
    return k == 0 ? control(p).inbox[parity].post.round : control(p).inbox[parity].lines[k - 1].round;
  };
  auto copy = [&](int p, std::size_t k) {
    if (k == 0) {
      std::memcpy(inline_input(p), control(p).inbox[parity].post.data, std::min(bytes, kPostBytes));
    } else {
      const std::size_t at = kPostBytes + (k - 1) * kLineBytes;
      std::memcpy(inline_input(p) + at, control(p).inbox[parity].lines[k - 1].data, std::min(kLineBytes, bytes - at));
    }
  };
  const std::uint64_t all = lines == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << lines) - 1;
  std::size_t missing = 0;
  for (int p = 0; p < n; ++p) {
    seen_[static_cast<std::size_t>(p)] = p == group_.index ? all : 0;
    if (p != group_.index) missing += lines;
  }
  auto poll = [&] {
    for (int p = 0; p < n; ++p) {
      std::uint64_t& seen = seen_[static_cast<std::size_t>(p)];
      for (std::uint64_t left = all & ~seen; left != 0; left &= left - 1) {
        const auto k = static_cast<std::size_t>(std::countr_zero(left));
        if (!reached(flag(p, k).load(std::memory_order_acquire), round_)) continue;
        copy(p, k);
        seen |= std::uint64_t{1} << k;
        --missing;
      }
    }
  };
  // The clock is first read after 64 polls, as in wait(): most calls are done before that, and a
  // read costs about as much as a 4-byte allreduce's wait.
  std::optional<std::chrono::steady_clock::time_point> start;
  for (unsigned i = 1; missing != 0; ++i) {
    poll();
    if (missing == 0) break;
    RINGRUN_CPU_RELAX();
    if ((i & 63) != 0) continue;
    if (!start) start = std::chrono::steady_clock::now();
    if (std::chrono::steady_clock::now() - *start > spin_for_) {
      wait_arrived("allreduce");  // posts are written last: every line is there now
      poll();
      break;
    }
  }
  seen_arrived_ = round_;
}

void ShmTransport::allreduce(const OpHeader& header, const void* send, void* recv) {
  const BufferSpan whole{send, recv, header.bytes()};
  allreduce_scattered(header, {&whole, 1});
}

// One streamed allreduce: its chunks of the logical buffer and the choices made once per call.
struct ShmTransport::Streamed {
  const OpHeader& header;
  const Pieces& pieces;
  std::size_t esize, per_chunk;  // per_chunk: elements in a ring chunk
  std::uint32_t first;  // the first chunk's global number
  bool stream, f32_sum;  // f32_sum: float32 SUM or AVERAGE, the one-pass last step
  std::size_t elements(std::size_t k) const { return std::min(per_chunk, header.count - k * per_chunk); }
  std::uint32_t global(std::size_t k) const { return first + static_cast<std::uint32_t>(k); }
  std::size_t offset(std::size_t k) const { return k * per_chunk * esize; }
};

void ShmTransport::allreduce_scattered(const OpHeader& header, std::span<const BufferSpan> spans) {
  const Pieces pieces(spans);
  const std::size_t bytes = header.bytes();
  if (pieces.bytes() != bytes)
    throw RuntimeError(RINGRUN_ERR_INTERNAL, fmt::format("allreduce: spans of {} bytes for {}", pieces.bytes(), header.describe()));
  if (bytes <= kDirectAllreduceMaxBytes && bytes <= slot_bytes_) return allreduce_direct(header, pieces);

  const std::size_t esize = dtype_size(header.dtype);
  // Whole ring chunks: every rank does the same work at each step, so smaller chunks overlap
  // nothing and only add waits (256 KiB measured 25-30 % faster in one chunk than in eight).
  const std::size_t per_chunk = chunk_bytes(bytes, 1) / esize;
  const std::size_t chunks = (header.count + per_chunk - 1) / per_chunk;
  const Streamed call{header, pieces, esize, per_chunk, begin_streamed(header, chunks), bytes >= kStreamMinBytes,
                      header.dtype == RINGRUN_FLOAT32 && (header.op == RINGRUN_SUM || header.op == RINGRUN_AVERAGE)};
  // Step s: export chunk s, reduce chunk s-1, collect chunk s-2 (see the header).
  for (std::size_t step = 0; step < chunks + 2; ++step) {
    if (step < chunks) {
      export_chunk(call, step);
      if (step == 0) {
        wait_arrived("allreduce");
        check_headers(header);
      }
    }
    if (step >= 1 && step - 1 < chunks) reduce_chunk(call, step - 1);
    if (step >= 2) collect_chunk(call, step - 2);
  }
  if (call.stream) stream_fence();
  publish(control(group_.index).consumed);
}

// Copies the parts of chunk k of this rank's input that the peers own into its ring chunk.
void ShmTransport::export_chunk(const Streamed& call, std::size_t k) {
  const int n = group_.size(), r = group_.index;
  const std::uint32_t g = call.global(k);
  reserve_ring(g, "allreduce");
  char* mine = ring(r, g);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    Range s = shard(call.elements(k), call.esize, n, p);
    char* to = mine + s.begin * call.esize;
    call.pieces.each(call.offset(k) + s.begin * call.esize, s.size * call.esize,
                     [&](const char* in, char*, std::size_t len, std::size_t done) { std::memcpy(to + done, in, len); });
  }
  publish(control(r).chunk_arrived, g);
}

// Reduces this rank's shard of chunk k from its input and the peers' exports, in rank order, into
// its ring chunk (for the peers) and its output.
void ShmTransport::reduce_chunk(const Streamed& call, std::size_t k) {
  const int n = group_.size(), r = group_.index;
  const OpHeader& header = call.header;
  const std::uint32_t g = call.global(k);
  wait_all(&Control::chunk_arrived, g, "allreduce");
  Range own = shard(call.elements(k), call.esize, n, r);
  const std::size_t at = own.begin * call.esize;
  // Piece by piece of this rank's own input (tensor boundaries are element boundaries).
  call.pieces.each(call.offset(k) + at, own.size * call.esize, [&](const char* in, char* out, std::size_t len, std::size_t done) {
    const std::size_t count = len / call.esize;
    char* mine = ring(r, g) + at + done;
    auto source = [&](int p) -> const char* { return p == r ? in : ring(p, g) + at + done; };
    if (call.f32_sum) {
      // The same order as below ((s0 + s1) + s2 ...), the last addition (and an average's
      // division) writing both outputs.
      const float* acc = reinterpret_cast<const float*>(source(0));
      if (n > 2) {
        reduce(mine, source(0), source(1), count, header.dtype, header.op);
        for (int p = 2; p < n - 1; ++p) reduce(mine, mine, source(p), count, header.dtype, header.op);
        acc = reinterpret_cast<const float*>(mine);
      }
      sum_f32_to_both(reinterpret_cast<float*>(mine), out, acc,
                      reinterpret_cast<const float*>(source(n > 2 ? n - 1 : 1)), count, call.stream,
                      header.op == RINGRUN_AVERAGE ? n : 0);
    } else {
      reduce(mine, source(0), source(1), count, header.dtype, header.op);
      for (int p = 2; p < n; ++p) reduce(mine, mine, source(p), count, header.dtype, header.op);
      if (header.op == RINGRUN_AVERAGE) finish_average(mine, count, header.dtype, n);
      copy_out(out, mine, len, call.stream);
    }
  });
  publish(control(r).chunk_reduced, g);
}

// Copies the peers' results of chunk k out of their ring chunks into this rank's output.
void ShmTransport::collect_chunk(const Streamed& call, std::size_t k) {
  const int n = group_.size(), r = group_.index;
  const std::uint32_t g = call.global(k);
  wait_all(&Control::chunk_reduced, g, "allreduce");
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    Range s = shard(call.elements(k), call.esize, n, p);
    const char* from = ring(p, g) + s.begin * call.esize;
    call.pieces.each(call.offset(k) + s.begin * call.esize, s.size * call.esize,
                     [&](const char*, char* out, std::size_t len, std::size_t done) { copy_out(out, from + done, len, call.stream); });
  }
  publish(control(r).chunk_consumed, g);
}

}  // namespace ringrun::core

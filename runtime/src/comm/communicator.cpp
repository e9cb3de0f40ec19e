#include "comm/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "bootstrap/bootstrap.hpp"
#include "core/adasum.hpp"
#include "core/dtype.hpp"
#include "ringrun/environment_variables.hpp"
#include "ringrun/runtime.hpp"
#include "core/device_memory.hpp"
#ifdef RINGRUN_HAVE_NCCL
#include "transport/nccl/cuda_api.hpp"
#include "transport/nccl/nccl_transport.hpp"
#endif
#include "transport/hier/hier_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_adasum.hpp"
#include "transport/tcp/tcp_mesh.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace ringrun::core {
namespace {

constexpr char kSep = '\x1f';

std::string encode_peer(const PeerInfo& p) {
  return fmt::format("{}{}{}{}{}{}{:x}{}{}{}{}{}{}", p.host, kSep, p.address, kSep, p.port, kSep, p.nonce, kSep,
                     p.tcp_streams, kSep, p.machine, kSep, p.cpus);
}

PeerInfo decode_peer(int rank, const std::string& record) {
  PeerInfo p;
  p.rank = rank;
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (;;) {
    auto end = record.find(kSep, start);
    fields.push_back(record.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (fields.size() != 7)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("rendezvous: rank {} published a malformed address", rank));
  p.host = fields[0];
  p.address = fields[1];
  p.port = static_cast<std::uint16_t>(std::stoul(fields[2]));
  p.nonce = std::stoull(fields[3], nullptr, 16);
  p.tcp_streams = std::stoi(fields[4]);
  p.machine = fields[5];
  p.cpus = std::stoi(fields[6]);
  return p;
}

// Which machine this process runs on, whatever network namespace it is in: the kernel's boot id
// (the host name where /proc does not give one).
std::string this_machine(const std::string& hostname) {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (file >> id && !id.empty()) return id;
  return hostname;
}

std::string describe_streams(int streams) { return streams == 0 ? "automatic (unset)" : std::to_string(streams); }

// The hierarchical transport when every host holds the same number (> 1) of ranks and every host
// could set up its shared memory; else null, after a warning that says why (every rank agrees).
std::unique_ptr<Transport> create_hierarchical(const World& world, TcpMesh& mesh, TcpTransport& world_tcp,
                                               std::size_t slot_bytes) {
  const auto hosts = ranks_by_host(world);
  const std::size_t per_host = hosts[0].size();
  if (per_host < 2) return nullptr;  // one rank per host: nothing to share
  bool even = true;
  for (const auto& host : hosts) even = even && host.size() == per_host;
  if (!even) {
    if (world.rank == 0) {
      std::string counts;
      for (const auto& host : hosts)
        counts += fmt::format("{}{}: {}", counts.empty() ? "" : ", ", world.peers[host[0]].host, host.size());
      fmt::print(stderr,
                 "ringrun: rank 0: the hosts hold different numbers of ranks ({}); ranks on the same host use TCP "
                 "instead of shared memory\n",
                 counts);
    }
    return nullptr;
  }
  std::vector<int> host_of(world.peers.size()), local_index_of(world.peers.size());
  for (std::size_t h = 0; h < hosts.size(); ++h)
    for (std::size_t l = 0; l < per_host; ++l) {
      host_of[hosts[h][l]] = static_cast<int>(h);
      local_index_of[hosts[h][l]] = static_cast<int>(l);
    }
  const int my_host = host_of[world.rank], my_local = local_index_of[world.rank];
  Group local{hosts[my_host], my_local};
  Group cross{{}, my_host};  // one rank per host, hosts in the same order in every cross group
  for (const auto& host : hosts) cross.ranks.push_back(host[my_local]);

  std::string why_not;
  auto shm = ShmTransport::create(mesh, std::move(local), slot_bytes, &why_not);
  // Every host must have its shared memory, or no host uses it (the phases are collective).
  auto usable = mesh.exchange_all(shm ? "1" : "0", "shared-memory setup");
  int first_without = -1;
  for (int r = 0; r < world.size && first_without < 0; ++r)
    if (usable[r] != "1") first_without = r;
  if (first_without >= 0) {
    if (!shm && (my_local == 0 || why_not.find("could not create") == std::string::npos))
      fmt::print(stderr, "ringrun: rank {}: shared memory unusable ({}); every rank uses TCP instead\n", world.rank,
                 why_not);
    else if (world.rank == 0)
      fmt::print(stderr, "ringrun: rank 0: shared memory unusable on host {}; every rank uses TCP instead\n",
                 world.peers[first_without].host);
    return nullptr;
  }
  auto cross_tcp = std::make_unique<TcpTransport>(mesh, std::move(cross), /*headers_checked_elsewhere=*/true);
  return std::make_unique<HierTransport>(world, std::move(shm), std::move(cross_tcp), world_tcp, std::move(host_of),
                                         std::move(local_index_of));
}

std::uint64_t random_nonce() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

// The message is formatted only when the check fails: these run on every collective (and once
// per tensor of a fused allreduce), where formatting and allocating it up front cost as much as a
// small allreduce.
template <typename... Args>
void require(bool ok, const char* what, fmt::format_string<Args...> why, Args&&... args) {
  if (!ok) [[unlikely]]
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", what, fmt::format(why, std::forward<Args>(args)...)));
}

void check_type(const char* what, ringrun_dtype dtype) {
  require(valid_dtype(dtype), what, "unknown dtype {}", static_cast<int>(dtype));
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(const CommunicatorConfig& config) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("communicator: rank {} is not in [0, {})", config.rank, config.size));
  if (config.tcp_streams < 0 || config.tcp_streams > kMaxTcpStreams)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("communicator: {} TCP streams per peer is not in [1, {}] (or 0, automatic)", config.tcp_streams,
                                   kMaxTcpStreams));
  std::unique_ptr<Communicator> comm(new Communicator());
  World& world = comm->world_;
  world.rank = config.rank;
  world.size = config.size;
  world.peers.resize(config.size);
  comm->elastic_ = config.elastic;
  PeerInfo& self = world.peers[config.rank];
  self.rank = config.rank;
  self.host = config.hostname;
  if (config.size == 1) return comm;

  if (config.exchange == nullptr)
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, "communicator: more than one rank but no address exchange");
  net::Fd listener;
  try {
    listener = net::listen_tcp(config.listen_address, 0);
  } catch (const net::NetError& e) {
    throw RuntimeError(RINGRUN_ERR_BOOTSTRAP, fmt::format("rank {}: {}", config.rank, e.what()));
  }
  self.address = config.listen_address;
  self.port = net::local_port(listener.get());
  self.nonce = random_nonce();
  self.tcp_streams = config.tcp_streams;
  self.machine = this_machine(config.hostname);
  self.cpus = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  auto records = config.exchange->allgather(encode_peer(self));
  for (int r = 0; r < config.size; ++r) world.peers[r] = decode_peer(r, records[r]);
  compute_local_and_cross(world);
  // Every rank sees every record, so every rank fails here alike rather than in the connect.
  for (int r = 0; r < config.size; ++r)
    if (world.peers[r].tcp_streams != config.tcp_streams)
      throw RuntimeError(RINGRUN_ERR_BOOTSTRAP,
                         fmt::format("{} differs between ranks: {} uses {}, rank {} uses {}; set the same value on "
                                     "every rank",
                                     variables::kTcpStreams.name, world.describe(r), describe_streams(world.peers[r].tcp_streams), config.rank,
                                     describe_streams(config.tcp_streams)));
  const int streams = config.tcp_streams > 0 ? config.tcp_streams : automatic_tcp_streams(world.peers);

  comm->mesh_ = std::make_unique<TcpMesh>(world, std::move(listener), config.timeout, streams);
  comm->tcp_ = std::make_unique<TcpTransport>(*comm->mesh_);
  comm->transport_ = comm->tcp_.get();
  const std::size_t slot = config.shm_slot_bytes;  // 0: the transport's defaults
  if (config.enable_shm && !world.all_on_one_host()) {
    comm->shm_ = create_hierarchical(comm->world_, *comm->mesh_, static_cast<TcpTransport&>(*comm->tcp_), slot);
    if (comm->shm_) comm->transport_ = comm->shm_.get();
    comm->hierarchical_ = comm->shm_ != nullptr;
  } else if (config.enable_shm) {
    std::string why_not;
    comm->shm_ = ShmTransport::create(*comm->mesh_, slot, &why_not);
    if (comm->shm_) {
      comm->transport_ = comm->shm_.get();
    } else if (world.rank == 0 || why_not.find("rank 0") == std::string::npos) {
      fmt::print(stderr, "ringrun: rank {}: shared memory unusable ({}); ranks on this host use TCP instead\n",
                 world.rank, why_not);
    }
  }
  return comm;
}

Communicator::~Communicator() {
  // A rank that found a mismatch is alive and its headers tell its peers what disagreed; an
  // abortive close (RST) would discard them unread in the peers' receive queues, and the peers
  // would report a death instead of the mismatch.
  if (!closed_) close(broken_code_ == RINGRUN_ERR_MISMATCH);
}

const char* Communicator::transport_name() const { return transport_ ? transport_->name() : "self"; }

template <typename Body> void Communicator::run(Collective kind, const char* name, Body&& body) {
  if (closed_)
    throw RuntimeError(RINGRUN_ERR_NOT_INITIALIZED, fmt::format("{}: the communicator was finalized", name));
  if (broken_code_)
    throw RuntimeError(broken_code_, fmt::format("{}: the communicator is unusable after an earlier error: {}", name,
                                                 broken_message_));
  (void)kind;
  try {
    body();
  } catch (const RuntimeError& e) {
    if (e.code() == RINGRUN_ERR_INVALID_ARGUMENT) throw;
    broken_code_ = e.code();
    broken_message_ = e.what();
    // Elastic mode: a lost peer (or one too slow to answer) ends this world, not the job. A code
    // of its own tells the caller to reset; a mismatch is the program's bug and stays one.
    if (elastic_ && (e.code() == RINGRUN_ERR_PEER || e.code() == RINGRUN_ERR_TIMEOUT)) {
      broken_code_ = RINGRUN_ERR_RESET;
      broken_message_ = fmt::format("{} (elastic mode: call ringrun_reset() to join the next world)", e.what());
      throw RuntimeError(broken_code_, broken_message_);
    }
    throw;
  }
}

Transport* Communicator::device_transport(const char* what, const void* a, const void* b) {
  if (!cuda_driver_loaded()) return nullptr;  // one probe for both buffers (the host-only common case)
  BufferLocation first = locate_buffer(a);
  BufferLocation second = b == a ? first : locate_buffer(b);
  if (!first.device && !second.device) return nullptr;
  if (first.device != second.device)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}: one buffer is device memory (CUDA device {}) and the other host memory; pass "
                                   "both on the device or both on the host",
                                   what, first.device ? first.ordinal : second.ordinal));
  if (first.ordinal != second.ordinal)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}: the buffers are on different CUDA devices ({} and {})", what, first.ordinal,
                                   second.ordinal));
#ifdef RINGRUN_HAVE_NCCL
  if (!nccl_) {
    try {
      (void)nccl_api();  // NCCL and the CUDA runtime load now, the first time a device buffer is seen
      (void)cuda_runtime_api();
    } catch (const RuntimeError& e) {
      throw RuntimeError(e.code(), fmt::format("{}: the buffer is device memory (CUDA device {}) but {}", what,
                                               first.ordinal, e.what()));
    }
    nccl_ = NcclTransport::create(world_, transport_, mesh_.get(), first.ordinal, [this] { return ++seq_; });
  } else if (int device = static_cast<NcclTransport&>(*nccl_).device(); device != first.ordinal) {
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}: the buffer is on CUDA device {} but this rank's NCCL communicator runs on "
                                   "device {} (one device per rank)",
                                   what, first.ordinal, device));
  }
  return nccl_.get();
#else
  throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                     fmt::format("{}: the buffer is device memory (CUDA device {}) but this libringrun_runtime was "
                                 "compiled without NCCL's headers; copy it to host memory, or rebuild with NCCL_HOME "
                                 "naming an NCCL (pip install nvidia-nccl-cu13) and -DRINGRUN_WITH_NCCL=ON",
                                 what, first.ordinal));
#endif
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, ringrun_dtype dtype, ringrun_op op) {
  if (op == RINGRUN_ADASUM) return adasum(send, recv, count, dtype);
  run(Collective::allreduce, "allreduce", [&] {
    check_type("allreduce", dtype);
    require(valid_op(op), "allreduce", "unknown op {}", static_cast<int>(op));
    require(count == 0 || (send && recv), "allreduce", "send or recv is null");
    Transport* device = count ? device_transport("allreduce", send, recv) : nullptr;
    OpHeader header{.seq = ++seq_, .count = count, .kind = Collective::allreduce, .dtype = dtype, .op = op};
    if (device) return device->allreduce(header, send, recv);
    if (!transport_) {
      if (send != recv && count) std::memmove(recv, send, header.bytes());
      return;  // one rank: the sum, min, max, product and average of one value are that value
    }
    transport_->allreduce(header, send, recv);
  });
}

void Communicator::adasum(const void* send, void* recv, std::size_t count, ringrun_dtype dtype) {
  run(Collective::allreduce, "allreduce", [&] {
    check_type("allreduce", dtype);
    require(count == 0 || (send && recv), "allreduce", "send or recv is null");
    check_adasum_arguments("allreduce", dtype, send, recv, count);
    OpHeader header{.seq = ++seq_, .count = count, .kind = Collective::allreduce, .dtype = dtype, .op = RINGRUN_ADASUM};
    if (!transport_) {
      if (send != recv && count) std::memmove(recv, send, header.bytes());
      return;  // one rank: the Adasum of one tensor is that tensor
    }
    // Every transport's barrier compares the header it is given, in the steps every call of that
    // transport begins with: a rank that called another collective sees the mismatch, as all do.
    transport_->barrier(header);
    if (!adasum_) adasum_ = std::make_unique<TcpAdasum>(*mesh_);
    adasum_->allreduce(header, send, recv);
  });
}

bool Communicator::can_allreduce_scattered() const { return !transport_ || transport_->scattered(); }

void Communicator::allreduce_scattered(std::span<const BufferSpan> spans, ringrun_dtype dtype, ringrun_op op) {
  run(Collective::allreduce, "allreduce", [&] {
    check_type("allreduce", dtype);
    require(valid_op(op), "allreduce", "unknown op {}", static_cast<int>(op));
    require(elementwise_op(op), "allreduce", "{} reduces one tensor at a time, never a fused one", op_name(op));
    const std::size_t esize = dtype_size(dtype);
    std::size_t count = 0;
    for (const auto& span : spans) {
      require(span.bytes % esize == 0, "allreduce", "a span of {} bytes is not whole {} elements", span.bytes, dtype_name(dtype));
      require(span.bytes == 0 || (span.send && span.recv), "allreduce", "send or recv is null");
      count += span.bytes / esize;
    }
    OpHeader header{.seq = ++seq_, .count = count, .kind = Collective::allreduce, .dtype = dtype, .op = op};
    if (!transport_) {
      for (const auto& span : spans)
        if (span.send != span.recv && span.bytes) std::memmove(span.recv, span.send, span.bytes);
      return;
    }
    require(transport_->scattered(), "allreduce", "the {} transport has no scattered allreduce", transport_->name());
    transport_->allreduce_scattered(header, spans);
  });
}

void Communicator::broadcast(void* buf, std::size_t count, ringrun_dtype dtype, int root) {
  run(Collective::broadcast, "broadcast", [&] {
    check_type("broadcast", dtype);
    require(root >= 0 && root < world_.size, "broadcast", "root {} is not a rank of 0..{}", root, world_.size - 1);
    require(count == 0 || buf, "broadcast", "buf is null");
    Transport* device = count ? device_transport("broadcast", buf, buf) : nullptr;
    OpHeader header{.seq = ++seq_, .count = count, .kind = Collective::broadcast, .dtype = dtype, .root = root};
    if (device) return device->broadcast(header, buf);
    if (transport_) transport_->broadcast(header, buf);
  });
}

void Communicator::allgather(const void* send, std::size_t count, ringrun_dtype dtype, void* recv) {
  gather(send, count, dtype, recv, true);
}

void Communicator::allgather_host(const void* send, std::size_t count, ringrun_dtype dtype, void* recv) {
  gather(send, count, dtype, recv, false);
}

void Communicator::gather(const void* send, std::size_t count, ringrun_dtype dtype, void* recv, bool may_be_device) {
  run(Collective::allgather, "allgather", [&] {
    check_type("allgather", dtype);
    require(count == 0 || (send && recv), "allgather", "send or recv is null");
    Transport* device = count && may_be_device ? device_transport("allgather", send, recv) : nullptr;
    OpHeader header{.seq = ++seq_, .count = count, .kind = Collective::allgather, .dtype = dtype};
    if (device) return device->allgather(header, send, recv);
    if (!transport_) {
      if (send != recv && count) std::memmove(recv, send, header.bytes());
      return;
    }
    transport_->allgather(header, send, recv);
  });
}

void Communicator::require_host(const char* what, const void* a, const void* b) {
  if (!cuda_driver_loaded()) return;
  if (locate_buffer(a).device || locate_buffer(b).device)
    throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT,
                       fmt::format("{}: device buffers are not supported; copy the tensor to host memory", what));
}

void Communicator::alltoall(const void* send, std::span<const std::size_t> to_each, ringrun_dtype dtype,
                            const AlltoallOutput& output) {
  run(Collective::alltoall, "alltoall", [&] {
    check_type("alltoall", dtype);
    require(to_each.size() == static_cast<std::size_t>(world_.size), "alltoall", "{} counts for {} ranks", to_each.size(),
            world_.size);
    std::size_t count = 0;
    for (std::size_t c : to_each) count += c;
    require(count == 0 || send, "alltoall", "send is null");
    if (count) require_host("alltoall", send, send);
    OpHeader header{.seq = ++seq_, .count = 0, .kind = Collective::alltoall, .dtype = dtype};
    if (!tcp_) {  // one rank: its own elements come back
      void* recv = output(count, to_each);
      if (count && recv != send) std::memmove(recv, send, count * dtype_size(dtype));
      return;
    }
    tcp_->alltoall(header, send, to_each, output);  // the transport that has it (transport.hpp)
  });
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count, std::span<const std::size_t> bounds,
                                  ringrun_dtype dtype, ringrun_op op) {
  run(Collective::reducescatter, "reducescatter", [&] {
    check_type("reducescatter", dtype);
    require(valid_op(op), "reducescatter", "unknown op {}", static_cast<int>(op));
    require(bounds.size() == static_cast<std::size_t>(world_.size) + 1 && bounds.front() == 0 && bounds.back() == count &&
                std::is_sorted(bounds.begin(), bounds.end()),
            "reducescatter", "the blocks do not split {} elements over {} ranks", count, world_.size);
    const std::size_t mine = bounds[static_cast<std::size_t>(world_.rank) + 1] - bounds[static_cast<std::size_t>(world_.rank)];
    require(count == 0 || send, "reducescatter", "send is null");
    require(mine == 0 || recv, "reducescatter", "recv is null");
    if (count) require_host("reducescatter", send, mine ? recv : send);
    OpHeader header{.seq = ++seq_, .count = count, .kind = Collective::reducescatter, .dtype = dtype, .op = op};
    if (!transport_) {
      if (count && recv != send) std::memmove(recv, send, header.bytes());
      return;
    }
    // One host: the shared-memory reduce-scatter (one pass over every input); across hosts the
    // TCP ring.
    Transport& chosen = transport_ == shm_.get() && !hierarchical_ ? *shm_ : *tcp_;
    chosen.reduce_scatter(header, send, recv, bounds);
  });
}

void Communicator::barrier() {
  run(Collective::barrier, "barrier", [&] {
    OpHeader header{.seq = ++seq_, .kind = Collective::barrier};
    if (transport_) transport_->barrier(header);
  });
}

void Communicator::finalize() {
  if (closed_) return;
  struct Closer {
    Communicator* self;
    bool orderly = false;
    ~Closer() { self->close(orderly); }
  } closer{this};
  if (broken_code_) {
    closer.orderly = broken_code_ == RINGRUN_ERR_MISMATCH;  // as in the destructor
    return;
  }
  if (tcp_) {
    // Ends over TCP: a rank that returns from this barrier may close its sockets. Every peer has by
    // then sent all it sends to this rank for the barrier, and the steps still running elsewhere
    // do not watch the peers they do not involve (TcpMesh::run_pairwise), so no peer mistakes the
    // close for a death. On several hosts the hierarchical barrier: its first step is on shared
    // memory, as every other call's (a rank must not start the cross-host step of a call while its
    // host's ranks are in the shared-memory step of another); a host peer that has not yet seen
    // this rank's post when it closes finds it there (ShmTransport::wait reads it again).
    OpHeader header{.seq = ++seq_, .kind = Collective::barrier};
    (hierarchical_ ? shm_ : tcp_)->barrier(header);
  }
  closer.orderly = true;
#ifdef RINGRUN_HAVE_NCCL
  if (nccl_) static_cast<NcclTransport&>(*nccl_).close(true);
#endif
}

void Communicator::abort() { close(false); }

void Communicator::close(bool orderly) {
  closed_ = true;
  nccl_.reset();  // aborts the NCCL communicator unless finalize closed it in order
  adasum_.reset();
  shm_.reset();
  tcp_.reset();
  transport_ = nullptr;
  if (mesh_) mesh_->close(orderly);
  mesh_.reset();
}

}  // namespace ringrun::core

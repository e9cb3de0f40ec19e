// The Gloo peer (Debian's libgloo-dev): the ring allreduce `gloo::AllreduceRing`, in place as its
// API is, plus `BroadcastOneToAll` and `AllgatherRing`, over Gloo's tcp device on 127.0.0.1.
// Only old-style algorithm objects and `BarrierAllToAll` run on the context: mixing them with the
// new-style gloo::allreduce on one context makes ops take seconds (shared/notes/peer-baselines.md).
#include "peer.hpp"

#include "common.hpp"
#include "dtype.hpp"

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <fmt/format.h>

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace ringrun::bench {
namespace {

template <typename T>
const gloo::ReductionFunction<T> *gloo_reduction(ringrun_op op) {
  switch (op) {
    case RINGRUN_SUM: return gloo::ReductionFunction<T>::sum;
    case RINGRUN_MIN: return gloo::ReductionFunction<T>::min;
    case RINGRUN_MAX: return gloo::ReductionFunction<T>::max;
    case RINGRUN_PRODUCT: return gloo::ReductionFunction<T>::product;
    case RINGRUN_AVERAGE: return nullptr;
    case RINGRUN_ADASUM: return nullptr;  // Gloo has no Adasum
  }
  return nullptr;
}

template <typename T>
std::function<void()> prepare_allreduce(const std::shared_ptr<gloo::Context> &context,
                                        const CollectiveCall &call, std::string &why_not) {
  const auto *reduction = gloo_reduction<T>(call.op);
  if (reduction == nullptr) {
    why_not = "Gloo has no average op";
    return {};
  }
  auto algorithm = std::make_shared<gloo::AllreduceRing<T>>(
      context, std::vector<T *>{static_cast<T *>(call.recv)}, static_cast<int>(call.count), reduction);
  return [algorithm] { algorithm->run(); };
}

std::function<void()> prepare_allreduce_for_dtype(const std::shared_ptr<gloo::Context> &context,
                                                  const CollectiveCall &call, std::string &why_not) {
  switch (call.dtype) {
    case RINGRUN_FLOAT32: return prepare_allreduce<float>(context, call, why_not);
    case RINGRUN_FLOAT64: return prepare_allreduce<double>(context, call, why_not);
    case RINGRUN_FLOAT16: return prepare_allreduce<gloo::float16>(context, call, why_not);
    case RINGRUN_INT32: return prepare_allreduce<std::int32_t>(context, call, why_not);
    case RINGRUN_INT64: return prepare_allreduce<std::int64_t>(context, call, why_not);
    case RINGRUN_UINT8: return prepare_allreduce<std::uint8_t>(context, call, why_not);
    case RINGRUN_INT8: return prepare_allreduce<std::int8_t>(context, call, why_not);
    case RINGRUN_INT16: return prepare_allreduce<std::int16_t>(context, call, why_not);
    case RINGRUN_BFLOAT16:
    case RINGRUN_BOOL: break;
  }
  why_not = "Gloo has no bfloat16 or bool type";
  return {};
}

class GlooPeer final : public Peer {
 public:
  GlooPeer(int rank, int size, const std::string &store_dir) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";  // loopback only
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("ringrun-bench", file_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(std::chrono::seconds(120));
    context->connectFullMesh(store, device);
    context_ = std::move(context);
    barrier_ = std::make_unique<gloo::BarrierAllToAll>(context_);
  }

  std::string description(Collective collective) const override {
    switch (collective) {
      case Collective::allreduce: return "Gloo AllreduceRing (tcp 127.0.0.1, in place)";
      case Collective::broadcast: return "Gloo BroadcastOneToAll (tcp 127.0.0.1)";
      case Collective::allgather: return "Gloo AllgatherRing (tcp 127.0.0.1)";
    }
    return "Gloo";
  }

  std::function<void()> prepare(const CollectiveCall &call, std::string &why_not) override {
    const std::size_t bytes_per_rank = call.count * dtype_bytes(call.dtype);
    if (bytes_per_rank > static_cast<std::size_t>(INT_MAX)) {
      why_not = fmt::format("Gloo counts are int; {} bytes do not fit", bytes_per_rank);
      return {};
    }
    const auto bytes = static_cast<int>(bytes_per_rank);
    switch (call.collective) {
      case Collective::allreduce: return prepare_allreduce_for_dtype(context_, call, why_not);
      case Collective::broadcast: {
        auto algorithm = std::make_shared<gloo::BroadcastOneToAll<std::uint8_t>>(
            context_, std::vector<std::uint8_t *>{static_cast<std::uint8_t *>(call.recv)},
            static_cast<std::size_t>(bytes), call.root);
        return [algorithm] { algorithm->run(); };
      }
      case Collective::allgather: {
        auto algorithm = std::make_shared<gloo::AllgatherRing<std::uint8_t>>(
            context_, std::vector<const std::uint8_t *>{static_cast<const std::uint8_t *>(call.send)},
            static_cast<std::uint8_t *>(call.recv), bytes);
        return [algorithm] { algorithm->run(); };
      }
    }
    why_not = "unknown collective";
    return {};
  }

  void barrier() override { barrier_->run(); }

 private:
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::BarrierAllToAll> barrier_;
};

}  // namespace

std::unique_ptr<Peer> make_gloo_peer(int rank, int size, const std::string &store_dir) {
  return std::make_unique<GlooPeer>(rank, size, store_dir);
}

// Rank 0 makes the FileStore directory and tells the others its name through ringrun_broadcast.
std::unique_ptr<Peer> connect_gloo(int rank, int ranks) {
  std::vector<char> directory(4096, '\0');
  if (rank == 0) {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = fmt::format("{}/ringrun-bench-gloo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    std::copy(pattern.begin(), pattern.end(), directory.begin());
    if (mkdtemp(directory.data()) == nullptr)
      fail(fmt::format("cannot create the Gloo store directory {}: {} (set TMPDIR to a writable directory)",
                       pattern, std::strerror(errno)));
  }
  check_rc(ringrun_broadcast(directory.data(), directory.size(), RINGRUN_UINT8, 0),
           "ringrun_broadcast (Gloo store directory)");
  std::unique_ptr<Peer> peer;
  try {
    peer = make_gloo_peer(rank, ranks, directory.data());
  } catch (const std::exception &error) {
    fail(fmt::format("Gloo could not connect over 127.0.0.1 through {}: {} (all ranks must share this "
                     "host's /tmp; or use --peer mpi|none)",
                     directory.data(), error.what()));
  }
  check_rc(ringrun_barrier(), "ringrun_barrier");
  if (rank == 0) std::filesystem::remove_all(directory.data());
  return peer;
}

}  // namespace ringrun::bench

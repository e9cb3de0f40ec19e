// The Open MPI peer: MPI_Allreduce / MPI_Bcast / MPI_Allgather on MPI_COMM_WORLD, out of place like
// ringrun's calls, with MPI_Barrier between samples.
#include "peer.hpp"

#include "dtype.hpp"

#include <mpi.h>

#include <fmt/format.h>

#include <climits>
#include <optional>

namespace ringrun::bench {
namespace {

std::optional<MPI_Datatype> mpi_datatype(ringrun_dtype dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT32: return MPI_FLOAT;
    case RINGRUN_FLOAT64: return MPI_DOUBLE;
    case RINGRUN_INT32: return MPI_INT32_T;
    case RINGRUN_INT64: return MPI_INT64_T;
    case RINGRUN_UINT8: return MPI_UINT8_T;
    case RINGRUN_INT8: return MPI_INT8_T;
    case RINGRUN_INT16: return MPI_INT16_T;
    case RINGRUN_BOOL: return std::nullopt;  // MPI's C_BOOL sums are not an or
    case RINGRUN_FLOAT16:
    case RINGRUN_BFLOAT16: return std::nullopt;  // no 16-bit float types in MPI 3.1
  }
  return std::nullopt;
}

std::optional<MPI_Op> mpi_op(ringrun_op op) {
  switch (op) {
    case RINGRUN_SUM: return MPI_SUM;
    case RINGRUN_MIN: return MPI_MIN;
    case RINGRUN_MAX: return MPI_MAX;
    case RINGRUN_PRODUCT: return MPI_PROD;
    case RINGRUN_AVERAGE: return std::nullopt;
    case RINGRUN_ADASUM: return std::nullopt;  // MPI has no Adasum
  }
  return std::nullopt;
}

std::string mpi_library_name() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string text(version, static_cast<std::size_t>(length));
  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
  if (const auto comma = text.find(','); comma != std::string::npos) text.resize(comma);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

class MpiPeer final : public Peer {
 public:
  MpiPeer() : library_(mpi_library_name()) {}

  std::string description(Collective collective) const override {
    switch (collective) {
      case Collective::allreduce: return library_ + " MPI_Allreduce";
      case Collective::broadcast: return library_ + " MPI_Bcast";
      case Collective::allgather: return library_ + " MPI_Allgather";
    }
    return library_;
  }

  std::function<void()> prepare(const CollectiveCall &call, std::string &why_not) override {
    const std::size_t bytes_per_rank = call.count * dtype_bytes(call.dtype);
    if (bytes_per_rank > static_cast<std::size_t>(INT_MAX)) {
      why_not = fmt::format("MPI counts are int; {} bytes do not fit", bytes_per_rank);
      return {};
    }
    const auto count = static_cast<int>(call.count);
    const auto bytes = static_cast<int>(bytes_per_rank);
    switch (call.collective) {
      case Collective::allreduce: {
        const auto datatype = mpi_datatype(call.dtype);
        const auto op = mpi_op(call.op);
        if (!datatype) {
          why_not = "MPI has no float16/bfloat16 type";
          return {};
        }
        if (!op) {
          why_not = "MPI has no average op";
          return {};
        }
        return [call, count, datatype = *datatype, op = *op] {
          MPI_Allreduce(call.send, call.recv, count, datatype, op, MPI_COMM_WORLD);
        };
      }
      case Collective::broadcast: {
        return [call, bytes] { MPI_Bcast(call.recv, bytes, MPI_BYTE, call.root, MPI_COMM_WORLD); };
      }
      case Collective::allgather: {
        return [call, bytes] {
          MPI_Allgather(call.send, bytes, MPI_BYTE, call.recv, bytes, MPI_BYTE, MPI_COMM_WORLD);
        };
      }
    }
    why_not = "unknown collective";
    return {};
  }

  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

 private:
  std::string library_;
};

}  // namespace

std::unique_ptr<Peer> make_mpi_peer() { return std::make_unique<MpiPeer>(); }

}  // namespace ringrun::bench

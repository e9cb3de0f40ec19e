// What ringrun.tensorflow's kernels submit to the runtime's engine (ringrun/ringrun.h): one op with
// a completion, and the chains that stand in for collectives the engine does not run natively yet
// (an allgather whose first dimension differs per rank, alltoall, reducescatter). Each chain is
// one function here, so that moving it onto the engine's own collective later changes only that
// function (man ringrun-tensorflow, "Built on allgather and allreduce"). Nothing here knows
// TensorFlow: buffers are raw bytes laid out as rows of the first dimension.
#ifndef RINGRUN_TENSORFLOW_ENGINE_OPS_HPP
#define RINGRUN_TENSORFLOW_ENGINE_OPS_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringrun/ringrun.h"

namespace ringrun::tensorflow {

// Runs exactly once per op or chain: status 0, or a ringrun error code and its message.
using Completion = std::function<void(int status, const std::string& message)>;

// Submits one engine op named `name`; `done` runs on the engine's thread when it completes, or
// here, at once, when the submission is refused (a bad argument, a duplicate pending name, no
// ringrun_init()).
void submit(const ringrun_request& request, const std::string& name, Completion done);

// A completion to call `parts` times; `done` runs after the last with the first failure.
Completion countdown(std::size_t parts, Completion done);

// A tensor as rows of its first dimension, with what every rank must agree on besides the rows.
struct Rows {
  const void* data = nullptr;
  std::int64_t rows = 0;
  std::vector<std::int64_t> row_shape;  // the dimensions after the first
  ringrun_dtype dtype = RINGRUN_FLOAT32;
  int type_code = 0;                    // the framework's dtype: ranks must agree on it
  std::string (*type_name)(int) = nullptr;  // names a type_code in messages
  std::size_t row_bytes() const;
  std::size_t row_elements() const;
};

// Called once every rank's row counts are known, on the engine's thread: returns the output
// buffer for their sum (rank order; may be null when it holds no element), or sets `error` when
// it cannot be had.
using AllocateRows = std::function<std::byte*(const std::vector<std::int64_t>& rows_per_rank, std::string& error)>;

// Allgather along the first dimension, which may differ per rank; the other dimensions and the
// dtype must match (else every rank gets RINGRUN_ERR_MISMATCH naming each rank's shape).
void allgather_rows(const std::string& name, const Rows& input, AllocateRows allocate, Completion done);

// Alltoall: splits[r] rows (in order) go to rank r; rank r's output is what every rank sent it,
// in rank order. allocate() receives the rows from each rank (the received splits).
void alltoall_rows(const std::string& name, const Rows& input, std::vector<std::int64_t> splits,
                   AllocateRows allocate, Completion done);

// Reducescatter: reduces `whole` (count elements, reduced in place) over every rank, then copies
// this rank's share of its rows, [first_row, first_row + rows), into `share`.
void reducescatter_rows(const std::string& name, void* whole, const Rows& shape, ringrun_op op,
                        std::int64_t first_row, std::int64_t rows, void* share, Completion done);

// The rows rank `rank` of `size` keeps of `total` in a reducescatter: the first total % size
// ranks one more. Returns {first row, rows}.
std::pair<std::int64_t, std::int64_t> reducescatter_share(std::int64_t total, int rank, int size);

}  // namespace ringrun::tensorflow

#endif

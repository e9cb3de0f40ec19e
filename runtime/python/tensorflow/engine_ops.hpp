// What ringrun.tensorflow's kernels submit to the runtime's engine (ringrun/ringrun.h): one
// request with a completion, optionally with an output the engine sizes (an allgather whose first
// dimension differs per rank, an alltoall), and the countdown a grouped kernel completes through.
// Nothing here knows TensorFlow.
#ifndef RINGRUN_TENSORFLOW_ENGINE_OPS_HPP
#define RINGRUN_TENSORFLOW_ENGINE_OPS_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "ringrun/ringrun.h"

namespace ringrun::tensorflow {

// Runs exactly once per op: status 0, or a ringrun error code and its message.
using Completion = std::function<void(int status, const std::string& message)>;

// The output of an op whose size the engine learns at negotiation: called once, on the engine's
// thread, with the elements in all and the rows (entries of the first dimension) from each of
// `ranks` ranks. Returns the buffer (any pointer, even null, when `elements` is 0), or sets
// `error` to say why there is none: the op then completes with that message.
using AllocateOutput =
    std::function<void*(std::size_t elements, const std::size_t* rows, int ranks, std::string& error)>;

// Submits `request` under `name` (copied by the engine); `done` runs on the engine's thread when
// the op completes, or here, at once, when the submission is refused (a bad argument, a name still
// pending, no ringrun_init()).
void submit(const ringrun_request& request, const std::string& name, Completion done);

// The same with request.allocate set to `allocate`.
void submit_sized(const ringrun_request& request, const std::string& name, AllocateOutput allocate, Completion done);

// A completion to call `parts` times; `done` runs after the last with the first failure.
Completion countdown(std::size_t parts, Completion done);

// The rows rank `rank` of `size` keeps of `total` in a reducescatter (ringrun.h: the first
// total % size ranks one more, in order). Returns {first row, rows}.
std::pair<std::int64_t, std::int64_t> reducescatter_share(std::int64_t total, int rank, int size);

}  // namespace ringrun::tensorflow

#endif

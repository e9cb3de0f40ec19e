// `--check`: inputs every rank can recompute for any rank, and counts of wrong output elements.
// Inputs are small integers, so sums, minima, maxima and products of up to 23 ranks are exact in
// every dtype (products use 1 and 2, and wrap in uint8 exactly as uint8 arithmetic does).
#pragma once

#include <ringrun/ringrun.h>

#include <cstddef>

namespace ringrun::bench {

// The value rank `rank` contributes at element `index` for a reduction with `op`.
double input_value(int rank, std::size_t index, ringrun_op op);

// Fills `count` elements with rank `rank`'s inputs.
void fill_inputs(void *buffer, std::size_t count, ringrun_dtype dtype, int rank, ringrun_op op);

// Elements of an allreduce result over `ranks` ranks that differ from the reference. Integer
// averages may round either way (floor or ceiling of the exact quotient both count as right).
std::size_t count_wrong_allreduce(const void *result, std::size_t count, ringrun_dtype dtype,
                                  ringrun_op op, int ranks);

// Elements that differ from `root`'s inputs (fill_inputs with RINGRUN_SUM) after a broadcast.
std::size_t count_wrong_broadcast(const void *result, std::size_t count, ringrun_dtype dtype, int root);

// Elements of an allgather result (ranks × count) that differ from each rank's inputs.
std::size_t count_wrong_allgather(const void *result, std::size_t count, ringrun_dtype dtype, int ranks);

}  // namespace ringrun::bench

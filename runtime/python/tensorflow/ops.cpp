// The ops of ringrun.tensorflow: their inputs, attributes and shape functions. The kernels are in
// *_kernels.cpp, the Python wrappers and gradients in ringrun/tensorflow/mpi_ops.py. Every op is
// stateful, as TensorFlow's own collectives are: TensorFlow must neither run one while it builds
// or optimizes a graph (constant folding of a collective with constant inputs would run it on one
// rank alone, then) nor merge two alike. ringrun.tensorflow lists the collectives among the ops
// that tf.function does not chain in program order (auto_control_deps.ASYNC_STATEFUL_OPS, as for
// CollectiveReduce), so that independent ones reach the engine together and are fused.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

namespace tf = ::tensorflow;
using tf::shape_inference::InferenceContext;
using tf::shape_inference::ShapeHandle;

// Every collective: Horovod's naming and process-set attributes, and stateful (above).
#define RINGRUN_COLLECTIVE_TRAITS .Attr("ignore_name_scope: bool = False").Attr("process_set_id: int = 0").SetIsStateful()
#define RINGRUN_REDUCIBLE "T: {uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool}"
#define RINGRUN_REDUCTION_ATTRS                                                                        \
  .Attr(RINGRUN_REDUCIBLE).Attr("reduce_op: int").Attr("prescale_factor: float = 1.0").Attr("postscale_factor: float = 1.0")
#define RINGRUN_MOVABLE \
  "T: {uint8, int8, uint16, int16, uint32, int32, uint64, int64, float16, bfloat16, float32, float64, bool}"

// The input's shape with an unknown first dimension (it differs per rank or depends on size()).
absl::Status unknown_rows(InferenceContext* c, int input, int output) {
  ShapeHandle shape;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(input), 1, &shape));
  TF_RETURN_IF_ERROR(c->ReplaceDim(shape, 0, c->UnknownDim(), &shape));
  c->set_output(output, shape);
  return absl::OkStatus();
}

absl::Status each_unknown_rows(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(unknown_rows(c, i, i));
  return absl::OkStatus();
}

absl::Status each_unchanged(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("RingrunAllreduce") RINGRUN_REDUCTION_ATTRS RINGRUN_COLLECTIVE_TRAITS
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(tf::shape_inference::UnchangedShape)
    .Doc("The reduction of `tensor` over the ranks of the process set (reduce_op: ringrun's op code, "
         "ringrun_op), keyed by the node name.");

REGISTER_OP("RingrunGroupedAllreduce") RINGRUN_REDUCTION_ATTRS
    .Attr("num_tensors: int") RINGRUN_COLLECTIVE_TRAITS
    .Input("tensors: num_tensors * T")
    .Output("reduced: num_tensors * T")
    .SetShapeFn(each_unchanged)
    .Doc("Allreduces of several tensors submitted together (the engine fuses them).");

REGISTER_OP("RingrunAllgather")
    .Attr(RINGRUN_MOVABLE) RINGRUN_COLLECTIVE_TRAITS
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn([](InferenceContext* c) { return unknown_rows(c, 0, 0); })
    .Doc("Every rank's tensor concatenated on the first dimension, which may differ per rank.");

REGISTER_OP("RingrunGroupedAllgather")
    .Attr(RINGRUN_MOVABLE)
    .Attr("num_tensors: int") RINGRUN_COLLECTIVE_TRAITS
    .Input("tensors: num_tensors * T")
    .Output("gathered: num_tensors * T")
    .SetShapeFn(each_unknown_rows)
    .Doc("Allgathers of several tensors submitted together.");

REGISTER_OP("RingrunBroadcast")
    .Attr(RINGRUN_MOVABLE)
    .Attr("root_rank: int") RINGRUN_COLLECTIVE_TRAITS
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetShapeFn(tf::shape_inference::UnchangedShape)
    .Doc("root_rank's tensor on every rank of the process set; root_rank is the root's index in the set (its "
         "global rank in the global set).");

REGISTER_OP("RingrunAlltoall")
    .Attr(RINGRUN_MOVABLE) RINGRUN_COLLECTIVE_TRAITS
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(unknown_rows(c, 0, 0));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("splits[r] rows of tensor to rank r (even splits when splits is empty); returns what every rank sent here.");

REGISTER_OP("RingrunReducescatter") RINGRUN_REDUCTION_ATTRS RINGRUN_COLLECTIVE_TRAITS
    .Input("tensor: T")
    .Output("share: T")
    .SetShapeFn([](InferenceContext* c) { return unknown_rows(c, 0, 0); })
    .Doc("This rank's rows of the reduction of tensor over every rank.");

REGISTER_OP("RingrunGroupedReducescatter") RINGRUN_REDUCTION_ATTRS
    .Attr("num_tensors: int") RINGRUN_COLLECTIVE_TRAITS
    .Input("tensors: num_tensors * T")
    .Output("shares: num_tensors * T")
    .SetShapeFn(each_unknown_rows)
    .Doc("Reducescatters of several tensors submitted together.");

REGISTER_OP("RingrunJoin")
    .Output("last_rank: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape)
    .Doc("This rank has no more ops: it stands in for the allreduces other ranks still submit until every rank has "
         "joined; returns the rank that joined last.");

REGISTER_OP("RingrunBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::NoOutputs)
    .Doc("Completes once every rank of the process set has reached it.");

// The queries as ops: evaluated when the graph runs (an elastic job changes them), not when it
// is built.
REGISTER_OP("RingrunSize")
    .Attr("process_set_id: int = 0")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape);
REGISTER_OP("RingrunLocalSize").Output("local_size: int32").SetIsStateful().SetShapeFn(tf::shape_inference::ScalarShape);
REGISTER_OP("RingrunRank").Output("rank: int32").SetIsStateful().SetShapeFn(tf::shape_inference::ScalarShape);
REGISTER_OP("RingrunLocalRank").Output("local_rank: int32").SetIsStateful().SetShapeFn(tf::shape_inference::ScalarShape);
REGISTER_OP("RingrunProcessSetIncluded")
    .Attr("process_set_id: int = 0")
    .Output("included: int32")
    .SetIsStateful()
    .SetShapeFn(tf::shape_inference::ScalarShape);

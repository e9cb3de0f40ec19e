// What every ringrun TensorFlow kernel shares: the engine name of a node, dtype mapping, the
// status of an engine error, scaling by a factor, and the base class of the async kernels (their
// engine name, process set and requests).
#ifndef RINGRUN_TENSORFLOW_KERNEL_SUPPORT_HPP
#define RINGRUN_TENSORFLOW_KERNEL_SUPPORT_HPP

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine_ops.hpp"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace ringrun::tensorflow {

namespace tf = ::tensorflow;

// The engine's dtype for reductions (the arithmetic must be the engine's), or none.
std::optional<ringrun_dtype> reducible_dtype(tf::DataType dtype);
// The engine's dtype for ops that only move bytes: also unsigned types as same-sized integers.
std::optional<ringrun_dtype> movable_dtype(tf::DataType dtype);

// A TensorFlow status for an engine error: mismatches across ranks are FailedPrecondition (as
// Horovod reports them), bad arguments InvalidArgument, a timeout DeadlineExceeded, everything a
// peer or the job caused (a dead peer, an elastic reset, a stall shutdown) Unknown. The message
// keeps the engine's text; ringrun.tensorflow turns the last kind into InternalError.
absl::Status engine_status(int code, const std::string& message);

// out = in * factor elementwise, computed in double for integers, float for half and bfloat16
// (Horovod's arithmetic); in and out may be the same tensor.
absl::Status scale_into(const tf::Tensor& in, tf::Tensor* out, double factor);

// The dimensions of a shape as a request carries them (ringrun_request.shape), so that ranks
// whose shapes differ get the engine's error naming both.
std::vector<std::int64_t> engine_dims(const tf::TensorShape& shape);

// A request for `collective` in process set `process_set_id` of a tensor of shape `dims`
// (engine_dims; it must outlive the submission).
ringrun_request engine_request(ringrun_collective collective, int process_set_id, const std::vector<std::int64_t>& dims);

// The elements of one entry of the first dimension (1 for a scalar).
std::int64_t row_elements(const tf::TensorShape& shape);

// Starts `count` parts of one kernel (a grouped op); done runs once, after the last part
// completes, with the first failure. A part that fails to start completes with its reason, and
// so do the parts after it, which are not started.
void start_parts(tf::OpKernelContext* context, tf::AsyncOpKernel::DoneCallback done, int count,
                 const std::function<absl::Status(int part, Completion)>& start_one);

// OK once ringrun.tensorflow.init() ran; FailedPrecondition naming the fix before.
absl::Status check_initialized();

// The size of a process set and this rank's index in it (0: every rank, ringrun_rank()); the
// runtime's error (an unknown set, a rank not in it) as InvalidArgument.
absl::Status process_set_size(int process_set_id, int* size);
absl::Status process_set_rank(int process_set_id, int* rank);

// The base of the async collective kernels: the engine name (the node's, without its name scope
// when ignore_name_scope is set) and the process set (attribute process_set_id, 0 for every rank)
// the kernel's requests go to.
class CollectiveKernel : public tf::AsyncOpKernel {
 public:
  explicit CollectiveKernel(tf::OpKernelConstruction* context);

 protected:
  const std::string& engine_name() const { return engine_name_; }
  int process_set_id() const { return process_set_id_; }
  // Calls done with the engine's status (on the engine's thread).
  static void finish(tf::OpKernelContext* context, const DoneCallback& done, int status, const std::string& message);

 private:
  std::string engine_name_;
  int process_set_id_ = 0;
};

}  // namespace ringrun::tensorflow

#endif

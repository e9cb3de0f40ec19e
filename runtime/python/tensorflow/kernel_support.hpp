// What every ringrun TensorFlow kernel shares: the engine name of a node, dtype mapping, the
// status of an engine error, scaling by a factor, and the base class of the async kernels.
#ifndef RINGRUN_TENSORFLOW_KERNEL_SUPPORT_HPP
#define RINGRUN_TENSORFLOW_KERNEL_SUPPORT_HPP

#include <functional>
#include <optional>
#include <string>

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

// A kernel's input as rows of its first dimension (a scalar is one row).
Rows rows_of(const tf::Tensor& tensor, ringrun_dtype dtype);

// Starts `count` parts of one kernel (a grouped op); done runs once, after the last part
// completes, with the first failure. A part that fails to start completes with its reason, and
// so do the parts after it, which are not started.
void start_parts(tf::OpKernelContext* context, tf::AsyncOpKernel::DoneCallback done, int count,
                 const std::function<absl::Status(int part, Completion)>& start_one);

// Unimplemented for a process_set_id attribute other than 0 (the global set): process sets wait
// for the engine's.
absl::Status refuse_process_sets(tf::OpKernelConstruction* context);

// The base of the async collective kernels: the engine name (the node's, without its name scope
// when ignore_name_scope is set), and process sets refused until the engine has them.
class CollectiveKernel : public tf::AsyncOpKernel {
 public:
  explicit CollectiveKernel(tf::OpKernelConstruction* context);

 protected:
  const std::string& engine_name() const { return engine_name_; }
  // OK once ringrun.tensorflow.init() ran; FailedPrecondition naming the fix before.
  static absl::Status check_initialized();
  // Calls done with the engine's status (on the engine's thread).
  static void finish(tf::OpKernelContext* context, const DoneCallback& done, int status, const std::string& message);

 private:
  std::string engine_name_;
};

}  // namespace ringrun::tensorflow

#endif

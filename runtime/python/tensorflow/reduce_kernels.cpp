// The reducing kernels: allreduce, grouped allreduce, reducescatter, grouped reducescatter. Each
// enqueues TensorFlow's own buffers into the engine (the input, and an output allocated here, or
// the input itself when TensorFlow lets the kernel reuse it) with the tensor's shape and process
// set, and calls done from the engine's completion. The engine takes no scale factors, so
// prescale_factor and postscale_factor are applied here as Horovod applies them (integers in
// double precision and truncated back, half floats in single), and an Average with a
// postscale_factor runs as a Sum scaled once by postscale_factor / size, Horovod's arithmetic
// (README, "Coming from Horovod: TensorFlow and Keras").
#include <utility>

#include "kernel_support.hpp"
#include "tensorflow/core/framework/op_kernel.h"

namespace ringrun::tensorflow {

namespace {

using tf::OpKernelConstruction;
using tf::OpKernelContext;
using tf::Tensor;

// The op's attributes.
struct Reduction {
  ringrun_op op = RINGRUN_SUM;
  float prescale = 1.0f;
  float postscale = 1.0f;
};

absl::Status read_reduction(OpKernelConstruction* context, Reduction* how) {
  std::int64_t op = 0;
  TF_RETURN_IF_ERROR(context->GetAttr("reduce_op", &op));
  TF_RETURN_IF_ERROR(context->GetAttr("prescale_factor", &how->prescale));
  TF_RETURN_IF_ERROR(context->GetAttr("postscale_factor", &how->postscale));
  if (op < RINGRUN_SUM || op > RINGRUN_ADASUM)
    return absl::InvalidArgumentError("reduce_op " + std::to_string(op) +
                                      " is no reduction; use Average, Sum, Min, Max, Product or Adasum");
  how->op = static_cast<ringrun_op>(op);
  return absl::OkStatus();
}

// What one call runs: the engine's op in a process set, and the factors applied around it.
struct Plan {
  std::string name;
  int process_set = 0;
  ringrun_op op = RINGRUN_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
};

absl::Status plan_reduction(const Reduction& how, int process_set, Plan* plan) {
  plan->process_set = process_set;
  plan->op = how.op;
  plan->prescale = how.prescale;
  plan->postscale = how.postscale;
  if (how.op == RINGRUN_AVERAGE && how.postscale != 1.0f) {
    int size = 0;
    TF_RETURN_IF_ERROR(process_set_size(process_set, &size));
    plan->op = RINGRUN_SUM;
    plan->postscale = static_cast<double>(how.postscale) / size;
  }
  return absl::OkStatus();
}

// The engine dtype of `input`, refusing what cannot be reduced or scaled.
absl::Status reduction_dtype(const Tensor& input, const Plan& plan, ringrun_dtype* dtype) {
  const auto found = reducible_dtype(input.dtype());
  if (!found)
    return absl::InvalidArgumentError("a " + tf::DataTypeString(input.dtype()) +
                                      " tensor cannot be reduced; use a numeric or bool dtype");
  if ((plan.prescale != 1.0 || plan.postscale != 1.0) && input.dtype() == tf::DT_BOOL)
    return absl::InvalidArgumentError("prescale_factor/postscale_factor: a bool tensor cannot be scaled");
  *dtype = *found;
  return absl::OkStatus();
}

// A completion that multiplies `output` by the plan's postscale before `done`.
Completion postscaled(Tensor* output, double postscale, Completion done) {
  if (postscale == 1.0) return done;
  return [output, postscale, done = std::move(done)](int status, const std::string& message) {
    if (status == RINGRUN_OK) (void)scale_into(*output, output, postscale);  // the dtype was checked before
    done(status, message);
  };
}

// Submits the engine's `collective` of `input` (its shape; the data at `send`, its prescaled copy or
// itself) into `out` with the plan's op and process set.
void submit_reduction(ringrun_collective collective, const Plan& plan, const Tensor& input, const void* send,
                      Tensor* out, ringrun_dtype dtype, Completion done) {
  const auto dims = engine_dims(input.shape());
  ringrun_request r = engine_request(collective, plan.process_set, dims);
  r.send = send;
  r.recv = const_cast<char*>(out->tensor_data().data());
  r.count = static_cast<std::size_t>(input.NumElements());
  r.dtype = dtype;
  r.op = plan.op;
  submit(r, plan.name, std::move(done));
}

// Allreduces input `index` into output `index` (in place when TensorFlow hands the input over).
absl::Status start_allreduce(OpKernelContext* context, int index, const Plan& plan, Completion done) {
  const Tensor& input = context->input(index);
  ringrun_dtype dtype{};
  TF_RETURN_IF_ERROR(reduction_dtype(input, plan, &dtype));
  Tensor* output = nullptr;
  TF_RETURN_IF_ERROR(context->forward_input_or_allocate_output({index}, index, input.shape(), &output));
  const void* send = input.tensor_data().data();
  if (plan.prescale != 1.0) {
    TF_RETURN_IF_ERROR(scale_into(input, output, plan.prescale));
    send = output->tensor_data().data();
  }
  submit_reduction(RINGRUN_COLLECTIVE_ALLREDUCE, plan, input, send, output, dtype,
                   postscaled(output, plan.postscale, std::move(done)));
  return absl::OkStatus();
}

// Reducescatters input `index` into output `index`: this rank's rows of the reduction over the
// process set (reducescatter_share), reduced by the engine's own reduce-scatter.
absl::Status start_reducescatter(OpKernelContext* context, int index, const Plan& plan, Completion done) {
  const Tensor& input = context->input(index);
  if (input.dims() == 0)
    return absl::InvalidArgumentError("reducescatter: a scalar has no first dimension to scatter; reshape it to [1]");
  ringrun_dtype dtype{};
  TF_RETURN_IF_ERROR(reduction_dtype(input, plan, &dtype));
  int size = 0, rank = 0;
  TF_RETURN_IF_ERROR(process_set_size(plan.process_set, &size));
  TF_RETURN_IF_ERROR(process_set_rank(plan.process_set, &rank));
  tf::TensorShape share_shape = input.shape();
  share_shape.set_dim(0, reducescatter_share(input.dim_size(0), rank, size).second);
  Tensor* share = nullptr;
  TF_RETURN_IF_ERROR(context->allocate_output(index, share_shape, &share));
  Tensor scaled;  // the prescaled input, alive (a reference in the completion) until the op is done
  const void* send = input.tensor_data().data();
  if (plan.prescale != 1.0) {
    TF_RETURN_IF_ERROR(context->allocate_temp(input.dtype(), input.shape(), &scaled));
    TF_RETURN_IF_ERROR(scale_into(input, &scaled, plan.prescale));
    send = scaled.tensor_data().data();
  }
  Completion finish_share = postscaled(share, plan.postscale, std::move(done));
  submit_reduction(RINGRUN_COLLECTIVE_REDUCESCATTER, plan, input, send, share, dtype,
                   [scaled, finish_share = std::move(finish_share)](int status, const std::string& message) {
                     finish_share(status, message);
                   });
  return absl::OkStatus();
}

using StartOne = absl::Status (*)(OpKernelContext*, int, const Plan&, Completion);

// One kernel for the single and the grouped op: a group's parts are named "<node>.<i>".
template <StartOne Start, bool Grouped>
class ReduceKernel : public CollectiveKernel {
 public:
  explicit ReduceKernel(OpKernelConstruction* context) : CollectiveKernel(context) {
    OP_REQUIRES_OK(context, read_reduction(context, &how_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    Plan plan;
    OP_REQUIRES_OK_ASYNC(context, plan_reduction(how_, process_set_id(), &plan), done);
    start_parts(context, std::move(done), Grouped ? context->num_inputs() : 1, [&](int i, Completion part) {
      plan.name = Grouped ? engine_name() + "." + std::to_string(i) : engine_name();
      return Start(context, i, plan, std::move(part));
    });
  }

 private:
  Reduction how_;
};

}  // namespace

using AllreduceKernel = ReduceKernel<start_allreduce, false>;
using GroupedAllreduceKernel = ReduceKernel<start_allreduce, true>;
using ReducescatterKernel = ReduceKernel<start_reducescatter, false>;
using GroupedReducescatterKernel = ReduceKernel<start_reducescatter, true>;
REGISTER_KERNEL_BUILDER(Name("RingrunAllreduce").Device(tf::DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunGroupedAllreduce").Device(tf::DEVICE_CPU), GroupedAllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunReducescatter").Device(tf::DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunGroupedReducescatter").Device(tf::DEVICE_CPU), GroupedReducescatterKernel);

}  // namespace ringrun::tensorflow

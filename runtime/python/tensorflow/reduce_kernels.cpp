// The reducing kernels: allreduce, grouped allreduce, reducescatter, grouped reducescatter. Each
// enqueues TensorFlow's own buffers into the engine (the input, and an output allocated here, or
// the input itself when TensorFlow lets the kernel reuse it) and calls done from the engine's
// completion.
#include <cstring>

#include "kernel_support.hpp"
#include "tensorflow/core/framework/op_kernel.h"

namespace ringrun::tensorflow {

namespace {

using tf::OpKernelConstruction;
using tf::OpKernelContext;
using tf::Tensor;

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
  how->op = static_cast<ringrun_op>(op);
  return absl::OkStatus();
}

// The engine dtype of input `index`, refusing what cannot be reduced or scaled.
absl::Status reduction_dtype(const Tensor& input, const Reduction& how, ringrun_dtype* dtype) {
  const auto found = reducible_dtype(input.dtype());
  if (!found)
    return absl::InvalidArgumentError("a " + tf::DataTypeString(input.dtype()) +
                                      " tensor cannot be reduced; use a numeric or bool dtype");
  if ((how.prescale != 1.0f || how.postscale != 1.0f) && input.dtype() == tf::DT_BOOL)
    return absl::InvalidArgumentError("prescale_factor/postscale_factor: a bool tensor cannot be scaled");
  *dtype = *found;
  return absl::OkStatus();
}

// Allreduces input `index` into output `index` (in place when TensorFlow hands the input over).
absl::Status start_allreduce(OpKernelContext* context, int index, const std::string& name, const Reduction& how,
                             Completion done) {
  const Tensor& input = context->input(index);
  ringrun_dtype dtype{};
  TF_RETURN_IF_ERROR(reduction_dtype(input, how, &dtype));
  Tensor* output = nullptr;
  TF_RETURN_IF_ERROR(context->forward_input_or_allocate_output({index}, index, input.shape(), &output));
  const void* send = input.tensor_data().data();
  if (how.prescale != 1.0f) {
    TF_RETURN_IF_ERROR(scale_into(input, output, how.prescale));
    send = output->tensor_data().data();  // prescale_factor waits for the engine's own
  }
  ringrun_request r;
  ringrun_request_init(&r);
  r.collective = RINGRUN_COLLECTIVE_ALLREDUCE;
  r.send = send;
  r.recv = const_cast<char*>(output->tensor_data().data());
  r.count = static_cast<std::size_t>(input.NumElements());
  r.dtype = dtype;
  r.op = how.op;
  submit(r, name, [output, how, done = std::move(done)](int status, const std::string& message) {
    if (status == RINGRUN_OK && how.postscale != 1.0f) (void)scale_into(*output, output, how.postscale);
    done(status, message);
  });
  return absl::OkStatus();
}

// Reducescatters input `index` into output `index`: this rank's rows of the reduction.
absl::Status start_reducescatter(OpKernelContext* context, int index, const std::string& name, const Reduction& how,
                                 Completion done) {
  const Tensor& input = context->input(index);
  if (input.dims() == 0)
    return absl::InvalidArgumentError("reducescatter: a scalar has no first dimension to scatter; reshape it to [1]");
  ringrun_dtype dtype{};
  TF_RETURN_IF_ERROR(reduction_dtype(input, how, &dtype));
  const auto [first_row, rows] = reducescatter_share(input.dim_size(0), ringrun_rank(), ringrun_size());
  tf::TensorShape share_shape = input.shape();
  share_shape.set_dim(0, rows);
  Tensor* share = nullptr;
  TF_RETURN_IF_ERROR(context->allocate_output(index, share_shape, &share));
  // The whole tensor is reduced in a buffer of its own (the input's, when TensorFlow hands it over).
  Tensor whole;
  TF_RETURN_IF_ERROR(
      context->forward_input_or_allocate_temp({index}, input.dtype(), input.shape(), tf::AllocatorAttributes(), &whole));
  if (how.prescale != 1.0f) {
    TF_RETURN_IF_ERROR(scale_into(input, &whole, how.prescale));
  } else if (whole.tensor_data().data() != input.tensor_data().data() && input.TotalBytes() > 0) {
    std::memcpy(const_cast<char*>(whole.tensor_data().data()), input.tensor_data().data(), input.TotalBytes());
  }
  void* whole_data = const_cast<char*>(whole.tensor_data().data());
  auto finish_share = [whole, share, how, done = std::move(done)](int status, const std::string& message) {
    if (status == RINGRUN_OK && how.postscale != 1.0f) (void)scale_into(*share, share, how.postscale);
    done(status, message);
  };
  reducescatter_rows(name, whole_data, rows_of(input, dtype), how.op, first_row, rows,
                     const_cast<char*>(share->tensor_data().data()), std::move(finish_share));
  return absl::OkStatus();
}

using StartOne = absl::Status (*)(OpKernelContext*, int, const std::string&, const Reduction&, Completion);

// One kernel for the single and the grouped op: a group's parts are named "<node>.<i>".
template <StartOne Start, bool Grouped>
class ReduceKernel : public CollectiveKernel {
 public:
  explicit ReduceKernel(OpKernelConstruction* context) : CollectiveKernel(context) {
    OP_REQUIRES_OK(context, read_reduction(context, &how_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    start_parts(context, std::move(done), Grouped ? context->num_inputs() : 1, [&](int i, Completion part) {
      return Start(context, i, Grouped ? engine_name() + "." + std::to_string(i) : engine_name(), how_,
                   std::move(part));
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

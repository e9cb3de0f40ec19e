// The kernels that move data without reducing it: allgather (first dimensions may differ per rank),
// grouped allgather, broadcast and alltoall. Outputs whose size depends on the other ranks are
// allocated on the engine's thread once the sizes are known.
#include <cstring>
#include <numeric>

#include "kernel_support.hpp"
#include "tensorflow/core/framework/op_kernel.h"

namespace ringrun::tensorflow {

namespace {

using tf::OpKernelConstruction;
using tf::OpKernelContext;
using tf::Tensor;

absl::Status data_dtype(const Tensor& input, const char* what, ringrun_dtype* dtype) {
  const auto found = movable_dtype(input.dtype());
  if (!found)
    return absl::InvalidArgumentError(std::string(what) + ": " + tf::DataTypeString(input.dtype()) +
                                      " tensors are not supported; use a numeric or bool dtype");
  *dtype = *found;
  return absl::OkStatus();
}

std::byte* data_of(Tensor* tensor) {
  return reinterpret_cast<std::byte*>(const_cast<char*>(tensor->tensor_data().data()));
}

// An allocator for output `index`: the input's shape with `rows` as its first dimension.
AllocateRows allocate_rows(OpKernelContext* context, int index, const tf::TensorShape& shape) {
  return [context, index, shape](const std::vector<std::int64_t>& per_rank, std::string& error) -> std::byte* {
    tf::TensorShape out_shape = shape;
    out_shape.set_dim(0, std::accumulate(per_rank.begin(), per_rank.end(), std::int64_t{0}));
    Tensor* out = nullptr;
    const absl::Status allocated = context->allocate_output(index, out_shape, &out);
    if (!allocated.ok()) {
      error = std::string(allocated.message());
      return nullptr;
    }
    return data_of(out);
  };
}

absl::Status start_allgather(OpKernelContext* context, int index, const std::string& name, Completion done) {
  const Tensor& input = context->input(index);
  if (input.dims() == 0)
    return absl::InvalidArgumentError("allgather: a scalar has no first dimension to gather on; reshape it to [1]");
  ringrun_dtype dtype{};
  TF_RETURN_IF_ERROR(data_dtype(input, "allgather", &dtype));
  allgather_rows(name, rows_of(input, dtype), allocate_rows(context, index, input.shape()), std::move(done));
  return absl::OkStatus();
}

// One kernel for the single and the grouped op: a group's parts are named "<node>.<i>".
template <bool Grouped>
class AllgatherKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    start_parts(context, std::move(done), Grouped ? context->num_inputs() : 1, [&](int i, Completion part) {
      return start_allgather(context, i, Grouped ? engine_name() + "." + std::to_string(i) : engine_name(),
                             std::move(part));
    });
  }
};

class BroadcastKernel : public CollectiveKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* context) : CollectiveKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    const Tensor& input = context->input(0);
    ringrun_dtype dtype{};
    OP_REQUIRES_OK_ASYNC(context, data_dtype(input, "broadcast", &dtype), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    // The root sends its input; the others' buffers are overwritten (an unchanged input on the
    // root when TensorFlow gave its buffer over).
    if (data_of(output) != reinterpret_cast<const std::byte*>(input.tensor_data().data()) && input.TotalBytes() > 0 &&
        root_rank_ == ringrun_rank())
      std::memcpy(data_of(output), input.tensor_data().data(), input.TotalBytes());
    ringrun_request r;
    ringrun_request_init(&r);
    r.collective = RINGRUN_COLLECTIVE_BROADCAST;
    r.recv = data_of(output);
    r.count = static_cast<std::size_t>(input.NumElements());
    r.dtype = dtype;
    r.root = static_cast<int>(root_rank_);
    submit(r, engine_name(), [context, done](int status, const std::string& message) {
      finish(context, done, status, message);
    });
  }

 private:
  std::int64_t root_rank_ = 0;
};

// splits[r] rows for rank r: the given ones, checked, or the first dimension divided evenly.
absl::Status alltoall_splits(const Tensor& input, const Tensor& given, std::vector<std::int64_t>* splits) {
  const int size = ringrun_size();
  const std::int64_t rows = input.dim_size(0);
  if (given.NumElements() == 0) {
    if (rows % size != 0)
      return absl::InvalidArgumentError("alltoall: without splits the first dimension (" + std::to_string(rows) +
                                        ") must divide evenly by size() (" + std::to_string(size) + "); pass splits");
    splits->assign(static_cast<std::size_t>(size), rows / size);
    return absl::OkStatus();
  }
  if (given.dims() != 1 || given.NumElements() != size)
    return absl::InvalidArgumentError("alltoall: splits must be a vector of size() (" + std::to_string(size) +
                                      ") row counts, got shape " + given.shape().DebugString());
  const auto values = given.flat<std::int32_t>();
  splits->assign(values.data(), values.data() + values.size());
  std::int64_t sum = 0;
  for (auto s : *splits) {
    if (s < 0) return absl::InvalidArgumentError("alltoall: splits must not be negative");
    sum += s;
  }
  if (sum > rows)
    return absl::InvalidArgumentError("alltoall: the splits add up to " + std::to_string(sum) +
                                      ", more than the first dimension (" + std::to_string(rows) + ")");
  return absl::OkStatus();
}

class AlltoallKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    const Tensor& input = context->input(0);
    OP_REQUIRES_ASYNC(context, input.dims() > 0,
                      absl::InvalidArgumentError("alltoall: a scalar has no first dimension to split; reshape it to [1]"),
                      done);
    ringrun_dtype dtype{};
    OP_REQUIRES_OK_ASYNC(context, data_dtype(input, "alltoall", &dtype), done);
    std::vector<std::int64_t> splits;
    OP_REQUIRES_OK_ASYNC(context, alltoall_splits(input, context->input(1), &splits), done);
    AllocateRows allocate_output = allocate_rows(context, 0, input.shape());
    auto allocate = [context, allocate_output](const std::vector<std::int64_t>& received, std::string& error) {
      Tensor* received_splits = nullptr;
      const absl::Status allocated = context->allocate_output(
          1, tf::TensorShape({static_cast<std::int64_t>(received.size())}), &received_splits);
      if (!allocated.ok()) {
        error = std::string(allocated.message());
        return static_cast<std::byte*>(nullptr);
      }
      auto flat = received_splits->flat<std::int32_t>();
      for (std::size_t r = 0; r < received.size(); ++r) flat(static_cast<std::int64_t>(r)) = static_cast<std::int32_t>(received[r]);
      return allocate_output(received, error);
    };
    alltoall_rows(engine_name(), rows_of(input, dtype), std::move(splits), std::move(allocate),
                  [context, done](int status, const std::string& message) { finish(context, done, status, message); });
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("RingrunAllgather").Device(tf::DEVICE_CPU), AllgatherKernel<false>);
REGISTER_KERNEL_BUILDER(Name("RingrunGroupedAllgather").Device(tf::DEVICE_CPU), AllgatherKernel<true>);
REGISTER_KERNEL_BUILDER(Name("RingrunBroadcast").Device(tf::DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunAlltoall").Device(tf::DEVICE_CPU).HostMemory("splits").HostMemory("received_splits"),
                        AlltoallKernel);

}  // namespace ringrun::tensorflow

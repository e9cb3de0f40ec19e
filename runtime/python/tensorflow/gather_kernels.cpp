// The kernels that move data without reducing it: allgather (first dimensions may differ per rank),
// grouped allgather, broadcast and alltoall, each one request of the engine's own collective in the
// op's process set. Outputs whose size depends on the other ranks are allocated by the engine's
// allocate callback once negotiation knows every rank's rows.
//
// Thread safety: that callback runs on the engine's thread (ringrun.h) and calls
// OpKernelContext::allocate_output while the kernel's own thread may still be starting the next
// part of a grouped op. Each output is allocated by exactly one callback, the callbacks of one
// kernel are serialized (one process set's engine runs one negotiation cycle at a time, and the
// parts of a kernel share its process set), and after its first submission the kernel's thread
// only reads its inputs; TensorFlow allows an async kernel's outputs to be allocated from another
// thread until done() runs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
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

// Allocates output `index` of the input's shape with the rows from every rank as its first
// dimension; `also` (optional) runs first with those rows (alltoall's received splits).
AllocateOutput allocate_rows(OpKernelContext* context, int index, const tf::TensorShape& shape,
                             std::function<absl::Status(const std::size_t* rows, int ranks)> also = nullptr) {
  return [context, index, shape, also = std::move(also)](std::size_t, const std::size_t* rows, int ranks,
                                                          std::string& error) -> void* {
    absl::Status allocated = also ? also(rows, ranks) : absl::OkStatus();
    tf::TensorShape out_shape = shape;
    out_shape.set_dim(0, static_cast<std::int64_t>(std::accumulate(rows, rows + ranks, std::size_t{0})));
    Tensor* out = nullptr;
    if (allocated.ok()) allocated = context->allocate_output(index, out_shape, &out);
    if (!allocated.ok()) {
      error = "output " + std::to_string(index) + " of shape " + out_shape.DebugString() +
              " could not be allocated: " + std::string(allocated.message());
      return nullptr;
    }
    return data_of(out);
  };
}

// Submits `r` (an allgather or alltoall of `rows` rows of `shape`) with `allocate` sizing its output.
// The engine counts each rank's rows by their elements (ringrun.h, ringrun_allocate_fn), so a
// tensor whose rows have none (a dimension after the first is 0, Horovod's empty alltoall) is sent
// as one byte per row instead: the output, of no elements, is still allocated from the real rows.
// Ranks that disagree only on those dimensions are then not told apart.
void submit_rows(ringrun_request r, const tf::TensorShape& shape, std::int64_t rows, const std::string& name,
                 AllocateOutput allocate, Completion done) {
  if (shape.dims() < 2 || row_elements(shape) > 0) return submit_sized(r, name, std::move(allocate), std::move(done));
  struct RowBytes {
    std::vector<std::uint8_t> send, recv;
  };
  auto bytes = std::make_shared<RowBytes>();
  bytes->send.assign(static_cast<std::size_t>(rows), 0);
  const std::vector<std::int64_t> dims{rows, 1};
  r.send = bytes->send.data();
  r.count = bytes->send.size();
  r.dtype = RINGRUN_UINT8;
  r.shape = dims.data();
  r.ndim = 2;
  auto allocate_bytes = [bytes, allocate = std::move(allocate)](std::size_t count, const std::size_t* from_each,
                                                                int ranks, std::string& error) -> void* {
    allocate(0, from_each, ranks, error);
    if (!error.empty()) return nullptr;
    bytes->recv.resize(std::max<std::size_t>(count, 1));
    return bytes->recv.data();
  };
  submit_sized(r, name, std::move(allocate_bytes),
               [bytes, done = std::move(done)](int status, const std::string& message) { done(status, message); });
}

absl::Status start_allgather(OpKernelContext* context, int index, const std::string& name, int process_set,
                             Completion done) {
  const Tensor& input = context->input(index);
  if (input.dims() == 0)
    return absl::InvalidArgumentError("allgather: a scalar has no first dimension to gather on; reshape it to [1]");
  ringrun_dtype dtype{};
  TF_RETURN_IF_ERROR(data_dtype(input, "allgather", &dtype));
  const auto dims = engine_dims(input.shape());
  ringrun_request r = engine_request(RINGRUN_COLLECTIVE_ALLGATHER, process_set, dims);
  r.send = input.tensor_data().data();
  r.count = static_cast<std::size_t>(input.NumElements());
  r.dtype = dtype;
  submit_rows(r, input.shape(), input.dim_size(0), name, allocate_rows(context, index, input.shape()), std::move(done));
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
                             process_set_id(), std::move(part));
    });
  }
};

// root_rank is the root's index in the op's process set (the global rank for the global set):
// ringrun.tensorflow translates Horovod's global root ranks before it builds the op.
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
    int set_rank = 0;
    OP_REQUIRES_OK_ASYNC(context, process_set_rank(process_set_id(), &set_rank), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    // The root sends its input; the others' buffers are overwritten (an unchanged input on the
    // root when TensorFlow gave its buffer over).
    if (data_of(output) != reinterpret_cast<const std::byte*>(input.tensor_data().data()) && input.TotalBytes() > 0 &&
        root_rank_ == set_rank)
      std::memcpy(data_of(output), input.tensor_data().data(), input.TotalBytes());
    const auto dims = engine_dims(input.shape());
    ringrun_request r = engine_request(RINGRUN_COLLECTIVE_BROADCAST, process_set_id(), dims);
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

// splits[r] rows for rank r of the process set: the given ones, checked, or the first dimension
// divided evenly.
absl::Status alltoall_splits(const Tensor& input, const Tensor& given, int size, std::vector<std::size_t>* splits) {
  const std::int64_t rows = input.dim_size(0);
  if (given.NumElements() == 0) {
    if (rows % size != 0)
      return absl::InvalidArgumentError("alltoall: without splits the first dimension (" + std::to_string(rows) +
                                        ") must divide evenly by the number of ranks (" + std::to_string(size) +
                                        "); pass splits");
    splits->assign(static_cast<std::size_t>(size), static_cast<std::size_t>(rows / size));
    return absl::OkStatus();
  }
  if (given.dims() != 1 || given.NumElements() != size)
    return absl::InvalidArgumentError("alltoall: splits must be a vector of one row count per rank (" +
                                      std::to_string(size) + "), got shape " + given.shape().DebugString());
  const auto values = given.flat<std::int32_t>();
  std::int64_t sum = 0;
  for (std::int64_t i = 0; i < values.size(); ++i) {
    if (values(i) < 0) return absl::InvalidArgumentError("alltoall: splits must not be negative");
    sum += values(i);
    splits->push_back(static_cast<std::size_t>(values(i)));
  }
  if (sum > rows)
    return absl::InvalidArgumentError("alltoall: the splits add up to " + std::to_string(sum) +
                                      ", more than the first dimension (" + std::to_string(rows) + ")");
  return absl::OkStatus();
}

// Writes the rows received from each rank into output 1 (received_splits).
std::function<absl::Status(const std::size_t*, int)> write_received_splits(OpKernelContext* context) {
  return [context](const std::size_t* rows, int ranks) {
    Tensor* received = nullptr;
    TF_RETURN_IF_ERROR(context->allocate_output(1, tf::TensorShape({ranks}), &received));
    auto flat = received->flat<std::int32_t>();
    for (int r = 0; r < ranks; ++r) flat(r) = static_cast<std::int32_t>(rows[r]);
    return absl::OkStatus();
  };
}

// The engine's alltoall: splits[r] rows go straight to rank r. Splits may add up to fewer rows
// than the tensor has (as in Horovod): the rows after them are not sent.
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
    int size = 0;
    OP_REQUIRES_OK_ASYNC(context, process_set_size(process_set_id(), &size), done);
    std::vector<std::size_t> splits;
    OP_REQUIRES_OK_ASYNC(context, alltoall_splits(input, context->input(1), size, &splits), done);
    auto dims = engine_dims(input.shape());
    dims[0] = static_cast<std::int64_t>(std::accumulate(splits.begin(), splits.end(), std::size_t{0}));
    ringrun_request r = engine_request(RINGRUN_COLLECTIVE_ALLTOALL, process_set_id(), dims);
    r.send = input.tensor_data().data();
    r.count = static_cast<std::size_t>(dims[0] * row_elements(input.shape()));
    r.dtype = dtype;
    r.splits = splits.data();
    submit_rows(r, input.shape(), dims[0], engine_name(),
                allocate_rows(context, 0, input.shape(), write_received_splits(context)),
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

// join, barrier and the queries as ops.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "kernel_support.hpp"
#include "tensorflow/core/framework/op_kernel.h"

namespace ringrun::tensorflow {

namespace {

using tf::OpKernelConstruction;
using tf::OpKernelContext;

// Waits for the engine's join: every rank gathers the time each one arrived, and the latest is
// the last to join. Unlike Horovod's, a rank that joined does not stand in for allreduces the
// others still submit (README, "Coming from Horovod: TensorFlow and Keras").
class JoinKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    tf::Tensor* last = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->allocate_output(0, tf::TensorShape({}), &last), done);
    auto arrived = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(1 + ringrun_size()));
    (*arrived)[0] = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    ringrun_request r;
    ringrun_request_init(&r);
    r.collective = RINGRUN_COLLECTIVE_ALLGATHER;
    r.send = arrived->data();
    r.recv = arrived->data() + 1;
    r.count = 1;
    r.dtype = RINGRUN_INT64;
    submit(r, "ringrun.join", [context, done, arrived, last](int status, const std::string& message) {
      if (status == RINGRUN_OK) {
        const auto latest = std::max_element(arrived->begin() + 1, arrived->end());
        last->scalar<std::int32_t>()() = static_cast<std::int32_t>(latest - (arrived->begin() + 1));
      }
      finish(context, done, status, message);
    });
  }
};

class BarrierKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    ringrun_request r;
    ringrun_request_init(&r);
    r.collective = RINGRUN_COLLECTIVE_BARRIER;
    submit(r, engine_name(), [context, done](int status, const std::string& message) {
      finish(context, done, status, message);
    });
  }
};

// A query of the runtime as a scalar int32, read when the op runs.
template <int (*Query)()>
class QueryKernel : public tf::OpKernel {
 public:
  explicit QueryKernel(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, refuse_process_sets(context));
  }

  void Compute(OpKernelContext* context) override {
    const int value = Query();
    OP_REQUIRES(context, value >= 0,
                absl::FailedPreconditionError("ringrun is not initialized: call ringrun.tensorflow.init() first"));
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<std::int32_t>()() = value;
  }
};

int included() { return ringrun_transport_name() ? 1 : -1; }

}  // namespace

REGISTER_KERNEL_BUILDER(Name("RingrunJoin").Device(tf::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunBarrier").Device(tf::DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunSize").Device(tf::DEVICE_CPU), QueryKernel<ringrun_size>);
REGISTER_KERNEL_BUILDER(Name("RingrunLocalSize").Device(tf::DEVICE_CPU), QueryKernel<ringrun_local_size>);
REGISTER_KERNEL_BUILDER(Name("RingrunRank").Device(tf::DEVICE_CPU), QueryKernel<ringrun_rank>);
REGISTER_KERNEL_BUILDER(Name("RingrunLocalRank").Device(tf::DEVICE_CPU), QueryKernel<ringrun_local_rank>);
REGISTER_KERNEL_BUILDER(Name("RingrunProcessSetIncluded").Device(tf::DEVICE_CPU), QueryKernel<included>);

}  // namespace ringrun::tensorflow

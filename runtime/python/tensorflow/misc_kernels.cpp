// join, barrier and the queries as ops.
#include "kernel_support.hpp"
#include "tensorflow/core/framework/op_kernel.h"

namespace ringrun::tensorflow {

namespace {

using tf::OpKernelConstruction;
using tf::OpKernelContext;

// The engine's join (RINGRUN_COLLECTIVE_JOIN): until every rank has joined, this rank stands in
// for the allreduces the others still submit; completes with the rank that joined last, which the
// engine writes into the output.
class JoinKernel : public tf::AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    tf::Tensor* last = nullptr;
    OP_REQUIRES_OK_ASYNC(context, context->allocate_output(0, tf::TensorShape({}), &last), done);
    static_assert(sizeof(int) == sizeof(std::int32_t), "the engine writes an int into the int32 output");
    ringrun_request r;
    ringrun_request_init(&r);
    r.collective = RINGRUN_COLLECTIVE_JOIN;
    r.recv = last->scalar<std::int32_t>().data();
    submit(r, "ringrun.join", [context, done](int status, const std::string& message) {
      if (status != RINGRUN_OK) context->SetStatus(engine_status(status, message));
      done();
    });
  }
};

class BarrierKernel : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(context, check_initialized(), done);
    const std::vector<std::int64_t> no_dims;
    ringrun_request r = engine_request(RINGRUN_COLLECTIVE_BARRIER, process_set_id(), no_dims);
    submit(r, engine_name(), [context, done](int status, const std::string& message) {
      finish(context, done, status, message);
    });
  }
};

// A query of the runtime about a process set (attribute process_set_id; 0 where the op has
// none), as a scalar int32 read when the op runs.
template <int (*Query)(int process_set)>
class QueryKernel : public tf::OpKernel {
 public:
  explicit QueryKernel(OpKernelConstruction* context) : OpKernel(context) {
    std::int64_t process_set_id = 0;
    if (context->HasAttr("process_set_id")) OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &process_set_id));
    process_set_id_ = static_cast<int>(process_set_id);
  }

  void Compute(OpKernelContext* context) override {
    OP_REQUIRES_OK(context, check_initialized());
    const int value = Query(process_set_id_);
    OP_REQUIRES(context, value >= 0, absl::InvalidArgumentError(ringrun_last_error()));
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<std::int32_t>()() = value;
  }

 private:
  int process_set_id_ = 0;
};

int local_size(int) { return ringrun_local_size(); }
int rank(int) { return ringrun_rank(); }
int local_rank(int) { return ringrun_local_rank(); }

}  // namespace

REGISTER_KERNEL_BUILDER(Name("RingrunJoin").Device(tf::DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunBarrier").Device(tf::DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("RingrunSize").Device(tf::DEVICE_CPU), QueryKernel<ringrun_process_set_size>);
REGISTER_KERNEL_BUILDER(Name("RingrunLocalSize").Device(tf::DEVICE_CPU), QueryKernel<local_size>);
REGISTER_KERNEL_BUILDER(Name("RingrunRank").Device(tf::DEVICE_CPU), QueryKernel<rank>);
REGISTER_KERNEL_BUILDER(Name("RingrunLocalRank").Device(tf::DEVICE_CPU), QueryKernel<local_rank>);
REGISTER_KERNEL_BUILDER(Name("RingrunProcessSetIncluded").Device(tf::DEVICE_CPU),
                        QueryKernel<ringrun_process_set_included>);

}  // namespace ringrun::tensorflow

// Shared pieces of the kernels (kernel_support.hpp).
#include "kernel_support.hpp"

#include <cstdint>
#include <type_traits>

#include "tensorflow/core/framework/types.h"

namespace ringrun::tensorflow {

std::optional<ringrun_dtype> reducible_dtype(tf::DataType dtype) {
  switch (dtype) {
    case tf::DT_FLOAT: return RINGRUN_FLOAT32;
    case tf::DT_DOUBLE: return RINGRUN_FLOAT64;
    case tf::DT_HALF: return RINGRUN_FLOAT16;
    case tf::DT_BFLOAT16: return RINGRUN_BFLOAT16;
    case tf::DT_INT32: return RINGRUN_INT32;
    case tf::DT_INT64: return RINGRUN_INT64;
    case tf::DT_UINT8: return RINGRUN_UINT8;
    case tf::DT_INT8: return RINGRUN_INT8;
    case tf::DT_INT16: return RINGRUN_INT16;
    case tf::DT_BOOL: return RINGRUN_BOOL;
    default: return std::nullopt;
  }
}

std::optional<ringrun_dtype> movable_dtype(tf::DataType dtype) {
  switch (dtype) {
    case tf::DT_UINT16: return RINGRUN_INT16;
    case tf::DT_UINT32: return RINGRUN_INT32;
    case tf::DT_UINT64: return RINGRUN_INT64;
    default: return reducible_dtype(dtype);
  }
}

absl::Status engine_status(int code, const std::string& message) {
  switch (code) {
    case RINGRUN_OK: return absl::OkStatus();
    case RINGRUN_ERR_MISMATCH: return absl::FailedPreconditionError(message);
    case RINGRUN_ERR_INVALID_ARGUMENT: return absl::InvalidArgumentError(message);
    case RINGRUN_ERR_NOT_INITIALIZED: return absl::FailedPreconditionError(message);
    case RINGRUN_ERR_TIMEOUT: return absl::DeadlineExceededError(message);
    default: return absl::UnknownError(message);
  }
}

namespace {

template <typename T>
void scale_elements(const T* in, T* out, std::int64_t n, double factor) {
  if constexpr (std::is_integral_v<T>) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(in[i]) * factor);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const T f = static_cast<T>(factor);
    for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] * f;
  } else {  // Eigen::half, bfloat16
    const auto f = static_cast<float>(factor);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<float>(in[i]) * f);
  }
}

template <typename T>
void scale_tensor(const tf::Tensor& in, tf::Tensor* out, double factor) {
  scale_elements(in.flat<T>().data(), out->flat<T>().data(), in.NumElements(), factor);
}

}  // namespace

absl::Status scale_into(const tf::Tensor& in, tf::Tensor* out, double factor) {
  switch (in.dtype()) {
    case tf::DT_FLOAT: scale_tensor<float>(in, out, factor); break;
    case tf::DT_DOUBLE: scale_tensor<double>(in, out, factor); break;
    case tf::DT_HALF: scale_tensor<Eigen::half>(in, out, factor); break;
    case tf::DT_BFLOAT16: scale_tensor<tf::bfloat16>(in, out, factor); break;
    case tf::DT_INT32: scale_tensor<std::int32_t>(in, out, factor); break;
    case tf::DT_INT64: scale_tensor<std::int64_t>(in, out, factor); break;
    case tf::DT_UINT8: scale_tensor<std::uint8_t>(in, out, factor); break;
    case tf::DT_INT8: scale_tensor<std::int8_t>(in, out, factor); break;
    case tf::DT_INT16: scale_tensor<std::int16_t>(in, out, factor); break;
    default:
      return absl::InvalidArgumentError("prescale_factor/postscale_factor: a " + tf::DataTypeString(in.dtype()) +
                                        " tensor cannot be scaled; use a numeric dtype or a factor of 1");
  }
  return absl::OkStatus();
}

std::vector<std::int64_t> engine_dims(const tf::TensorShape& shape) {
  std::vector<std::int64_t> dims;
  dims.reserve(static_cast<std::size_t>(shape.dims()));
  for (int d = 0; d < shape.dims(); ++d) dims.push_back(shape.dim_size(d));
  return dims;
}

ringrun_request engine_request(ringrun_collective collective, int process_set_id, const std::vector<std::int64_t>& dims) {
  ringrun_request r;
  ringrun_request_init(&r);
  r.collective = collective;
  r.process_set = process_set_id;
  r.shape = dims.data();
  r.ndim = static_cast<int>(dims.size());
  return r;
}

std::int64_t row_elements(const tf::TensorShape& shape) {
  std::int64_t n = 1;
  for (int d = 1; d < shape.dims(); ++d) n *= shape.dim_size(d);
  return n;
}

void start_parts(tf::OpKernelContext* context, tf::AsyncOpKernel::DoneCallback done, int count,
                 const std::function<absl::Status(int part, Completion)>& start_one) {
  if (count == 0) return done();
  Completion all = countdown(static_cast<std::size_t>(count), [context, done](int status, const std::string& message) {
    if (status != RINGRUN_OK) context->SetStatus(engine_status(status, message));
    done();
  });
  for (int i = 0; i < count; ++i) {
    const absl::Status started = start_one(i, all);
    if (!started.ok()) {
      for (int j = i; j < count; ++j) all(RINGRUN_ERR_INVALID_ARGUMENT, std::string(started.message()));
      return;
    }
  }
}

absl::Status check_initialized() {
  if (ringrun_transport_name() != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError("ringrun is not initialized: call ringrun.tensorflow.init() first");
}

namespace {

absl::Status set_query(int value, int* out) {
  if (value >= 0) {
    *out = value;
    return absl::OkStatus();
  }
  if (value == RINGRUN_ERR_NOT_INITIALIZED) return check_initialized();
  return absl::InvalidArgumentError(ringrun_last_error());
}

}  // namespace

absl::Status process_set_size(int process_set_id, int* size) {
  return set_query(ringrun_process_set_size(process_set_id), size);
}

absl::Status process_set_rank(int process_set_id, int* rank) {
  return set_query(ringrun_process_set_rank(process_set_id), rank);
}

CollectiveKernel::CollectiveKernel(tf::OpKernelConstruction* context) : AsyncOpKernel(context) {
  bool ignore_name_scope = false;
  if (context->HasAttr("ignore_name_scope"))
    OP_REQUIRES_OK(context, context->GetAttr("ignore_name_scope", &ignore_name_scope));
  std::int64_t process_set_id = 0;
  if (context->HasAttr("process_set_id")) OP_REQUIRES_OK(context, context->GetAttr("process_set_id", &process_set_id));
  OP_REQUIRES(context, process_set_id >= 0 && process_set_id <= INT32_MAX,
              absl::InvalidArgumentError("process_set_id " + std::to_string(process_set_id) +
                                         " is no process set's id; pass a ProcessSet from hvd.add_process_set()"));
  process_set_id_ = static_cast<int>(process_set_id);
  engine_name_ = name();
  if (ignore_name_scope) {
    const auto slash = engine_name_.find_last_of('/');
    if (slash != std::string::npos) engine_name_ = engine_name_.substr(slash + 1);
  }
}

void CollectiveKernel::finish(tf::OpKernelContext* context, const DoneCallback& done, int status,
                              const std::string& message) {
  if (status != RINGRUN_OK) context->SetStatus(engine_status(status, message));
  done();
}

}  // namespace ringrun::tensorflow

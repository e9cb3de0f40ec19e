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

namespace {

std::string type_name(int code) { return tf::DataTypeString(static_cast<tf::DataType>(code)); }

}  // namespace

Rows rows_of(const tf::Tensor& tensor, ringrun_dtype dtype) {
  Rows rows;
  rows.data = tensor.tensor_data().data();
  rows.rows = tensor.dims() > 0 ? tensor.dim_size(0) : 1;
  for (int d = 1; d < tensor.dims(); ++d) rows.row_shape.push_back(tensor.dim_size(d));
  rows.dtype = dtype;
  rows.type_code = static_cast<int>(tensor.dtype());
  rows.type_name = type_name;
  return rows;
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

absl::Status refuse_process_sets(tf::OpKernelConstruction* context) {
  if (!context->HasAttr("process_set_id")) return absl::OkStatus();
  std::int64_t process_set_id = 0;
  TF_RETURN_IF_ERROR(context->GetAttr("process_set_id", &process_set_id));
  if (process_set_id == 0) return absl::OkStatus();
  return absl::UnimplementedError("process_set_id " + std::to_string(process_set_id) +
                                  ": ringrun's engine does not have process sets yet; use global_process_set");
}

CollectiveKernel::CollectiveKernel(tf::OpKernelConstruction* context) : AsyncOpKernel(context) {
  bool ignore_name_scope = false;
  if (context->HasAttr("ignore_name_scope"))
    OP_REQUIRES_OK(context, context->GetAttr("ignore_name_scope", &ignore_name_scope));
  OP_REQUIRES_OK(context, refuse_process_sets(context));
  engine_name_ = name();
  if (ignore_name_scope) {
    const auto slash = engine_name_.find_last_of('/');
    if (slash != std::string::npos) engine_name_ = engine_name_.substr(slash + 1);
  }
}

absl::Status CollectiveKernel::check_initialized() {
  if (ringrun_transport_name() != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError("ringrun is not initialized: call ringrun.tensorflow.init() first");
}

void CollectiveKernel::finish(tf::OpKernelContext* context, const DoneCallback& done, int status,
                              const std::string& message) {
  if (status != RINGRUN_OK) context->SetStatus(engine_status(status, message));
  done();
}

}  // namespace ringrun::tensorflow

// ringrun's allreduce runtime: the C++ API, on the same core as the C API (ringrun.h).
//
//   ringrun::Runtime runtime;                      // ringrun_init(); finalize on destruction
//   std::vector<float> grads = ...;
//   runtime.allreduce(std::span(grads), ringrun::Op::average);   // in place
//
// Every failure throws ringrun::RuntimeError carrying the C API's code and message.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "ringrun/ringrun.h"

namespace ringrun {

class RuntimeError : public std::runtime_error {
 public:
  RuntimeError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }  // one of RINGRUN_ERR_*

 private:
  int code_;
};

enum class Op { sum = RINGRUN_SUM, average = RINGRUN_AVERAGE, min = RINGRUN_MIN, max = RINGRUN_MAX,
                product = RINGRUN_PRODUCT, adasum = RINGRUN_ADASUM };

// The dtype of a C++ element type (fp16/bf16 have no standard C++ type: use the void* overloads).
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr ringrun_dtype value = RINGRUN_FLOAT32; };
template <> struct dtype_of<double> { static constexpr ringrun_dtype value = RINGRUN_FLOAT64; };
template <> struct dtype_of<std::int32_t> { static constexpr ringrun_dtype value = RINGRUN_INT32; };
template <> struct dtype_of<std::int64_t> { static constexpr ringrun_dtype value = RINGRUN_INT64; };
template <> struct dtype_of<std::uint8_t> { static constexpr ringrun_dtype value = RINGRUN_UINT8; };

namespace detail {
inline void check(int code) {
  if (code != RINGRUN_OK) throw RuntimeError(code, ringrun_last_error());
}
}  // namespace detail

// Initialises the process-wide runtime (rank discovery, rendezvous, transports) and finalizes it
// when destroyed. One Runtime at a time per process.
class Runtime {
 public:
  Runtime() { detail::check(ringrun_init()); }
  ~Runtime() { ringrun_finalize(); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return ringrun_rank(); }
  int size() const { return ringrun_size(); }
  int local_rank() const { return ringrun_local_rank(); }
  int local_size() const { return ringrun_local_size(); }
  int cross_rank() const { return ringrun_cross_rank(); }
  int cross_size() const { return ringrun_cross_size(); }

  // In place.
  template <typename T> void allreduce(std::span<T> data, Op op = Op::sum) {
    static_assert(!std::is_const_v<T>, "allreduce in place needs a writable span");
    detail::check(ringrun_allreduce(data.data(), data.data(), data.size(), dtype_of<T>::value,
                                    static_cast<ringrun_op>(op)));
  }
  // Out of place; send and recv must have the same length.
  template <typename T> void allreduce(std::span<const T> send, std::span<T> recv, Op op = Op::sum) {
    if (send.size() != recv.size())
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "allreduce: send and recv spans differ in length");
    detail::check(ringrun_allreduce(send.data(), recv.data(), send.size(), dtype_of<T>::value,
                                    static_cast<ringrun_op>(op)));
  }
  template <typename T> void broadcast(std::span<T> data, int root) {
    detail::check(ringrun_broadcast(data.data(), data.size(), dtype_of<T>::value, root));
  }
  // recv holds size() * send.size() elements, rank r's block at r * send.size().
  template <typename T> void allgather(std::span<const T> send, std::span<T> recv) {
    if (recv.size() != send.size() * static_cast<std::size_t>(size()))
      throw RuntimeError(RINGRUN_ERR_INVALID_ARGUMENT, "allgather: recv must hold size() * send.size() elements");
    detail::check(ringrun_allgather(send.data(), send.size(), dtype_of<T>::value, recv.data()));
  }
  void barrier() { detail::check(ringrun_barrier()); }

  // Untyped forms for fp16/bf16 or raw buffers.
  void allreduce(const void* send, void* recv, std::size_t count, ringrun_dtype dtype, Op op) {
    detail::check(ringrun_allreduce(send, recv, count, dtype, static_cast<ringrun_op>(op)));
  }
};

}  // namespace ringrun

// Submission to the engine with completions (engine_ops.hpp).
#include "engine_ops.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

namespace ringrun::tensorflow {

namespace {

// What the engine's callbacks of one op share: allocate (optional) runs before on_done, on the
// same thread, so the reason an allocation failed is still here when the op completes.
struct Callbacks {
  AllocateOutput allocate;
  Completion done;
  std::string allocate_error;
};

void call_completion(void* arg, int status, const char* message) {
  std::unique_ptr<Callbacks> callbacks(static_cast<Callbacks*>(arg));
  if (!callbacks->allocate_error.empty())
    return callbacks->done(status != RINGRUN_OK ? status : RINGRUN_ERR_INTERNAL, callbacks->allocate_error);
  callbacks->done(status, message ? message : "");
}

void* call_allocate(void* arg, std::size_t count, const std::size_t* rows, int nranks) {
  auto* callbacks = static_cast<Callbacks*>(arg);
  // A buffer of no elements may be null to TensorFlow, but a null return fails the op.
  static std::byte empty;
  void* buffer = callbacks->allocate(count, rows, nranks, callbacks->allocate_error);
  if (!callbacks->allocate_error.empty()) return nullptr;
  return buffer || count > 0 ? buffer : &empty;
}

void submit_with(const ringrun_request& request, const std::string& name, std::unique_ptr<Callbacks> owned) {
  ringrun_request r = request;
  r.name = name.c_str();  // copied by the engine
  r.on_done = call_completion;
  r.on_done_arg = owned.get();
  if (owned->allocate) {
    r.allocate = call_allocate;
    r.allocate_arg = owned.get();
  }
  // From here the callbacks belong to the engine: the op may complete before ringrun_submit returns.
  Callbacks* callbacks = owned.release();
  const int code = ringrun_submit(&r, nullptr);
  if (code < 0) {
    std::unique_ptr<Callbacks> refused(callbacks);  // the engine never calls back for a refused op
    refused->done(code, ringrun_last_error());
  }
}

}  // namespace

void submit(const ringrun_request& request, const std::string& name, Completion done) {
  auto callbacks = std::make_unique<Callbacks>();
  callbacks->done = std::move(done);
  submit_with(request, name, std::move(callbacks));
}

void submit_sized(const ringrun_request& request, const std::string& name, AllocateOutput allocate, Completion done) {
  auto callbacks = std::make_unique<Callbacks>();
  callbacks->allocate = std::move(allocate);
  callbacks->done = std::move(done);
  submit_with(request, name, std::move(callbacks));
}

Completion countdown(std::size_t parts, Completion done) {
  struct State {
    std::atomic<std::size_t> left;
    std::mutex mutex;
    int status = RINGRUN_OK;
    std::string message;
    Completion done;
  };
  auto state = std::make_shared<State>();
  state->left.store(parts);
  state->done = std::move(done);
  return [state](int status, const std::string& message) {
    if (status != RINGRUN_OK) {
      std::lock_guard lock(state->mutex);
      if (state->status == RINGRUN_OK) {
        state->status = status;
        state->message = message;
      }
    }
    if (state->left.fetch_sub(1) != 1) return;
    std::lock_guard lock(state->mutex);
    state->done(state->status, state->message);
  };
}

std::pair<std::int64_t, std::int64_t> reducescatter_share(std::int64_t total, int rank, int size) {
  const std::int64_t base = total / size, extra = total % size;
  return {rank * base + std::min<std::int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace ringrun::tensorflow

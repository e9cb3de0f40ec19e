// ringrun._ringrun: the C API (ringrun/ringrun.h) for Python, torch-free. Buffers cross as
// integer addresses with an element count and a dtype code (torch's data_ptr(), numel(), dtype
// mapped in ringrun/torch/); the package above checks them. Every call that may block (init,
// the synchronous collectives, waits) releases the GIL, so other Python threads (autograd's,
// a data loader's) run meanwhile. Failures raise: ValueError for a bad argument or a call
// before init(), ringrun._ringrun.InternalError (a RuntimeError) for everything a peer or the
// collective itself caused (mismatch, dead peer, stall shutdown, timeout).
#include "binding.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pybind11/stl.h>
#include <ringrun/variable_read.hpp>

namespace ringrun::python {

bool initialized() { return ringrun_transport_name() != nullptr; }

// Reads the thread's message before anything else can overwrite it (still without the GIL: the
// same thread made the call).
void check(int code) {
  if (code >= 0) return;
  std::string message = ringrun_last_error();
  if (message.empty()) message = "ringrun error " + std::to_string(code);
  if (code == RINGRUN_ERR_INVALID_ARGUMENT) throw py::value_error(message);
  // Not initialized here: the caller's mistake. (A pending op that a peer's finalize failed
  // carries the same code while this rank's runtime still runs: the peer's doing.)
  if (code == RINGRUN_ERR_NOT_INITIALIZED && !initialized())
    throw py::value_error(message + " (call ringrun.torch.init() first)");
  throw InternalError(code, message);
}

}  // namespace ringrun::python

namespace {

using ringrun::python::check;
using ringrun::python::InternalError;
using ringrun::python::initialized;

const void* as_ptr(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }
void* as_mut(std::uintptr_t address) { return reinterpret_cast<void*>(address); }
ringrun_dtype as_dtype(int dtype) { return static_cast<ringrun_dtype>(dtype); }
ringrun_op as_op(int op) { return static_cast<ringrun_op>(op); }

// A handle crosses as an integer; wait() takes it back (exactly once: the package keeps it).
std::uintptr_t from_handle(ringrun_handle handle) { return reinterpret_cast<std::uintptr_t>(handle); }
ringrun_handle to_handle(std::uintptr_t handle) { return reinterpret_cast<ringrun_handle>(handle); }


int query(int (*getter)()) {
  const int value = getter();
  check(value);
  return value;
}

using Release = py::call_guard<py::gil_scoped_release>;

// The thread that imported the module: Python's main thread, the only one its signal handlers
// run on, and the only one the check below takes the GIL on (never a thread of the runtime's).
std::thread::id g_python_thread;

// ringrun_set_interrupt_check's check: Python's signal handlers get a turn (on the main thread);
// one that raises (KeyboardInterrupt) leaves its exception set and stops the rendezvous.
int python_interrupted(void*) {
  if (std::this_thread::get_id() != g_python_thread || !Py_IsInitialized()) return 0;
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0 ? 1 : 0;
}

// A call that waits at the rendezvous (init, reset), without the GIL; raises the exception of a
// signal handler that interrupted it, else the call's error.
void rendezvous(int (*call)()) {
  int code;
  {
    py::gil_scoped_release release;
    code = call();
  }
  if (code < 0 && PyErr_Occurred()) throw py::error_already_set();
  check(code);
}

void define_queries(py::module_& m) {
  m.def("init", [] { rendezvous(&ringrun_init); },
        "Bootstraps this rank (rendezvous with every other rank); a no-op when already done.");
  m.def("finalize", [] { check(ringrun_finalize()); }, Release(),
        "Collective: fails pending async ops, stops the engine, closes the connections.");
  m.def("is_initialized", &initialized);
  m.def("rank", [] { return query(&ringrun_rank); });
  m.def("size", [] { return query(&ringrun_size); });
  m.def("local_rank", [] { return query(&ringrun_local_rank); });
  m.def("local_size", [] { return query(&ringrun_local_size); });
  m.def("cross_rank", [] { return query(&ringrun_cross_rank); });
  m.def("cross_size", [] { return query(&ringrun_cross_size); });
  m.def("transport_name", []() -> py::object {
    const char* name = ringrun_transport_name();
    if (!name) return py::none();
    return py::str(name);
  });
  // (version code, "") when NCCL loads, (0, why not) otherwise; loads it the first time it is asked.
  m.def("nccl_status", []() -> py::tuple {
    int code = ringrun_nccl_version();
    if (code > 0) return py::make_tuple(code, std::string());
    return py::make_tuple(0, std::string(ringrun_last_error()));
  });
  m.def("start_timeline",
        [](const std::string& filename, bool mark_cycles) { check(ringrun_start_timeline(filename.c_str(), mark_cycles ? 1 : 0)); },
        py::arg("filename"), py::arg("mark_cycles") = false);
  m.def("stop_timeline", [] { check(ringrun_stop_timeline()); });
}

void define_synchronous(py::module_& m) {
  m.def("allreduce",
        [](std::uintptr_t send, std::uintptr_t recv, std::size_t count, int dtype, int op) {
          check(ringrun_allreduce(as_ptr(send), as_mut(recv), count, as_dtype(dtype), as_op(op)));
        },
        Release(), py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"));
  m.def("broadcast",
        [](std::uintptr_t buf, std::size_t count, int dtype, int root) {
          check(ringrun_broadcast(as_mut(buf), count, as_dtype(dtype), root));
        },
        Release(), py::arg("buf"), py::arg("count"), py::arg("dtype"), py::arg("root"));
  m.def("allgather",
        [](std::uintptr_t send, std::size_t count, int dtype, std::uintptr_t recv) {
          check(ringrun_allgather(as_ptr(send), count, as_dtype(dtype), as_mut(recv)));
        },
        Release(), py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("recv"));
  m.def("barrier", [] { check(ringrun_barrier()); }, Release());
  // For scripts/bench-torch: the C side of "a Python allreduce against the C call".
  m.def("time_allreduce",
        [](std::uintptr_t ptr, std::size_t count, int dtype, int op, std::size_t iterations) {
          const auto start = std::chrono::steady_clock::now();
          for (std::size_t i = 0; i < iterations; ++i)
            check(ringrun_allreduce(as_ptr(ptr), as_mut(ptr), count, as_dtype(dtype), as_op(op)));
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        },
        Release(), py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("iterations"),
        "Runs ringrun_allreduce in place on ptr `iterations` times; returns the elapsed seconds (benchmarks).");
}

void define_async(py::module_& m) {
  // Submissions only queue the op (the engine's thread runs it): they keep the GIL.
  m.def("allreduce_async",
        [](const char* name, std::uintptr_t send, std::uintptr_t recv, std::size_t count, int dtype, int op) {
          ringrun_handle handle = nullptr;
          check(ringrun_allreduce_async(name, as_ptr(send), as_mut(recv), count, as_dtype(dtype), as_op(op), &handle));
          return from_handle(handle);
        },
        py::arg("name"), py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"));
  m.def("broadcast_async",
        [](const char* name, std::uintptr_t buf, std::size_t count, int dtype, int root) {
          ringrun_handle handle = nullptr;
          check(ringrun_broadcast_async(name, as_mut(buf), count, as_dtype(dtype), root, &handle));
          return from_handle(handle);
        },
        py::arg("name"), py::arg("buf"), py::arg("count"), py::arg("dtype"), py::arg("root"));
  m.def("allgather_async",
        [](const char* name, std::uintptr_t send, std::size_t count, int dtype, std::uintptr_t recv) {
          ringrun_handle handle = nullptr;
          check(ringrun_allgather_async(name, as_ptr(send), count, as_dtype(dtype), as_mut(recv), &handle));
          return from_handle(handle);
        },
        py::arg("name"), py::arg("send"), py::arg("count"), py::arg("dtype"), py::arg("recv"));
  m.def("test",
        [](std::uintptr_t handle) {
          int done = 0;
          check(ringrun_test(to_handle(handle), &done));
          return done != 0;
        },
        "True once the op has completed (successfully or not); the handle stays valid.");
}

// Elastic mode (ringrun --min-np/--max-np): ringrun.torch.elastic's calls. The ones that talk to the
// launcher's store or re-form the world block, so they release the GIL.
void define_elastic(py::module_& m) {
  m.def("reset", [] { rendezvous(&ringrun_reset); },
        "Leaves this world and joins the next one (same pid, maybe another rank and size). Raises "
        "InternalError with code ERR_REMOVED when this process is not in it (it left, or the job ended), "
        "ERR_RESET when a member was lost while it formed (call it again).");
  m.def("epoch", [] { return query(&ringrun_epoch); },
        "The current world's epoch (0 = the first, and outside elastic mode).");
  m.def("elastic_enabled", [] { return ringrun_elastic_enabled() == 1; },
        "True when ringrun started this process in elastic mode.");
  m.def("elastic_status",
        [] {
          int latest = 0, added = 0;
          check(ringrun_elastic_status(&latest, &added));
          return std::pair<int, bool>(latest, added != 0);
        },
        Release(),
        "(latest published epoch, whether a world since this one added processes): a read of the launcher's store, "
        "not collective.");
  m.def("elastic_leave", [] { check(ringrun_elastic_leave()); }, Release(),
        "Tells the launcher this process leaves at its next reset (which then raises ERR_REMOVED).");
  m.def("elastic_fail", [] { check(ringrun_elastic_fail()); }, Release(),
        "Tells the launcher this process is about to fail: its peers' reset forms the world without it at once.");
  m.attr("ERR_RESET") = static_cast<int>(RINGRUN_ERR_RESET);
  m.attr("ERR_REMOVED") = static_cast<int>(RINGRUN_ERR_REMOVED);
}

// The environment contract (ringrun/environment_variables.hpp) for the Python package, which then
// spells no name, default or bound itself: ringrun's own variables as attributes without their
// prefix, and read() through the table's typed reader.
void define_variables(py::module_& m) {
  namespace v = ringrun::variables;
  py::module_ sub = m.def_submodule(
      "variables", "The environment variables ringrun reads or sets (ringrun(1), ENVIRONMENT). Each of ringrun's own "
                   "is an attribute named without its prefix, e.g. variables.RANK is the name of the rank's variable.");
  for (const v::Variable* var : v::kAll) {
    const std::string_view name = var->name;
    if (name.starts_with(v::kPrefix)) sub.attr(std::string(name.substr(v::kPrefix.size())).c_str()) = var->name;
  }
  sub.def(
      "read",
      [](const std::string& name) -> py::object {
        const v::Variable* var = v::find(name);
        if (var == nullptr) throw py::key_error(name + " is not one of ringrun's variables (ringrun(1), ENVIRONMENT)");
        try {
          switch (var->type) {
            case v::Type::integer: return py::cast(v::read_integer(*var));
            case v::Type::number: return py::cast(v::read_number(*var));
            case v::Type::flag: return py::cast(v::read_flag(*var));
            case v::Type::text: break;
          }
          return py::cast(v::read_text(*var));
        } catch (const ringrun::InputError& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("name"),
      "The variable's value in this process's environment, of its type (str, int, float or bool), else its default; "
      "None when neither. ValueError names a malformed value.");
}

}  // namespace

PYBIND11_MODULE(_ringrun, m) {
  m.doc() = "ringrun's runtime (the C API) for Python; use ringrun.torch.";
  static py::exception<InternalError> internal_error(m, "InternalError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InternalError& e) {
      py::object error = py::handle(internal_error.ptr())(e.what());
      error.attr("code") = e.code;
      PyErr_SetObject(internal_error.ptr(), error.ptr());
    }
  });
  for (auto [name, value] : {std::pair{"FLOAT32", RINGRUN_FLOAT32}, {"FLOAT64", RINGRUN_FLOAT64},
                             {"FLOAT16", RINGRUN_FLOAT16}, {"BFLOAT16", RINGRUN_BFLOAT16}, {"INT32", RINGRUN_INT32},
                             {"INT64", RINGRUN_INT64}, {"UINT8", RINGRUN_UINT8}, {"INT8", RINGRUN_INT8},
                             {"INT16", RINGRUN_INT16}, {"BOOL", RINGRUN_BOOL}})
    m.attr(name) = static_cast<int>(value);
  for (auto [name, value] : {std::pair{"SUM", RINGRUN_SUM}, {"AVERAGE", RINGRUN_AVERAGE}, {"MIN", RINGRUN_MIN},
                             {"MAX", RINGRUN_MAX}, {"PRODUCT", RINGRUN_PRODUCT}, {"ADASUM", RINGRUN_ADASUM}})
    m.attr(name) = static_cast<int>(value);
  define_queries(m);
  define_synchronous(m);
  define_async(m);
  ringrun::python::define_submission(m);
  define_elastic(m);
  define_variables(m);
  g_python_thread = std::this_thread::get_id();
  ringrun_set_interrupt_check(&python_interrupted, nullptr);
}

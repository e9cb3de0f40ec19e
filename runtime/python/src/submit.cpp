// ringrun._ringrun's engine calls: the general submission (ringrun_submit), outputs whose size
// the engine learns at run time, and waits that let Python's signal handlers run. Every wait
// releases the GIL and wakes at least every kWaitSliceMs to run PyErr_CheckSignals(), so Ctrl-C
// (or any handler that raises) reaches a rank blocked in a collective: the exception propagates
// and the op stays pending (shutdown() still waits for it).
#include "binding.hpp"

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace ringrun::python {
namespace {

constexpr int kWaitSliceMs = 100;

// The output of an op whose size only the engine learns (an allgather of different first
// dimensions, an alltoall): filled on the engine's thread by allocate(), read by Python after the
// wait as a buffer (zero-copy: torch.frombuffer) and the rows each rank contributed.
class Output {
 public:
  explicit Output(std::size_t element) : element_(element) {}
  static void* allocate(void* arg, std::size_t count, const std::size_t* rows, int n) {
    auto* self = static_cast<Output*>(arg);
    self->bytes_ = count * self->element_;
    self->data_.reset(new (std::nothrow) std::byte[std::max<std::size_t>(self->bytes_, 1)]);
    self->rows_.assign(rows, rows + n);
    return self->data_.get();
  }
  py::buffer_info buffer() {
    return py::buffer_info(data_.get(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(bytes_)}, {1});
  }
  std::size_t nbytes() const { return bytes_; }
  const std::vector<std::size_t>& rows() const { return rows_; }

 private:
  std::size_t element_;
  std::size_t bytes_ = 0;
  std::unique_ptr<std::byte[]> data_;
  std::vector<std::size_t> rows_;
};

std::size_t element_size(int dtype) {
  switch (dtype) {
    case RINGRUN_FLOAT64:
    case RINGRUN_INT64: return 8;
    case RINGRUN_FLOAT32:
    case RINGRUN_INT32: return 4;
    case RINGRUN_FLOAT16:
    case RINGRUN_BFLOAT16:
    case RINGRUN_INT16: return 2;
    default: return 1;
  }
}

// ringrun_submit from Python's arguments; returns (handle, Output or None).
py::tuple submit(int collective, std::optional<std::string> name, std::uintptr_t send, std::uintptr_t recv,
                 std::size_t count, int dtype, int op, int root, std::vector<std::int64_t> shape,
                 std::optional<std::vector<std::size_t>> splits, bool variable, int process_set) {
  ringrun_request r;
  ringrun_request_init(&r);
  r.collective = static_cast<ringrun_collective>(collective);
  r.name = name ? name->c_str() : nullptr;
  r.send = reinterpret_cast<const void*>(send);
  r.recv = reinterpret_cast<void*>(recv);
  r.count = count;
  r.dtype = static_cast<ringrun_dtype>(dtype);
  r.op = static_cast<ringrun_op>(op);
  r.root = root;
  r.shape = shape.empty() ? nullptr : shape.data();
  r.ndim = static_cast<int>(shape.size());
  r.splits = splits ? splits->data() : nullptr;
  r.process_set = process_set;
  py::object output = py::none();
  if (variable) {
    output = py::cast(Output(element_size(dtype)));
    r.allocate = &Output::allocate;
    r.allocate_arg = output.cast<Output*>();
  }
  ringrun_handle handle = nullptr;
  check(ringrun_submit(&r, &handle));
  return py::make_tuple(reinterpret_cast<std::uintptr_t>(handle), output);
}

int checked(int value) {
  check(value);
  return value;
}

// Waits for the op in slices, giving signal handlers a turn between them; releases the handle
// once done and raises the op's error.
void wait_interruptibly(std::uintptr_t handle) {
  for (;;) {
    int done = 0;
    int code;
    {
      py::gil_scoped_release release;
      code = ringrun_wait_for(reinterpret_cast<ringrun_handle>(handle), kWaitSliceMs, &done);
    }
    if (done || code < 0) return check(code);
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace

void define_submission(py::module_& m) {
  py::class_<Output>(m, "Output", py::buffer_protocol(),
                     "The bytes of an op's output that the engine sized (allgather, alltoall), and the rows from "
                     "each rank.")
      .def_buffer(&Output::buffer)
      .def_property_readonly("nbytes", &Output::nbytes)
      .def_property_readonly("rows", &Output::rows);
  m.def("submit", &submit, py::arg("collective"), py::arg("name"), py::arg("send"), py::arg("recv"), py::arg("count"),
        py::arg("dtype"), py::arg("op") = 0, py::arg("root") = 0, py::arg("shape") = std::vector<std::int64_t>{},
        py::arg("splits") = py::none(), py::arg("variable") = false, py::arg("process_set") = 0,
        "Queues a collective (ringrun_submit); returns (handle, Output or None). Keeps the GIL: it only queues.");
  m.def("wait", &wait_interruptibly,
        "Waits for the op and releases its handle; raises its error. Signal handlers run every 100 ms meanwhile "
        "(KeyboardInterrupt leaves the op pending and the handle valid).");
  m.def("join",
        [] {
          // On the heap: an interrupted wait leaves the join pending, and the engine writes here later.
          auto last = std::make_unique<int>(-1);
          ringrun_request r;
          ringrun_request_init(&r);
          r.collective = RINGRUN_COLLECTIVE_JOIN;
          r.recv = last.get();
          ringrun_handle handle = nullptr;
          check(ringrun_submit(&r, &handle));
          try {
            wait_interruptibly(reinterpret_cast<std::uintptr_t>(handle));
          } catch (const py::error_already_set&) {
            (void)last.release();  // still the engine's to write
            throw;
          }
          return *last;
        },
        "Horovod's join: stands in for the other ranks' allreduces until every rank has joined; returns the rank "
        "that joined last.");
  m.def("add_process_set",
        [](const std::vector<int>& ranks) {
          int id;
          {
            py::gil_scoped_release release;
            id = ringrun_add_process_set(ranks.data(), static_cast<int>(ranks.size()));
          }
          check(id);
          return id;
        },
        "Collective over every rank: registers a process set, returns its id.");
  m.def("remove_process_set",
        [](int id) {
          int code;
          {
            py::gil_scoped_release release;
            code = ringrun_remove_process_set(id);
          }
          if (code == RINGRUN_ERR_INVALID_ARGUMENT) return false;
          check(code);
          return true;
        },
        "Collective over every rank: removes a process set; False when there is no such set.");
  m.def("process_set_size", [](int id) { return checked(ringrun_process_set_size(id)); });
  m.def("process_set_rank", [](int id) { return checked(ringrun_process_set_rank(id)); });
  m.def("process_set_included", [](int id) { return checked(ringrun_process_set_included(id)) == 1; });
  // The collectives of ringrun.h's one list: ALLREDUCE, ... as submit()'s kinds, and
  // COLLECTIVE_NAMES (kind -> "allreduce") for the op names Horovod gives ("allreduce.grad.fc1").
  py::dict names;
#define RINGRUN_PYTHON_COLLECTIVE(NAME, name, value, agree) \
  m.attr(#NAME) = static_cast<int>(RINGRUN_COLLECTIVE_##NAME);  \
  names[py::int_(static_cast<int>(RINGRUN_COLLECTIVE_##NAME))] = #name;
  RINGRUN_COLLECTIVES(RINGRUN_PYTHON_COLLECTIVE)
#undef RINGRUN_PYTHON_COLLECTIVE
  m.attr("JOIN") = static_cast<int>(RINGRUN_COLLECTIVE_JOIN);
  m.attr("COLLECTIVE_NAMES") = names;
}

}  // namespace ringrun::python

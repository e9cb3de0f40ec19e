// ringrun._ringrun's parts (binding.cpp: the module, queries, synchronous calls; submit.cpp: the
// engine's submissions and waits): what they share.
#pragma once

#include <stdexcept>
#include <string>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "ringrun/ringrun.h"

namespace py = pybind11;

namespace ringrun::python {

// Raised for every error a collective reports that is not the caller's argument (a peer, the
// collective, the engine): the Python side exports it as InternalError/HorovodInternalError.
struct InternalError : std::runtime_error {
  int code;
  InternalError(int c, const std::string& message) : std::runtime_error(message), code(c) {}
};

// Raises the C API's error for a negative code: ValueError for a bad argument or a call before
// init(), InternalError otherwise.
void check(int code);

void define_submission(py::module_& m);

}  // namespace ringrun::python

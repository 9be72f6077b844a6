// NB_MODULE(_bumblebee): the native half of the Python package. bb::Error
// becomes bumblebee.Error (a RuntimeError) carrying the library's message.
#include "bumblebee/core/error.h"
#include "python/src/bindings.h"

NB_MODULE(_bumblebee, m) {
  m.doc() = "Bumblebee's runtime API (native part; use the bumblebee package)";
  nanobind::exception<bb::Error>(m, "Error", PyExc_RuntimeError);
  bb::python::bind_config(m);
  bb::python::bind_runtime(m);
}

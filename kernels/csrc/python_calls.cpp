// Direct Python entry points for the forward ops: the same dispatcher call as torch.ops.stepscope.<op>, without
// the boxed call that torch.ops makes from Python (arguments matched against the schema at every call).
//
// They go through the dispatcher (c10::TypedOperatorHandle::call), so autograd (autograd.cpp), the device
// kernels, fake tensors and every other dispatch key behave exactly as through torch.ops; the GIL is released
// for the call, as torch's own ops do. kernels/ops.py uses them in eager mode only: under torch.compile the
// wrappers call torch.ops.stepscope.*, which Dynamo traces.
#include <torch/extension.h>

#include "dispatch.h"
#include "elementwise.h"

namespace {

using stepscope::handle;

at::Tensor add_relu(const at::Tensor& a, const at::Tensor& b) { return handle<stepscope::AddReluOp>().call(a, b); }

at::Tensor add(const at::Tensor& a, const at::Tensor& b) { return handle<stepscope::AddOp>().call(a, b); }

at::Tensor relu(const at::Tensor& x) { return handle<stepscope::ReluOp>().call(x); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "stepscope ops, called from Python without torch.ops' boxing (eager mode)";
  m.def("add_relu", &add_relu, py::call_guard<py::gil_scoped_release>());
  m.def("add", &add, py::call_guard<py::gil_scoped_release>());
  m.def("relu", &relu, py::call_guard<py::gil_scoped_release>());
}

// Schemas and per-device kernel registration for every op in ElementwiseOps (elementwise.h).
//
// One table for all devices: ops.cpp calls define_ops (schemas) and impl_ops<Cpu> (CPU kernels),
// cuda/elementwise.cu calls impl_ops<Cuda>. A device is a struct with
//     template <class Op> static void run(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in);
// writing Op(in...) into out; checks.h wraps it into the functional and the _out entry points.
//
// The schemas come from each functor's kName and kArgs:
//     add_relu(Tensor a, Tensor b) -> Tensor
//     add_relu_out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()
#pragma once

#include <string>

#include <torch/library.h>

#include "checks.h"
#include "elementwise.h"

namespace stepscope {

template <class Op>
std::string schema_arguments() {
  std::string args;
  for (int k = 0; k < Op::kInputs; ++k) args += std::string(k ? ", " : "") + "Tensor " + Op::kArgs[k];
  return args;
}

template <class Op>
std::string out_name() {
  return std::string(Op::kName) + "_out";
}

template <class Op>
void define_op(torch::Library& m) {
  m.def((std::string(Op::kName) + "(" + schema_arguments<Op>() + ") -> Tensor").c_str());
  m.def((out_name<Op>() + "(" + schema_arguments<Op>() + ", *, Tensor(a!) out) -> ()").c_str());
}

template <class... Ops>
void define_ops(torch::Library& m, OpList<Ops...>) {
  (define_op<Ops>(m), ...);
}

// The functional and the _out kernel of Op on Device, with the C++ signature its schema needs.
template <class Device, class Op>
void impl_op(torch::Library& m) {
  constexpr Runner<Op> run = &Device::template run<Op>;
  if constexpr (Op::kInputs == 1) {
    m.impl(Op::kName, &unary<Op, run>);
    m.impl(out_name<Op>().c_str(), &unary_out<Op, run>);
  } else {
    static_assert(Op::kInputs == 2, "ops take one or two tensors");
    m.impl(Op::kName, &binary<Op, run>);
    m.impl(out_name<Op>().c_str(), &binary_out<Op, run>);
  }
}

template <class Device, class... Ops>
void impl_ops(torch::Library& m, OpList<Ops...>) {
  (impl_op<Device, Ops>(m), ...);
}

}  // namespace stepscope

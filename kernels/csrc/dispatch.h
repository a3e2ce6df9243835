// stepscope::<Op::kName> as a typed dispatcher handle, for C++ that calls our ops through the whole
// dispatcher (autograd.cpp's backward formulas, python_calls.cpp's Python entry points). Op is a functor
// of ElementwiseOps (elementwise.h): its name and number of Tensor inputs pick the schema.
#pragma once

#include <string>

#include <ATen/core/dispatch/Dispatcher.h>

namespace stepscope {

template <int N>
struct Signature;
template <>
struct Signature<1> {
  using type = at::Tensor(const at::Tensor&);
};
template <>
struct Signature<2> {
  using type = at::Tensor(const at::Tensor&, const at::Tensor&);
};

// Looked up once per op and process.
template <class Op>
const c10::TypedOperatorHandle<typename Signature<Op::kInputs>::type>& handle() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(("stepscope::" + std::string(Op::kName)).c_str(), "")
                             .typed<typename Signature<Op::kInputs>::type>();
  return op;
}

}  // namespace stepscope

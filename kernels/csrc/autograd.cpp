// Autograd kernels of every op in ElementwiseOps (elementwise.h), in C++.
//
// Registered for the Autograd dispatch key, so `torch.ops.stepscope.add_relu(a, b)` and its
// backward never enter Python: the op's Autograd kernel runs OpFunction<Op> (a
// torch::autograd::Function), whose forward calls the op below autograd (the CPU or CUDA kernel)
// and whose backward is Derivative<Op>, written with stepscope ops called through the dispatcher.
// Those ops have autograd kernels too, so every backward is itself differentiable (double backward,
// gradgradcheck) and runs our kernels on whichever device the tensors are on.
//
// Under torch.compile, AOTAutograd traces these kernels like any other: the forward and backward
// graphs hold the ops that forward and backward call (Inductor then decomposes them, see
// kernels/decompositions.py).
#include <array>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "elementwise.h"

namespace stepscope {

using at::Tensor;
using torch::autograd::variable_list;

template <int N>
struct Signature;
template <>
struct Signature<1> {
  using type = Tensor(const Tensor&);
};
template <>
struct Signature<2> {
  using type = Tensor(const Tensor&, const Tensor&);
};

// stepscope::<Op::kName> as a typed dispatcher handle, looked up once.
template <class Op>
const c10::TypedOperatorHandle<typename Signature<Op::kInputs>::type>& handle() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow(("stepscope::" + std::string(Op::kName)).c_str(), "")
                             .typed<typename Signature<Op::kInputs>::type>();
  return op;
}

// Calls stepscope::<Op::kName> through the whole dispatcher (autograd included).
template <class Op, class... T>
Tensor call(const T&... in) {
  return handle<Op>().call(in...);
}

// Derivative<Op>: what the forward keeps for backward (`save`, from the inputs and the output), and
// the gradients of the inputs given the output's gradient (`backward`, one tensor per input; an
// undefined Tensor where the input needs none or the gradient is zero).
template <class Op>
struct Derivative;  // every op in ElementwiseOps needs one

template <int N>
using Needs = std::array<bool, N>;

template <>
struct Derivative<AddOp> {
  static variable_list save(const variable_list&, const Tensor&) { return {}; }
  static variable_list backward(const variable_list&, const Tensor& grad, Needs<2>) { return {grad, grad}; }
};

template <>
struct Derivative<ReluOp> {
  static variable_list save(const variable_list&, const Tensor& result) { return {result}; }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<1>) {
    return {call<ReluBackwardOp>(grad, saved[0])};
  }
};

template <>
struct Derivative<AddReluOp> {
  static variable_list save(const variable_list&, const Tensor& result) { return {result}; }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<2>) {
    const Tensor g = call<ReluBackwardOp>(grad, saved[0]);
    return {g, g};
  }
};

template <>
struct Derivative<SquareOp> {
  static variable_list save(const variable_list& in, const Tensor&) { return {in[0]}; }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<1>) {
    return {call<SquareBackwardOp>(grad, saved[0])};
  }
};

// relu_backward(g, r) = g * [r > 0]: linear in g; its derivative in r is zero almost everywhere
// (as for torch's threshold_backward).
template <>
struct Derivative<ReluBackwardOp> {
  static variable_list save(const variable_list& in, const Tensor&) { return {in[1]}; }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<2> needs) {
    return {needs[0] ? call<ReluBackwardOp>(grad, saved[0]) : Tensor(), Tensor()};
  }
};

// square_backward(g, x) = 2 g x, symmetric in g and x: each partial is square_backward(grad, other).
template <>
struct Derivative<SquareBackwardOp> {
  static variable_list save(const variable_list& in, const Tensor&) { return {in[0], in[1]}; }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<2> needs) {
    return {needs[0] ? call<SquareBackwardOp>(grad, saved[1]) : Tensor(),
            needs[1] ? call<SquareBackwardOp>(grad, saved[0]) : Tensor()};
  }
};

// The autograd node of one call of Op (shows as CppNode<stepscope::OpFunction<...>> in grad_fn).
template <class Op>
struct OpFunction : public torch::autograd::Function<OpFunction<Op>> {
  template <class... T>
  static Tensor forward(torch::autograd::AutogradContext* ctx, const T&... in) {
    Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;  // straight to the CPU/CUDA kernel
      out = handle<Op>().call(in...);
    }
    ctx->save_for_backward(Derivative<Op>::save({in...}, out));
    return out;
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    Needs<Op::kInputs> needs;
    for (int k = 0; k < Op::kInputs; ++k) needs[k] = ctx->needs_input_grad(k);
    return Derivative<Op>::backward(ctx->get_saved_variables(), grads[0], needs);
  }
};

// The Autograd kernel. Without a gradient to record (grad mode off, or no input requires grad) it
// skips the autograd node, which Function::apply would build anyway, and goes straight below
// autograd as generated ATen kernels do: that saves about as much as the rest of the call costs.
// (Forward-mode AD is not supported by these ops either way.)
template <class Op, class... T>
Tensor autograd_kernel(const T&... in) {
  if (!at::GradMode::is_enabled() || !(in.requires_grad() || ...)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return handle<Op>().call(in...);
  }
  return OpFunction<Op>::apply(in...);
}

template <class Op>
Tensor autograd_unary(const Tensor& x) {
  return autograd_kernel<Op>(x);
}

template <class Op>
Tensor autograd_binary(const Tensor& a, const Tensor& b) {
  return autograd_kernel<Op>(a, b);
}

template <class Op>
void impl_autograd(torch::Library& m) {
  if constexpr (Op::kInputs == 1) {
    m.impl(Op::kName, &autograd_unary<Op>);
  } else {
    m.impl(Op::kName, &autograd_binary<Op>);
  }
}

template <class... Ops>
void impl_autograd_all(torch::Library& m, OpList<Ops...>) {
  (impl_autograd<Ops>(m), ...);
}

}  // namespace stepscope

// Only the functional ops: the _out ops mutate `out` and do not support autograd.
TORCH_LIBRARY_IMPL(stepscope, Autograd, m) {
  stepscope::impl_autograd_all(m, stepscope::ElementwiseOps{});
}

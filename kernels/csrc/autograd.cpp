// Autograd kernels of every op in ElementwiseOps (elementwise.h), in C++.
//
// Registered for the Autograd dispatch key, so `torch.ops.stepscope.add_relu(a, b)` and its
// backward never enter Python. The Autograd kernel does what ATen's generated autograd kernels do
// (torch/csrc/autograd/generated/VariableType*.cpp): it calls the op below autograd (the CPU or CUDA
// kernel) and, when a gradient is to be recorded, links one OpBackward<Op> node into the graph and
// saves what Derivative<Op> needs. That costs about what a native op's autograd costs; a
// torch::autograd::Function (CppNode) costs more per call (input and output metadata, output
// wrapping, a context object).
//
// Every backward calls stepscope ops through the dispatcher; those have autograd kernels too, so
// each backward is itself differentiable (double backward, gradgradcheck) and runs our kernels on
// whichever device the tensors are on.
//
// Under torch.compile, AOTAutograd traces these kernels like any other: the forward and backward
// graphs hold the ops that forward and backward call (Inductor then decomposes them, see
// kernels/decompositions.py).
#include <array>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include "dispatch.h"
#include "elementwise.h"

namespace stepscope {

using at::Tensor;
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

using Saved = std::vector<SavedVariable>;

// `tensors` kept for backward; `is_output` says they are the op's result (saved without its
// grad_fn, which is the node saving it, so that node and tensor do not keep each other alive).
Saved keep(std::initializer_list<Tensor> tensors, bool is_output) {
  Saved out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.emplace_back(t, is_output);
  return out;
}

// Calls stepscope::<Op::kName> through the whole dispatcher (autograd included).
template <class Op, class... T>
Tensor call(const T&... in) {
  return handle<Op>().call(in...);
}

// Derivative<Op>: what the forward keeps for backward (`save`, from the inputs and the output, in
// the order `backward` receives them), and the gradients of the inputs given the output's gradient (`backward`, one tensor per input; an
// undefined Tensor where the input needs none or the gradient is zero).
template <class Op>
struct Derivative;  // every op in ElementwiseOps needs one

template <int N>
using Needs = std::array<bool, N>;

template <>
struct Derivative<AddOp> {
  static Saved save(const variable_list&, const Tensor&) { return {}; }
  static variable_list backward(const variable_list&, const Tensor& grad, Needs<2>) { return {grad, grad}; }
};

template <>
struct Derivative<ReluOp> {
  static Saved save(const variable_list&, const Tensor& result) { return keep({result}, true); }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<1>) {
    return {call<ReluBackwardOp>(grad, saved[0])};
  }
};

template <>
struct Derivative<AddReluOp> {
  static Saved save(const variable_list&, const Tensor& result) { return keep({result}, true); }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<2>) {
    const Tensor g = call<ReluBackwardOp>(grad, saved[0]);
    return {g, g};
  }
};

template <>
struct Derivative<SquareOp> {
  static Saved save(const variable_list& in, const Tensor&) { return keep({in[0]}, false); }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<1>) {
    return {call<SquareBackwardOp>(grad, saved[0])};
  }
};

// relu_backward(g, r) = g * [r > 0]: linear in g; its derivative in r is zero almost everywhere
// (as for torch's threshold_backward).
template <>
struct Derivative<ReluBackwardOp> {
  static Saved save(const variable_list& in, const Tensor&) { return keep({in[1]}, false); }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<2> needs) {
    return {needs[0] ? call<ReluBackwardOp>(grad, saved[0]) : Tensor(), Tensor()};
  }
};

// square_backward(g, x) = 2 g x, symmetric in g and x: each partial is square_backward(grad, other).
template <>
struct Derivative<SquareBackwardOp> {
  static Saved save(const variable_list& in, const Tensor&) { return keep({in[0], in[1]}, false); }
  static variable_list backward(const variable_list& saved, const Tensor& grad, Needs<2> needs) {
    return {needs[0] ? call<SquareBackwardOp>(grad, saved[1]) : Tensor(),
            needs[1] ? call<SquareBackwardOp>(grad, saved[0]) : Tensor()};
  }
};

// The autograd node of one call of Op: grad_fn of its result, named stepscope::<op>_backward.
template <class Op>
struct OpBackward : public Node {
  Saved saved_;

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!grads[0].defined()) return variable_list(Op::kInputs);
    variable_list saved;
    saved.reserve(saved_.size());
    for (const SavedVariable& s : saved_) saved.push_back(s.unpack(getptr()));
    Needs<Op::kInputs> needs;
    for (int k = 0; k < Op::kInputs; ++k) needs[k] = task_should_compute_output(k);
    return Derivative<Op>::backward(saved, grads[0], needs);
  }

  std::string name() const override { return std::string("stepscope::") + Op::kName + "_backward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (SavedVariable& s : saved_) s.reset_data();
  }
};

// A new node as the graph holds it: torch releases have held nodes by std::shared_ptr (with
// deleteNode, which frees long chains without deep recursion) and, later, by c10::intrusive_ptr.
using NodePtr = decltype(std::declval<Node&>().getptr());

template <class N>
NodePtr new_node() {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>) {
    return std::shared_ptr<N>(new N(), [](N* n) { deleteNode(n); });  // found in torch::autograd (ADL)
  } else {
    return c10::make_intrusive<N>();
  }
}

// The Autograd kernel: the op below autograd, then, when a gradient is to be recorded (grad mode
// on and an input requiring grad), its node: edges to the inputs' grad_fns, the result's history,
// and what backward needs.
template <class Op, class... T>
Tensor autograd_kernel(const T&... in) {
  TORCH_CHECK(!(torch::autograd::isFwGradDefined(in) || ...),
              "stepscope::", Op::kName, " does not support forward-mode AD");
  Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // straight to the CPU/CUDA kernel
    out = handle<Op>().call(in...);
  }
  if (!at::GradMode::is_enabled() || !(in.requires_grad() || ...)) return out;
  NodePtr node = new_node<OpBackward<Op>>();
  node->set_next_edges(torch::autograd::collect_next_edges(in...));
  torch::autograd::set_history(out, node);  // before saving: a saved result refers to its history
  static_cast<OpBackward<Op>*>(node.get())->saved_ = Derivative<Op>::save({in...}, out);
  return out;
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

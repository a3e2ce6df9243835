// The math of every stepscope op, shared by the CPU kernels (ops.cpp) and the CUDA kernels
// (cuda/elementwise.cu): one definition, so the CPU path is the reference for the CUDA path.
// ElementwiseOps (at the end) lists them: every entry gets its schemas, CPU, CUDA and autograd
// kernels from registration.h; see kernels/README.md for adding one.
//
// Each functor names its op (kName, the schema name) and its Tensor arguments (kArgs, the schema's
// argument names, in order).
//
// Each functor maps op-math values to an op-math value (float for fp16/bf16/fp32, double for fp64):
// callers widen the inputs once and round the result once, so fp16/bf16 results are bit-identical
// to eager PyTorch's (which also computes elementwise math in float and rounds once).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define STEPSCOPE_HD __host__ __device__ __forceinline__
#else
#define STEPSCOPE_HD inline
#endif

namespace stepscope {

struct AddOp {
  static constexpr int kInputs = 2;
  static constexpr const char* kName = "add";
  static constexpr const char* kArgs[2] = {"a", "b"};
  template <class T>
  STEPSCOPE_HD T operator()(T a, T b) const { return a + b; }
};

struct ReluOp {
  static constexpr int kInputs = 1;
  static constexpr const char* kName = "relu";
  static constexpr const char* kArgs[1] = {"x"};
  // `x < 0 ? 0 : x` (not `x > 0 ? x : 0`) lets NaN through, as torch.relu does.
  template <class T>
  STEPSCOPE_HD T operator()(T x) const { return x < T(0) ? T(0) : x; }
};

struct AddReluOp {
  static constexpr int kInputs = 2;
  static constexpr const char* kName = "add_relu";
  static constexpr const char* kArgs[2] = {"a", "b"};
  template <class T>
  STEPSCOPE_HD T operator()(T a, T b) const {
    const T s = a + b;
    return s < T(0) ? T(0) : s;
  }
};

struct SquareOp {
  static constexpr int kInputs = 1;
  static constexpr const char* kName = "square";
  static constexpr const char* kArgs[1] = {"x"};
  template <class T>
  STEPSCOPE_HD T operator()(T x) const { return x * x; }
};

// d relu / d x, written with relu's output (as torch's threshold_backward): grad where result > 0.
struct ReluBackwardOp {
  static constexpr int kInputs = 2;
  static constexpr const char* kName = "relu_backward";
  static constexpr const char* kArgs[2] = {"grad", "result"};
  template <class T>
  STEPSCOPE_HD T operator()(T grad, T result) const { return result > T(0) ? grad : T(0); }
};

// d square / d x = 2 x; times the incoming gradient.
struct SquareBackwardOp {
  static constexpr int kInputs = 2;
  static constexpr const char* kName = "square_backward";
  static constexpr const char* kArgs[2] = {"grad", "x"};
  template <class T>
  STEPSCOPE_HD T operator()(T grad, T x) const { return T(2) * x * grad; }
};

// Applies Op to one element's input values in op-math (Acc), rounding once on the way out.
template <class Op, class Acc, class T>
STEPSCOPE_HD T apply(const T (&v)[Op::kInputs]) {
  if constexpr (Op::kInputs == 1) {
    return static_cast<T>(Op{}(static_cast<Acc>(v[0])));
  } else {
    return static_cast<T>(Op{}(static_cast<Acc>(v[0]), static_cast<Acc>(v[1])));
  }
}

// A list of functor types (a template parameter pack, walked with fold expressions).
template <class... Ops>
struct OpList {};

// Every elementwise op of the library. Adding a functor here defines stepscope::<kName> and
// stepscope::<kName>_out and registers their CPU, CUDA and autograd kernels; autograd.cpp must
// then give its derivative (a compile error says so otherwise).
using ElementwiseOps = OpList<AddOp, ReluOp, AddReluOp, SquareOp, ReluBackwardOp, SquareBackwardOp>;

}  // namespace stepscope

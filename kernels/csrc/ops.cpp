// stepscope ops: the library (TORCH_LIBRARY: every schema) and the CPU kernels.
//
// Built and loaded by kernels/loader.py (torch.utils.cpp_extension.load). The op table is
// ElementwiseOps in elementwise.h; registration.h turns it into schemas and per-device kernels.
// Elsewhere: the CUDA kernels (cuda/elementwise.cu, compiled in only where CUDA is available), the
// autograd kernels (autograd.cpp), the kernel-version ops (versions.cpp), and in Python the fake
// impls and Inductor decompositions (kernels/_registrations.py, kernels/decompositions.py).
// Every op comes as a functional op that allocates its output and an `_out` op that writes into a
// given tensor (used by the tests to poison outputs first, and by CUDA-graph code with static buffers).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "checks.h"
#include "elementwise.h"
#include "registration.h"

// The Python module holding the fake impls (torch.library.register_fake), which torch imports by
// itself when it needs one before we have. kernels/loader.py passes the package this copy of the
// sources is imported as ("kernels", or "stepscope.kernels" once packaged so): -DSTEPSCOPE_PYTHON_PACKAGE.
#ifndef STEPSCOPE_PYTHON_PACKAGE
#define STEPSCOPE_PYTHON_PACKAGE kernels
#endif
#define STEPSCOPE_STR2(x) #x
#define STEPSCOPE_STR(x) STEPSCOPE_STR2(x)
static constexpr const char* kPythonModule = STEPSCOPE_STR(STEPSCOPE_PYTHON_PACKAGE) "._registrations";

namespace stepscope {

// Contiguous or not, the CPU walks one flat array: operands that are not laid out like the output
// are first copied into tensors that are (the slow path; correct for any strides and offsets).
template <class Op>
void run_cpu(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in) {
  constexpr int N = Op::kInputs;
  if (out.numel() == 0) return;
  const at::Tensor dst = out.is_non_overlapping_and_dense() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
  std::array<at::Tensor, N> src = in;
  for (at::Tensor& t : src) {
    if (!t.is_non_overlapping_and_dense() || !same_layout(t, dst)) t = at::empty_like(dst).copy_(t);
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dst.scalar_type(), "stepscope_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    scalar_t* o = dst.mutable_data_ptr<scalar_t>();
    const scalar_t* p[N];
    for (int k = 0; k < N; ++k) p[k] = src[k].template const_data_ptr<scalar_t>();
    at::parallel_for(0, dst.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      // Local restrict pointers: no aliasing between out and inputs within one chunk, so the
      // compiler vectorizes the loop (it would not through the captured array).
      scalar_t* __restrict__ out_p = o;
      const scalar_t* __restrict__ in0 = p[0];
      const scalar_t* __restrict__ in1 = p[N - 1];
      for (int64_t i = begin; i < end; ++i) {
        scalar_t v[N];
        v[0] = in0[i];
        if constexpr (N == 2) v[N - 1] = in1[i];
        out_p[i] = apply<Op, acc_t>(v);
      }
    });
  });
  if (!dst.is_same(out)) out.copy_(dst);
}

// The CPU as a device of registration.h.
struct Cpu {
  template <class Op>
  static void run(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in) {
    run_cpu<Op>(out, in);
  }
};

}  // namespace stepscope

TORCH_LIBRARY(stepscope, m) {
  m.set_python_module(kPythonModule);
  stepscope::define_ops(m, stepscope::ElementwiseOps{});
}

TORCH_LIBRARY_IMPL(stepscope, CPU, m) {
  stepscope::impl_ops<stepscope::Cpu>(m, stepscope::ElementwiseOps{});
}

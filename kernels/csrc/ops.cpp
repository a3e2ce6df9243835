// stepscope ops: the schemas (TORCH_LIBRARY), the kernel-version registry, and the CPU kernels.
//
// Built and loaded by kernels/build.py (torch.utils.cpp_extension.load); the CUDA kernels live in
// cuda/elementwise.cu and are compiled in only where CUDA is available. Every op comes as a
// functional op that allocates its output and an `_out` op that writes into a given tensor (used
// by the tests to poison outputs first, and by CUDA-graph code with static buffers).
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "checks.h"
#include "elementwise.h"
#include "versions.h"

namespace stepscope {

// ---------------------------------------------------------------- kernel-version registry

struct KernelFamily {
  int count;
  int best;
  std::atomic<int> current;
};

static std::mutex& families_mutex() {
  static std::mutex m;
  return m;
}

static std::map<std::string, std::unique_ptr<KernelFamily>>& families() {
  static std::map<std::string, std::unique_ptr<KernelFamily>> f;  // filled by static initializers
  return f;
}

std::atomic<int>* register_kernel_family(const std::string& family, int count, int best) {
  std::lock_guard<std::mutex> lock(families_mutex());
  auto& slot = families()[family];
  slot.reset(new KernelFamily{count, best, {best}});
  return &slot->current;
}

static KernelFamily& find_family(const std::string& op, const std::string& family) {
  auto it = families().find(family);
  if (it == families().end()) {
    std::string known;
    for (const auto& kv : families()) known += (known.empty() ? "" : ", ") + kv.first;
    TORCH_CHECK(false, op, ": unknown kernel family '", family, "'; known: ",
                known.empty() ? "none (this build has no CUDA kernels)" : known);
  }
  return *it->second;
}

// Returns the number of versions of `family` (they are numbered 1..count).
static int64_t kernel_version_count(const std::string& family) {
  std::lock_guard<std::mutex> lock(families_mutex());
  return find_family("stepscope::kernel_version_count", family).count;
}

// Selects version `version` of `family` (0 = its default, the best) and returns the previous one.
static int64_t set_kernel_version(const std::string& family, int64_t version) {
  std::lock_guard<std::mutex> lock(families_mutex());
  KernelFamily& f = find_family("stepscope::set_kernel_version", family);
  TORCH_CHECK(version >= 0 && version <= f.count, "stepscope::set_kernel_version: family '", family,
              "' has versions 1..", std::to_string(f.count), " (0 selects the default, ", std::to_string(f.best),
              "), got ", std::to_string(version));  // to_string: see checks.h on integers in messages
  return f.current.exchange(version == 0 ? f.best : static_cast<int>(version));
}

// ---------------------------------------------------------------- CPU kernels

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

}  // namespace stepscope

TORCH_LIBRARY(stepscope, m) {
  // Fake (meta) impls and autograd formulas are registered from Python, in this module.
  m.set_python_module("stepscope.kernels._registrations");
  m.def("add(Tensor a, Tensor b) -> Tensor");
  m.def("add_out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()");
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_out(Tensor x, *, Tensor(a!) out) -> ()");
  m.def("add_relu(Tensor a, Tensor b) -> Tensor");
  m.def("add_relu_out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()");
  m.def("square(Tensor x) -> Tensor");
  m.def("square_out(Tensor x, *, Tensor(a!) out) -> ()");
  m.def("relu_backward(Tensor grad, Tensor result) -> Tensor");
  m.def("relu_backward_out(Tensor grad, Tensor result, *, Tensor(a!) out) -> ()");
  m.def("square_backward(Tensor grad, Tensor x) -> Tensor");
  m.def("square_backward_out(Tensor grad, Tensor x, *, Tensor(a!) out) -> ()");
  m.def("kernel_version_count(str family) -> int", &stepscope::kernel_version_count);
  m.def("set_kernel_version(str family, int version) -> int", &stepscope::set_kernel_version);
}

TORCH_LIBRARY_IMPL(stepscope, CPU, m) {
  using namespace stepscope;
  m.impl("add", &binary<AddOp, run_cpu<AddOp>>);
  m.impl("add_out", &binary_out<AddOp, run_cpu<AddOp>>);
  m.impl("relu", &unary<ReluOp, run_cpu<ReluOp>>);
  m.impl("relu_out", &unary_out<ReluOp, run_cpu<ReluOp>>);
  m.impl("add_relu", &binary<AddReluOp, run_cpu<AddReluOp>>);
  m.impl("add_relu_out", &binary_out<AddReluOp, run_cpu<AddReluOp>>);
  m.impl("square", &unary<SquareOp, run_cpu<SquareOp>>);
  m.impl("square_out", &unary_out<SquareOp, run_cpu<SquareOp>>);
  m.impl("relu_backward", &binary<ReluBackwardOp, run_cpu<ReluBackwardOp>>);
  m.impl("relu_backward_out", &binary_out<ReluBackwardOp, run_cpu<ReluBackwardOp>>);
  m.impl("square_backward", &binary<SquareBackwardOp, run_cpu<SquareBackwardOp>>);
  m.impl("square_backward_out", &binary_out<SquareBackwardOp, run_cpu<SquareBackwardOp>>);
}

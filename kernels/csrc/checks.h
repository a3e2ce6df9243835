// Input checks, output allocation and the functional/out entry points shared by the CPU (ops.cpp)
// and CUDA (cuda/elementwise.cu) kernels. kernels/_registrations.py words its fake-tensor errors the
// same way; tests/test_kernels.py asserts the exact text of both.
#pragma once

#include <array>
#include <string>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>

namespace stepscope {

// The dtype as Python spells it ("torch.float32"), so C++ and Python errors read alike.
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kDouble: return "torch.float64";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(t);
  }
}

// Integers in messages go through std::to_string, never through std::ostream: on the device
// machine (GCC 13.3, torch 2.11) formatting an integer with operator<< from this library's code
// crashed with SIGSEGV inside libstdc++'s number formatting, while strings streamed fine.
inline std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

inline bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

// Errors name the op as "stepscope::<name><suffix>" (suffix "" or "_out"); TORCH_CHECK builds the
// message only when the check fails, so the hot path allocates nothing.
inline void check_same(const char* op, const char* suffix, const char* name, const at::Tensor& t, const char* ref_name,
                       const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), "stepscope::", op, suffix, ": argument '", name, "' is on device ", t.device().str(), " but '",
              ref_name, "' is on device ", ref.device().str(), "; they must be on the same device");
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "stepscope::", op, suffix, ": argument '", name, "' has dtype ",
              dtype_name(t.scalar_type()), " but '", ref_name, "' has dtype ", dtype_name(ref.scalar_type()),
              "; they must match (stepscope ops do no type promotion)");
  TORCH_CHECK(t.sizes() == ref.sizes(), "stepscope::", op, suffix, ": argument '", name, "' has shape ", shape_str(t.sizes()), " but '", ref_name,
              "' has shape ", shape_str(ref.sizes()), "; they must match (stepscope ops do not broadcast)");
}

template <class Op>
void check_inputs(const std::array<at::Tensor, Op::kInputs>& in, bool out_variant) {
  const char* suffix = out_variant ? "_out" : "";
  for (int k = 0; k < Op::kInputs; ++k) {
    TORCH_CHECK(supported_dtype(in[k].scalar_type()), "stepscope::", Op::kName, suffix, ": argument '", Op::kArgs[k], "' has dtype ",
                dtype_name(in[k].scalar_type()),
                "; supported dtypes: torch.float32, torch.float16, torch.bfloat16, torch.float64");
    if (k > 0) check_same(Op::kName, suffix, Op::kArgs[k], in[k], Op::kArgs[0], in[0]);
  }
}

template <class Op>
void check_out(const std::array<at::Tensor, Op::kInputs>& in, const at::Tensor& out) {
  check_same(Op::kName, "_out", "out", out, Op::kArgs[0], in[0]);
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, "stepscope::", Op::kName, "_out",
              ": argument 'out' has elements that share memory (e.g. from expand()); "
              "pass a tensor with its own memory for each element");
  for (int k = 0; k < Op::kInputs; ++k) {
    TORCH_CHECK(at::get_overlap_status(out, in[k]) != at::MemOverlapStatus::Partial, "stepscope::", Op::kName, "_out",
                ": argument 'out' partially overlaps argument '", Op::kArgs[k],
                "'; pass a separate tensor or exactly that argument");
  }
}

// Same sizes and, on every dimension longer than 1, the same strides: then element k of one
// tensor's memory holds the same logical element as element k of the other's.
inline bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

// Whether out and every input can be walked as one flat array of out.numel() elements.
template <size_t N>
bool is_flat(const at::Tensor& out, const std::array<at::Tensor, N>& in) {
  if (!out.is_non_overlapping_and_dense()) return false;
  for (const at::Tensor& t : in) {
    if (!t.is_non_overlapping_and_dense() || !same_layout(t, out)) return false;
  }
  return true;
}

// A device's kernel runner: writes Op(in...) into out (shapes, dtypes and devices already checked).
template <class Op>
using Runner = void (*)(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in);

// The functional op allocates its output like the first input (same strides when that input is
// dense, e.g. channels_last stays channels_last), exactly as the fake impl's torch.empty_like does.
template <class Op, Runner<Op> Run>
at::Tensor unary(const at::Tensor& x) {
  check_inputs<Op>({x}, false);
  at::Tensor out = at::empty_like(x);
  Run(out, {x});
  return out;
}

template <class Op, Runner<Op> Run>
void unary_out(const at::Tensor& x, const at::Tensor& out) {
  check_inputs<Op>({x}, true);
  check_out<Op>({x}, out);
  Run(out, {x});
}

template <class Op, Runner<Op> Run>
at::Tensor binary(const at::Tensor& a, const at::Tensor& b) {
  check_inputs<Op>({a, b}, false);
  at::Tensor out = at::empty_like(a);
  Run(out, {a, b});
  return out;
}

template <class Op, Runner<Op> Run>
void binary_out(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  check_inputs<Op>({a, b}, true);
  check_out<Op>({a, b}, out);
  Run(out, {a, b});
}

}  // namespace stepscope

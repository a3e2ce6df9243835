// CUDA kernels for every stepscope op: family "elementwise", in the anatomy of llm.c's dev/cuda.
//
// Versions (select with torch.ops.stepscope.set_kernel_version("elementwise", v); 0 = default 2):
//   1: one element per thread, scalar loads: the textbook kernel. Any alignment.
//   2: one 16-byte pack per thread (4 x fp32, 8 x fp16/bf16), scalar tail. The default: the
//      simplest version that runs at copy_ speed on an H100 (see BENCHMARKS.md).
//   3: four 16-byte packs per thread, all loads issued before the first use (more bytes in
//      flight per thread, a quarter of the blocks).
// Versions 2 and 3 need every pointer 16-byte aligned (x[1:] of an fp32 tensor is not); such
// calls run version 1. Operands that cannot be walked as one flat array with a common layout
// (a transposed input next to a contiguous one, a slice with a step, ...) run kernel_strided,
// which computes int64 offsets from sizes and strides.
//
// Reference: the CPU kernels in ../ops.cpp apply the same functors (../elementwise.h); the tests
// compare both with PyTorch. Napkin math, H100, add_relu on 64 Mi fp32: 3 x 256 MiB = 805 MB at
// ~2.9 TB/s (copy_) = ~275 us floor; eager relu(a + b) moves 5 x 256 MiB (~460 us).
//
// Every launch goes to the current stream (CUDA graphs, side streams) and is checked. The ops
// registered here are ElementwiseOps (../elementwise.h), through ../registration.h.
#include <algorithm>
#include <limits>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "../checks.h"
#include "../elementwise.h"
#include "../registration.h"
#include "../versions.h"

namespace stepscope {
namespace {

constexpr int kThreads = 256;
constexpr int kPacksPerThread = 4;  // version 3
constexpr int kMaxDims = 8;             // kernel_strided; more dims are made dense first

std::atomic<int>* const g_version = register_kernel_family("elementwise", 3, 2);

template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <class T, int N>
struct Flat {
  T* out;
  const T* in[N];
  int64_t n;
};

template <class Op, class T, int N>
__device__ __forceinline__ void scalar_element(const Flat<T, N>& f, int64_t i) {
  T v[N];
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = f.in[k][i];
  f.out[i] = apply<Op, at::opmath_type<T>>(v);
}

template <class Op, class T, int N>
__device__ __forceinline__ Pack<T> apply_pack(const Pack<T> (&x)[N]) {
  Pack<T> y;
#pragma unroll
  for (int j = 0; j < Pack<T>::kSize; ++j) {
    T v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = x[k].v[j];
    y.v[j] = apply<Op, at::opmath_type<T>>(v);
  }
  return y;
}

// ---------------------------------------------------------------- version 1: scalar
template <class Op, class T, int N>
__global__ void kernel1(Flat<T, N> f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < f.n) scalar_element<Op>(f, i);
}

// ---------------------------------------------------------------- version 2: one pack per thread
template <class Op, class T, int N>
__global__ void kernel2(Flat<T, N> f) {
  constexpr int V = Pack<T>::kSize;
  const int64_t n_packs = f.n / V;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n_packs) {
    Pack<T> x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = reinterpret_cast<const Pack<T>*>(f.in[k])[i];
    reinterpret_cast<Pack<T>*>(f.out)[i] = apply_pack<Op>(x);
  }
  if (i < f.n - n_packs * V) scalar_element<Op>(f, n_packs * V + i);  // tail: < V elements
}

// ---------------------------------------------------------------- version 3: several packs per thread
template <class Op, class T, int N>
__global__ void kernel3(Flat<T, N> f) {
  constexpr int V = Pack<T>::kSize;
  constexpr int U = kPacksPerThread;
  const int64_t n_packs = f.n / V;
  // Pack u of this thread: consecutive threads touch consecutive packs (coalesced) for every u.
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x * U + threadIdx.x;
  Pack<T> x[U][N];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t p = first + static_cast<int64_t>(u) * blockDim.x;
    if (p < n_packs) {
#pragma unroll
      for (int k = 0; k < N; ++k) x[u][k] = reinterpret_cast<const Pack<T>*>(f.in[k])[p];
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t p = first + static_cast<int64_t>(u) * blockDim.x;
    if (p < n_packs) reinterpret_cast<Pack<T>*>(f.out)[p] = apply_pack<Op>(x[u]);
  }
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < f.n - n_packs * V) scalar_element<Op>(f, n_packs * V + i);
}

// ---------------------------------------------------------------- fallback: any strides
template <class T, int N>
struct Strided {
  T* out;
  const T* in[N];
  int64_t n;
  int dims;
  int64_t sizes[kMaxDims];
  int64_t strides[N + 1][kMaxDims];  // [0] is the output's
};

template <class Op, class T, int N>
__global__ void kernel_strided(Strided<T, N> s) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < s.n; i += step) {
    int64_t offset[N + 1] = {};
    int64_t rest = i;
    for (int d = s.dims - 1; d >= 0; --d) {
      const int64_t index = rest % s.sizes[d];
      rest /= s.sizes[d];
#pragma unroll
      for (int k = 0; k <= N; ++k) offset[k] += index * s.strides[k][d];
    }
    T v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = s.in[k][offset[k + 1]];
    s.out[offset[0]] = apply<Op, at::opmath_type<T>>(v);
  }
}

// ---------------------------------------------------------------- launcher

unsigned int blocks_for(int64_t work_items) {
  const int64_t blocks = std::max<int64_t>(1, (work_items + kThreads - 1) / kThreads);
  TORCH_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "stepscope: tensor too large for one launch");
  return static_cast<unsigned int>(blocks);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class Op, class T>
void launch_flat(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in, cudaStream_t stream) {
  constexpr int N = Op::kInputs;
  Flat<T, N> f{out.mutable_data_ptr<T>(), {}, out.numel()};
  bool aligned = aligned16(f.out);
  for (int k = 0; k < N; ++k) {
    f.in[k] = in[k].template const_data_ptr<T>();
    aligned = aligned && aligned16(f.in[k]);
  }
  const int version = aligned ? g_version->load(std::memory_order_relaxed) : 1;
  const int64_t packs = f.n / Pack<T>::kSize;
  switch (version) {
    case 1: kernel1<Op><<<blocks_for(f.n), kThreads, 0, stream>>>(f); break;
    case 2: kernel2<Op><<<blocks_for(packs), kThreads, 0, stream>>>(f); break;
    case 3: kernel3<Op><<<blocks_for((packs + kPacksPerThread - 1) / kPacksPerThread), kThreads, 0, stream>>>(f); break;
    default: TORCH_CHECK(false, "stepscope: no elementwise kernel version ", std::to_string(version));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Op, class T>
void launch_strided(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in, cudaStream_t stream) {
  constexpr int N = Op::kInputs;
  Strided<T, N> s{out.mutable_data_ptr<T>(), {}, out.numel(), 0, {}, {}};
  for (int k = 0; k < N; ++k) s.in[k] = in[k].template const_data_ptr<T>();
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) == 1) continue;  // size-1 dimensions never move an offset
    s.sizes[s.dims] = out.size(d);
    s.strides[0][s.dims] = out.stride(d);
    for (int k = 0; k < N; ++k) s.strides[k + 1][s.dims] = in[k].stride(d);
    ++s.dims;
  }
  const unsigned int grid = std::min<unsigned int>(blocks_for(s.n), 65536);
  kernel_strided<Op><<<grid, kThreads, 0, stream>>>(s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

int64_t long_dims(const at::Tensor& t) {
  int64_t dims = 0;
  for (int64_t d = 0; d < t.dim(); ++d) dims += t.size(d) > 1;
  return dims;
}

template <class Op>
void run_cuda(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in) {
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(out.device());
  // The current stream (what at::cuda::getCurrentCUDAStream returns), never the legacy default:
  // under graph capture or on a side stream that is the only correct choice.
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const bool flat = is_flat(out, in);
  if (!flat && long_dims(out) > kMaxDims) {
    // Too many dimensions for kernel_strided: make every operand dense, run flat, copy back.
    const at::Tensor dst = at::empty_like(out, at::MemoryFormat::Contiguous);
    std::array<at::Tensor, Op::kInputs> src;
    for (int k = 0; k < Op::kInputs; ++k) src[k] = in[k].contiguous();
    run_cuda<Op>(dst, src);
    out.copy_(dst);
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "stepscope_cuda", [&] {
    if (flat) {
      launch_flat<Op, scalar_t>(out, in, stream);
    } else {
      launch_strided<Op, scalar_t>(out, in, stream);
    }
  });
}

}  // namespace

// CUDA as a device of ../registration.h.
struct Cuda {
  template <class Op>
  static void run(const at::Tensor& out, const std::array<at::Tensor, Op::kInputs>& in) {
    run_cuda<Op>(out, in);
  }
};

}  // namespace stepscope

TORCH_LIBRARY_IMPL(stepscope, CUDA, m) {
  stepscope::impl_ops<stepscope::Cuda>(m, stepscope::ElementwiseOps{});
}

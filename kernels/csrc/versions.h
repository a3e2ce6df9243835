// Selectable kernel versions (llm.c dev/cuda style): a family of kernels numbered 1..count, of which
// `best` runs by default. The benchmark picks others with torch.ops.stepscope.set_kernel_version.
#pragma once

#include <atomic>
#include <string>

namespace stepscope {

// Registers a family at library load; returns the cell its launcher reads at every launch.
std::atomic<int>* register_kernel_family(const std::string& family, int count, int best);

}  // namespace stepscope

// The kernel-version registry (versions.h) and its two ops, stepscope::kernel_version_count and
// stepscope::set_kernel_version. CUDA kernel files register their families at library load; the
// benchmark and the tests select versions through the ops (kernels.kernel_version in Python).
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <c10/util/Exception.h>
#include <torch/library.h>

#include "versions.h"

namespace stepscope {

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

}  // namespace stepscope

TORCH_LIBRARY_FRAGMENT(stepscope, m) {
  m.def("kernel_version_count(str family) -> int", &stepscope::kernel_version_count);
  m.def("set_kernel_version(str family, int version) -> int", &stepscope::set_kernel_version);
}

// The GEMM library's Threading over torch's intra-op thread pool, so that
// torch.set_num_threads applies to our GEMMs too. Shared by the CPU kernels.
#pragma once

#include <ATen/Parallel.h>

#include <cstdint>
#include <functional>

#include "gemm/gemm.h"

namespace eml::ops::cpu {

inline gemm::Threading torch_threading() {
  gemm::Threading threading;
  threading.num_threads = at::get_num_threads();
  threading.parallel_for = [](int64_t begin, int64_t end,
                              const std::function<void(int64_t, int64_t)>& body) {
    at::parallel_for(begin, end, /*grain_size=*/1, body);
  };
  return threading;
}

}  // namespace eml::ops::cpu

// CPU kernel of eml::compressed_linear: float32 activations times int8 (with per-channel
// scales) or 16-bit weights, handed to gemm::run_compressed (gemm/run.h, which holds the
// backend policy: every backend but aten, on blocked's compressed_gemm).
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>

#include "gemm/backend.h"
#include "gemm/gemm.h"
#include "gemm/run.h"
#include "ops/compressed_linear.h"
#include "ops/cpu/torch_threading.h"
#include "ops/linear.h"

namespace eml::ops::cpu {
namespace {

const float* optional_data(const at::Tensor& tensor) {
  return tensor.defined() ? tensor.const_data_ptr<float>() : nullptr;
}

// W as the GEMM library's element type W (same bits: c10::BFloat16 / c10::Half hold one
// uint16_t). check_compressed_linear_args checked that it is contiguous, so its memory is
// row-major with leading dimension k; its strides are not used, since a contiguous tensor
// may report any stride for a dimension of size 0 or 1.
template <typename W, typename scalar_t>
gemm::ConstMatrixView<W> weight_view(const at::Tensor& weight) {
  static_assert(sizeof(W) == sizeof(scalar_t));
  return {reinterpret_cast<const W*>(weight.const_data_ptr<scalar_t>()), weight.size(0),
          weight.size(1), weight.size(1), 1};
}

at::Tensor compressed_linear_cpu(const at::Tensor& input, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& scales,
                                 const std::optional<at::Tensor>& bias) {
  const Backend backend = current_backend();
  if (!gemm::runs_compressed_on_own_gemm(backend)) {
    return compressed_linear_aten(input, weight, scales, bias);
  }
  detail::check_compressed_linear_args(input, weight, scales, bias);
  const at::Tensor input_2d = detail::as_matrix(input);
  const at::Tensor scales_contiguous =
      scales.has_value() && scales->defined() ? scales->contiguous() : at::Tensor();
  const at::Tensor bias_contiguous =
      bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();
  at::Tensor output = at::empty({input_2d.size(0), weight.size(0)}, input.options());
  const gemm::ConstMatrixView<float> a{input_2d.const_data_ptr<float>(), input_2d.size(0),
                                       input_2d.size(1), input_2d.stride(0), input_2d.stride(1)};
  const gemm::OutputMatrix<float> c{output.mutable_data_ptr<float>(), output.size(0),
                                    output.size(1), output.size(1)};
  const float* scale_data = optional_data(scales_contiguous);
  const float* bias_data = optional_data(bias_contiguous);
  const gemm::Threading threading = torch_threading();
  switch (weight.scalar_type()) {
    case at::kChar:
      gemm::run_compressed(backend, a, weight_view<int8_t, int8_t>(weight), scale_data, c,
                           bias_data, threading);
      break;
    case at::kBFloat16:
      gemm::run_compressed(backend, a, weight_view<gemm::bfloat16_t, at::BFloat16>(weight),
                           scale_data, c, bias_data, threading);
      break;
    case at::kHalf:
      gemm::run_compressed(backend, a, weight_view<gemm::float16_t, at::Half>(weight),
                           scale_data, c, bias_data, threading);
      break;
    default:  // check_compressed_linear_args allows no other
      TORCH_INTERNAL_ASSERT(false, "eml::compressed_linear: weight dtype");
  }
  auto sizes = input.sizes().vec();
  sizes.back() = weight.size(0);
  return output.view(sizes);
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, CPU, m) {
  m.impl("compressed_linear", &compressed_linear_cpu);
}

}  // namespace eml::ops::cpu

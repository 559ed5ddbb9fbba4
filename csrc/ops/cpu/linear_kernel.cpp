// CPU kernels of eml::linear_forward and eml::linear_backward: check the arguments, send
// what our GEMMs do not compute to ATen's kernels, translate tensors into strided matrix
// views, allocate the outputs and hand them to gemm::run (gemm/run.h), which holds the
// backend policy. Also those of eml::pack_weight and eml::linear_packed (a frozen weight in
// blocked's panels, packed_linear.h), which run on blocked's GEMM whatever the backend.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "gemm/backend.h"
#include "gemm/blocked/blocked_gemm.h"
#include "gemm/gemm.h"
#include "gemm/run.h"
#include "ops/composite/linear_kernel.h"
#include "ops/cpu/huge_pages.h"
#include "ops/cpu/torch_threading.h"
#include "ops/linear.h"
#include "ops/packed_linear.h"

namespace eml::ops::cpu {
namespace {

// The GEMM library's name for a torch dtype; nullopt: none of its GEMMs computes it.
std::optional<gemm::Element> gemm_element(at::ScalarType dtype) {
  switch (dtype) {
    case at::ScalarType::Float: return gemm::Element::float32;
    case at::ScalarType::Double: return gemm::Element::float64;
    case at::ScalarType::BFloat16: return gemm::Element::bfloat16;
    case at::ScalarType::Half: return gemm::Element::float16;
    default: return std::nullopt;
  }
}

// The layer's forward product for the routing of bfloat16 (gemm::runs_on_own_gemm), read
// before the arguments are checked: zeros where they make no layer.
gemm::ProductSize product_size(const at::Tensor& input, const at::Tensor& weight) {
  if (input.dim() == 0 || weight.dim() != 2) return {};
  const int64_t in_features = input.size(-1);
  const int64_t rows = in_features == 0 ? 0 : input.numel() / in_features;
  return {rows, in_features, weight.size(0)};
}

// Else the call goes to ATen's kernels (composite::linear_*_aten).
bool runs_on_own_gemm(Backend backend, const at::Tensor& input, const at::Tensor& weight,
                      gemm::Pass pass) {
  const std::optional<gemm::Element> element = gemm_element(input.scalar_type());
  return element.has_value() &&
         gemm::runs_on_own_gemm(backend, *element, product_size(input, weight), pass);
}

// The GEMM library's element type for a torch scalar type: the same bits and layout
// (c10::BFloat16 / c10::Half hold one uint16_t), so pointers are reinterpreted.
template <typename scalar_t>
struct GemmElement {
  using type = scalar_t;
};
template <>
struct GemmElement<at::BFloat16> {
  using type = gemm::bfloat16_t;
};
template <>
struct GemmElement<at::Half> {
  using type = gemm::float16_t;
};
template <typename scalar_t>
using gemm_t = typename GemmElement<scalar_t>::type;

static_assert(sizeof(at::BFloat16) == sizeof(gemm::bfloat16_t) &&
              alignof(at::BFloat16) == alignof(gemm::bfloat16_t));
static_assert(sizeof(at::Half) == sizeof(gemm::float16_t) &&
              alignof(at::Half) == alignof(gemm::float16_t));

template <typename scalar_t>
const gemm_t<scalar_t>* gemm_data(const at::Tensor& tensor) {
  return reinterpret_cast<const gemm_t<scalar_t>*>(tensor.const_data_ptr<scalar_t>());
}

template <typename scalar_t>
gemm_t<scalar_t>* gemm_mutable_data(at::Tensor& tensor) {
  return reinterpret_cast<gemm_t<scalar_t>*>(tensor.mutable_data_ptr<scalar_t>());
}

// A 2-D tensor as a read-only view; its strides are taken as they are, never assumed.
template <typename scalar_t>
gemm::ConstMatrixView<gemm_t<scalar_t>> matrix_view(const at::Tensor& matrix) {
  TORCH_INTERNAL_ASSERT(matrix.dim() == 2);
  return {gemm_data<scalar_t>(matrix), matrix.size(0), matrix.size(1), matrix.stride(0),
          matrix.stride(1)};
}

// A fresh result for our GEMMs to write whole: large ones on huge pages (huge_pages.h).
at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor result = at::empty(sizes, options);
  advise_huge_pages(result.data_ptr(), result.nbytes());
  return result;
}

// A freshly allocated, contiguous 2-D result.
template <typename scalar_t>
gemm::OutputMatrix<gemm_t<scalar_t>> output_matrix(at::Tensor& matrix) {
  TORCH_INTERNAL_ASSERT(matrix.dim() == 2 && matrix.is_contiguous());
  return {gemm_mutable_data<scalar_t>(matrix), matrix.size(0), matrix.size(1), matrix.size(1)};
}

at::Tensor linear_forward_cpu(const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias) {
  const Backend backend = current_backend();
  if (!runs_on_own_gemm(backend, input, weight, gemm::Pass::forward)) {
    return composite::linear_forward_aten(input, weight, bias);
  }
  detail::check_linear_args("eml::linear_forward", input, weight, bias);
  const at::Tensor input_2d = detail::as_matrix(input);
  const bool has_bias = bias.has_value() && bias->defined();
  const at::Tensor bias_contiguous = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor output = empty_output({input_2d.size(0), weight.size(0)}, input.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(),
                                  "eml::linear_forward", [&] {
    gemm::Epilogue<gemm_t<scalar_t>> epilogue;
    epilogue.bias = has_bias ? gemm_data<scalar_t>(bias_contiguous) : nullptr;
    // Y = X · W^T: W^T is W's memory with its strides swapped, no copy.
    gemm::run(backend, matrix_view<scalar_t>(input_2d), matrix_view<scalar_t>(weight).transposed(),
              output_matrix<scalar_t>(output), epilogue, torch_threading());
  });
  return output.view(detail::linear_output_shape(input, weight));
}

// The gradients of `mask` on ATen's kernels (those of F.linear's backward: the same bits),
// into outputs allocated as ours are (empty_output). ATen's own allocation of a dL/dW of 32 MiB
// or more comes fresh from the kernel, 4 KiB page by page, on every call (Zen 4, bfloat16, 1 x
// 4096 x 4097: 17.8 ms, into huge pages 5.8 ms).
std::tuple<at::Tensor, at::Tensor, at::Tensor> aten_gradients(const at::Tensor& grad_2d,
                                                              const at::Tensor& input_2d,
                                                              const at::Tensor& weight,
                                                              std::array<bool, 3> mask) {
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) {  // dL/dX = dL/dY · W
    grad_input = empty_output(input_2d.sizes(), input_2d.options());
    at::mm_out(grad_input, grad_2d, weight);
  }
  if (mask[1]) {  // dL/dW = (dL/dY)^T · X
    grad_weight = empty_output(weight.sizes(), weight.options());
    at::mm_out(grad_weight, grad_2d.t(), input_2d);
  }
  if (mask[2]) grad_bias = grad_2d.sum(0);  // column sums of dL/dY
  return {grad_input, grad_weight, grad_bias};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    std::array<bool, 3> output_mask) {
  const Backend backend = current_backend();
  if (backend == Backend::aten) {
    return composite::linear_backward_aten(grad_output, input, weight, output_mask);
  }
  detail::check_linear_backward_args("eml::linear_backward", grad_output, input, weight);
  const auto [wants_grad_input, wants_grad_weight, wants_grad_bias] = output_mask;
  // Which gradients our GEMM computes (dL/db goes with dL/dW); bfloat16 may hand either to
  // ATen (gemm::runs_on_own_gemm).
  const bool input_on_own =
      wants_grad_input && runs_on_own_gemm(backend, input, weight, gemm::Pass::input_gradient);
  const bool weight_on_own =
      (wants_grad_weight || wants_grad_bias) &&
      runs_on_own_gemm(backend, input, weight, gemm::Pass::weight_gradient);
  const at::Tensor grad_2d = detail::as_matrix(grad_output);
  const at::Tensor input_2d = detail::as_matrix(input);
  at::Tensor grad_input, grad_weight, grad_bias;
  std::tie(grad_input, grad_weight, grad_bias) = aten_gradients(
      grad_2d, input_2d, weight,
      {wants_grad_input && !input_on_own, wants_grad_weight && !weight_on_own,
       wants_grad_bias && !weight_on_own});
  if (input_on_own) grad_input = empty_output(input_2d.sizes(), input.options());
  if (weight_on_own && wants_grad_weight) {
    grad_weight = empty_output(weight.sizes(), weight.options());
  }
  if (weight_on_own && wants_grad_bias) grad_bias = at::empty({weight.size(0)}, weight.options());

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(),
                                  "eml::linear_backward", [&] {
    using element_t = gemm_t<scalar_t>;
    if (input_on_own) {  // dL/dX = dL/dY · W
      gemm::run<element_t>(backend, matrix_view<scalar_t>(grad_2d), matrix_view<scalar_t>(weight),
                           output_matrix<scalar_t>(grad_input), {}, torch_threading());
    }
    if (weight_on_own && wants_grad_weight) {
      // dL/dW = (dL/dY)^T · X, and dL/db = row sums of (dL/dY)^T
      gemm::Epilogue<element_t> epilogue;
      epilogue.a_row_sums = wants_grad_bias ? gemm_mutable_data<scalar_t>(grad_bias) : nullptr;
      // Read again only by the optimizer, after the backward pass.
      epilogue.stream_c = true;
      gemm::run(backend, matrix_view<scalar_t>(grad_2d).transposed(),
                matrix_view<scalar_t>(input_2d), output_matrix<scalar_t>(grad_weight), epilogue,
                torch_threading());
    } else if (weight_on_own && wants_grad_bias) {
      // Summed in float32 (the 16-bit types too), rounded once.
      grad_bias.copy_(grad_2d.sum({0}, /*keepdim=*/false, at::toOpMathType(grad_2d.scalar_type())));
    }
  });
  if (wants_grad_input) grad_input = grad_input.view(input.sizes());
  return {grad_input, grad_weight, grad_bias};
}

std::tuple<at::Tensor, int64_t> pack_weight_cpu(const at::Tensor& weight) {
  detail::check_pack_weight_args(weight);
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  // Fresh CPU memory is aligned to 64 bytes (c10's allocator), as prepack_b requires.
  at::Tensor packed = at::empty(
      {in_features, detail::padded_out_features(out_features, weight.scalar_type())},
      weight.options());
  int64_t block_k = 0;
  AT_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "eml::pack_weight", [&] {
    block_k = gemm::prepack_depth<scalar_t>(in_features);
    // B = W^T: W's memory with its strides swapped, no copy.
    gemm::prepack_b<scalar_t>(matrix_view<scalar_t>(weight).transposed(), block_k,
                              packed.mutable_data_ptr<scalar_t>());
  });
  return {packed, block_k};
}

at::Tensor linear_packed_cpu(const at::Tensor& input, const at::Tensor& packed_weight,
                             int64_t block_k, int64_t out_features,
                             const std::optional<at::Tensor>& bias) {
  detail::check_linear_packed_args(input, packed_weight, block_k, out_features, bias);
  // A packed weight that is not where pack_weight put it (a view at an offset, storage
  // from elsewhere) is copied to aligned memory: the kernels' loads of B need it.
  const bool aligned = reinterpret_cast<uintptr_t>(packed_weight.const_data_ptr()) %
                           gemm::kPrepackedAlignment == 0;
  const at::Tensor packed = aligned ? packed_weight : packed_weight.clone();
  const at::Tensor input_2d = detail::as_matrix(input);
  const bool has_bias = bias.has_value() && bias->defined();
  const at::Tensor bias_contiguous = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor output = empty_output({input_2d.size(0), out_features}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "eml::linear_packed", [&] {
    gemm::Epilogue<scalar_t> epilogue;
    epilogue.bias = has_bias ? bias_contiguous.const_data_ptr<scalar_t>() : nullptr;
    const gemm::PrepackedB<scalar_t> weight_t{packed.const_data_ptr<scalar_t>(),
                                              input_2d.size(1), out_features, block_k};
    gemm::blocked_gemm(matrix_view<scalar_t>(input_2d), weight_t, output_matrix<scalar_t>(output),
                       epilogue, torch_threading());
  });
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = out_features;
  return output.view(sizes);
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, CPU, m) {
  m.impl("linear_forward", &linear_forward_cpu);
  m.impl("linear_backward", &linear_backward_cpu);
  m.impl("pack_weight", &pack_weight_cpu);
  m.impl("linear_packed", &linear_packed_cpu);
}

}  // namespace eml::ops::cpu

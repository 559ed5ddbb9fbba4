#include "ops/composite/linear_kernel.h"

#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <torch/library.h>

#include "ops/linear.h"

namespace eml::ops::composite {

at::Tensor linear_forward_aten(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias) {
  detail::check_linear_args("eml::linear_forward", input, weight, bias);
  return at::linear(input, weight, bias);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_aten(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    std::array<bool, 3> output_mask) {
  detail::check_linear_backward_args("eml::linear_backward", grad_output, input, weight);
  const at::Tensor grad_2d = detail::as_matrix(grad_output);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) {  // dL/dX = dL/dY · W
    grad_input = at::mm(grad_2d, weight).view_symint(input.sym_sizes());
  }
  if (output_mask[1]) {  // dL/dW = (dL/dY)^T · X
    grad_weight = at::mm(grad_2d.t(), detail::as_matrix(input));
  }
  if (output_mask[2]) {  // dL/db = column sums of dL/dY
    grad_bias = grad_2d.sum(0);
  }
  return {grad_input, grad_weight, grad_bias};
}

// eml::linear below autograd: the forward op, so every device and fake tensors work.
at::Tensor linear_composite(const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
  return ops::linear_forward(input, weight, bias);
}

TORCH_LIBRARY_IMPL(eml, CompositeExplicitAutograd, m) {
  m.impl("linear_forward", &linear_forward_aten);
  m.impl("linear_backward", &linear_backward_aten);
  m.impl("linear", &linear_composite);
}

}  // namespace eml::ops::composite

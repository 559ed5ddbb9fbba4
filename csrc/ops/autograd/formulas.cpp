#include "ops/autograd/formulas.h"

#include <ATen/ops/add.h>
#include <ATen/ops/sum.h>

#include <optional>
#include <utility>

#include "ops/linear.h"

namespace eml::ops::autograd {

using detail::as_matrix;

at::Tensor input_grad(const at::Tensor& grad_output, const at::Tensor& weight) {
  return ops::linear(grad_output, weight.t(), std::nullopt);
}

at::Tensor weight_grad(const at::Tensor& grad_output, const at::Tensor& input) {
  return ops::linear(as_matrix(grad_output).t(), as_matrix(input).t(), std::nullopt);
}

at::Tensor bias_grad(const at::Tensor& grad_output) { return as_matrix(grad_output).sum(0); }

at::Tensor add_defined(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return at::add(a, b);
}

at::Tensor linear_tangent(const at::Tensor& input, const at::Tensor& input_tangent,
                          const at::Tensor& weight, const at::Tensor& weight_tangent,
                          const at::Tensor& bias_tangent, c10::SymIntArrayRef output_sizes) {
  // The bias tangent rides in the epilogue of the first GEMM that runs.
  std::optional<at::Tensor> pending_bias;
  if (bias_tangent.defined()) pending_bias = bias_tangent;
  at::Tensor tangent;
  if (input_tangent.defined()) {
    tangent = ops::linear(input_tangent, weight, std::exchange(pending_bias, std::nullopt));
  }
  if (weight_tangent.defined()) {
    tangent = add_defined(
        tangent, ops::linear(input, weight_tangent, std::exchange(pending_bias, std::nullopt)));
  }
  if (pending_bias.has_value()) tangent = pending_bias->expand_symint(output_sizes);
  return tangent;
}

}  // namespace eml::ops::autograd

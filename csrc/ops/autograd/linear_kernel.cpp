// The autograd kernel of eml::linear: a C++ torch::autograd::Function, so models
// scripted with TorchScript train without Python. Forward and backward call the
// eml:: ops through the dispatcher.
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops/composite/linear_kernel.h"
#include "ops/linear.h"

namespace eml::ops::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Gradients that can themselves be differentiated (create_graph=True): built from
// eml::linear itself, so double (and higher) backward stays on our op.
//   dL/dX = dL/dY · W      = linear(dL/dY, W^T)
//   dL/dW = (dL/dY)^T · X  = linear((dL/dY)^T, X^T)
variable_list differentiable_grads(const at::Tensor& grad_output, const at::Tensor& input,
                                   const at::Tensor& weight, std::array<bool, 3> needs_grad) {
  at::Tensor grad_input, grad_weight, grad_bias;
  const at::Tensor grad_2d = composite::as_matrix(grad_output);
  if (needs_grad[0]) grad_input = ops::linear(grad_output, weight.t(), std::nullopt);
  if (needs_grad[1]) {
    grad_weight = ops::linear(grad_2d.t(), composite::as_matrix(input).t(), std::nullopt);
  }
  if (needs_grad[2]) grad_bias = grad_2d.sum(0);
  return {grad_input, grad_weight, grad_bias};
}

class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return ops::linear_forward(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& grad_output = grad_outputs[0];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::array<bool, 3> needs_grad = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                            has_bias && ctx->needs_input_grad(2)};
    if (!grad_output.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    if (at::GradMode::is_enabled()) {
      return differentiable_grads(grad_output, input, weight, needs_grad);
    }
    auto [grad_input, grad_weight, grad_bias] =
        ops::linear_backward(grad_output, input, weight, needs_grad);
    return {grad_input, grad_weight, grad_bias};
  }
};

at::Tensor linear_autograd(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias) {
  detail::check_linear_args("eml::linear", input, weight, bias);
  return LinearFunction::apply(input, weight, bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, Autograd, m) { m.impl("linear", &linear_autograd); }

}  // namespace eml::ops::autograd

// The autograd kernel of eml::linear_backward, so that the gradients it returns can be
// differentiated again (reverse and forward mode) wherever the op is called directly.
// With G = dL/dY, linear_backward returns dX = G · W, dW = G^T · X and db = column sums of G.
// For upstream gradients (gX, gW, gb) of those three outputs:
//   dL/dG = gX · W^T + X · gW^T + gb = linear_tangent(X, gX, W, gW, gb)
//   dL/dX = G · gW                   = input_grad(G, gW)
//   dL/dW = G^T · gX                 = weight_grad(G, gX)
// and the tangents of the outputs for tangents (dG, dX, dW) follow by the product rule.
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/FunctionsManual.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <mutex>
#include <tuple>

#include "ops/autograd/compiled_autograd.h"
#include "ops/autograd/formulas.h"
#include "ops/autograd/make_node.h"
#include "ops/linear.h"

namespace eml::ops::autograd {
namespace {

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
using torch::autograd::generated::details::toNonOptFwGrad;
using torch::autograd::generated::details::toNonOptPrimal;

// dL/dG, dL/dX, dL/dW (those in `mask`) for the gradients of linear_backward's outputs
// (undefined for masked-off outputs), from the saved G, X, W (undefined where not saved).
variable_list linear_backward_grads(const variable_list& grads, const at::Tensor& grad_output,
                                    const at::Tensor& input, const at::Tensor& weight,
                                    c10::SymIntArrayRef grad_output_sizes,
                                    std::array<bool, 3> mask) {
  const at::Tensor& grad_of_grad_input = grads[0];
  const at::Tensor& grad_of_grad_weight = grads[1];
  const at::Tensor& grad_of_grad_bias = grads[2];
  variable_list result(3);
  if (mask[0]) {
    result[0] = linear_tangent(input, grad_of_grad_input, weight, grad_of_grad_weight,
                               grad_of_grad_bias, grad_output_sizes);
  }
  if (mask[1] && grad_of_grad_weight.defined()) {
    result[1] = input_grad(grad_output, grad_of_grad_weight);
  }
  if (mask[2] && grad_of_grad_input.defined()) {
    result[2] = weight_grad(grad_output, grad_of_grad_input);
  }
  return result;
}

// linear_backward_grads on the state packed by LinearBackwardBackward::apply_with_saved.
variable_list linear_backward_grads_functional(const variable_list& grads,
                                               const std::vector<c10::IValue>& args) {
  PackedArgs packed(args);
  const auto mask = packed.unpack<std::array<bool, 3>>();
  const auto grad_output = packed.unpack<std::optional<at::Tensor>>();
  const auto input = packed.unpack<std::optional<at::Tensor>>();
  const auto weight = packed.unpack<std::optional<at::Tensor>>();
  const auto grad_output_sizes = packed.unpack<std::vector<c10::SymInt>>();
  return linear_backward_grads(grads, grad_output.value_or(at::Tensor()),
                               input.value_or(at::Tensor()), weight.value_or(at::Tensor()),
                               grad_output_sizes, mask);
}

// Backward of (dX, dW, db) = linear_backward(G, X, W, mask). Inputs: gradients of dX, dW, db
// (undefined for masked-off outputs). Outputs: dL/dG, dL/dX, dL/dW.
struct LinearBackwardBackward final : torch::autograd::Node {
  std::string name() const override { return "EmlLinearBackwardBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    grad_output_.reset_data();
    input_.reset_data();
    weight_.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return linear_backward_grads(grads, grad_output_.unpack(), input_.unpack(), weight_.unpack(),
                                 grad_output_sizes_, mask());
  }

  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(grad_output_, false);
    args.collect(input_, false);
    args.collect(weight_, false);
    args.collect(grad_output_sizes_);
  }

  variable_list apply_with_saved(const variable_list& grads,
                                 torch::dynamo::autograd::SwapSavedVariables& saved) override {
    static std::once_flag bound;
    return apply_functional(*this, bound, linear_backward_grads_functional, grads, saved,
                            mask(), grad_output_, input_, weight_, grad_output_sizes_);
  }

  std::array<bool, 3> mask() const {
    return {task_should_compute_output(0), task_should_compute_output(1),
            task_should_compute_output(2)};
  }

  SavedVariable grad_output_;  // when input or weight needs a gradient
  SavedVariable input_;        // when G needs a gradient and dW was computed
  SavedVariable weight_;       // when G needs a gradient and dX was computed
  std::vector<c10::SymInt> grad_output_sizes_;
};

NodePtr<LinearBackwardBackward> make_grad_fn(const at::Tensor& grad_output,
                                                        const at::Tensor& input,
                                                        const at::Tensor& weight,
                                                        std::array<bool, 3> output_mask) {
  auto grad_fn = make_node<LinearBackwardBackward>();
  grad_fn->set_next_edges(torch::autograd::collect_next_edges(grad_output, input, weight));
  const bool grad_output_needs_grad = grad_fn->should_compute_output(0);
  if ((grad_fn->should_compute_output(1) && output_mask[1]) ||
      (grad_fn->should_compute_output(2) && output_mask[0])) {
    grad_fn->grad_output_ = SavedVariable(grad_output, false);
  }
  if (grad_output_needs_grad && output_mask[1]) grad_fn->input_ = SavedVariable(input, false);
  if (grad_output_needs_grad && output_mask[0]) grad_fn->weight_ = SavedVariable(weight, false);
  grad_fn->grad_output_sizes_ = grad_output.sym_sizes().vec();
  return grad_fn;
}

// Forward mode, by the product rule on primal values with our ops (outside the guard).
void set_forward_grads(const at::Tensor& grad_output, const at::Tensor& input,
                       const at::Tensor& weight, std::array<bool, 3> output_mask,
                       const std::array<at::Tensor, 3>& outputs) {
  using torch::autograd::isFwGradDefined;
  if (!isFwGradDefined(grad_output) && !isFwGradDefined(input) && !isFwGradDefined(weight)) {
    return;
  }
  const at::Tensor grad_output_p = toNonOptPrimal(grad_output);
  const at::Tensor input_p = toNonOptPrimal(input);
  const at::Tensor weight_p = toNonOptPrimal(weight);
  const at::Tensor grad_output_t = toNonOptFwGrad(grad_output);
  const at::Tensor input_t = toNonOptFwGrad(input);
  const at::Tensor weight_t = toNonOptFwGrad(weight);
  std::array<at::Tensor, 3> tangents;
  if (output_mask[0]) {  // d(G · W) = dG · W + G · dW
    tangents[0] = add_defined(
        grad_output_t.defined() ? input_grad(grad_output_t, weight_p) : at::Tensor(),
        weight_t.defined() ? input_grad(grad_output_p, weight_t) : at::Tensor());
  }
  if (output_mask[1]) {  // d(G^T · X) = dG^T · X + G^T · dX
    tangents[1] = add_defined(
        grad_output_t.defined() ? weight_grad(grad_output_t, input_p) : at::Tensor(),
        input_t.defined() ? weight_grad(grad_output_p, input_t) : at::Tensor());
  }
  if (output_mask[2] && grad_output_t.defined()) tangents[2] = bias_grad(grad_output_t);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && tangents[i].defined()) {
      outputs[i]._set_fw_grad(tangents[i], /*level=*/0, /*is_inplace_op=*/false);
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_autograd(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    std::array<bool, 3> output_mask) {
  detail::check_linear_backward_args("eml::linear_backward", grad_output, input, weight);
  NodePtr<LinearBackwardBackward> grad_fn;
  if (torch::autograd::compute_requires_grad(grad_output, input, weight)) {
    grad_fn = make_grad_fn(grad_output, input, weight, output_mask);
  }
  std::array<at::Tensor, 3> outputs;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::tie(outputs[0], outputs[1], outputs[2]) =
        ops::linear_backward(grad_output, input, weight, output_mask);
  }
  if (grad_fn) torch::autograd::set_history({outputs[0], outputs[1], outputs[2]}, grad_fn);
  set_forward_grads(grad_output, input, weight, output_mask, outputs);
  return {outputs[0], outputs[1], outputs[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, Autograd, m) { m.impl("linear_backward", &linear_backward_autograd); }

}  // namespace eml::ops::autograd

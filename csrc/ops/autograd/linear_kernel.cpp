// The autograd kernel of eml::linear and eml::linear_forward, registered at the Autograd key
// so that TorchScript models train without Python. It is built the way PyTorch's generated
// kernels (VariableType) are: a torch::autograd::Node with SavedVariables, wired into the
// graph with collect_next_edges/set_history, plus a forward-mode formula. Unlike a C++
// torch::autograd::Function, torch.func's transforms (grad, jacrev, jvp, vmap, ...) accept it.
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/FunctionsManual.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <mutex>

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

// linear_backward checks the shapes of input and weight even for a gradient that does not
// read them. A tensor that was not saved is passed as a one-element stand-in of its shape:
// the kernels read input only for dL/dW and weight only for dL/dX. It is made from
// grad_output by a dispatched op, so that it is a tensor of the same kind (a DTensor, which
// refuses plain tensors among its arguments; a fake or functorch tensor) on the same device.
at::Tensor stand_in(c10::SymIntArrayRef sizes, const at::Tensor& grad_output) {
  return grad_output.new_empty_symint({}).expand_symint(sizes);
}

// dL/dX, dL/dW, dL/db (those in `mask`) for dL/dY; input/weight undefined where not saved.
variable_list linear_grads(const at::Tensor& grad_output, const at::Tensor& input,
                           const at::Tensor& weight, c10::SymIntArrayRef input_sizes,
                           c10::SymIntArrayRef weight_sizes, std::array<bool, 3> mask) {
  variable_list result(3);
  if (!grad_output.defined()) return result;
  if (at::GradMode::is_enabled()) {  // create_graph=True: differentiable gradients
    if (mask[0]) result[0] = input_grad(grad_output, weight);
    if (mask[1]) result[1] = weight_grad(grad_output, input);
    if (mask[2]) result[2] = bias_grad(grad_output);
    return result;
  }
  if (!mask[0] && !mask[1]) {
    if (mask[2]) result[2] = bias_grad(grad_output);
    return result;
  }
  auto [grad_input, grad_weight, grad_bias] = ops::linear_backward(
      grad_output, input.defined() ? input : stand_in(input_sizes, grad_output),
      weight.defined() ? weight : stand_in(weight_sizes, grad_output), mask);
  return {grad_input, grad_weight, grad_bias};
}

// linear_grads on the state packed by LinearBackward::apply_with_saved.
variable_list linear_grads_functional(const variable_list& grads,
                                      const std::vector<c10::IValue>& args) {
  PackedArgs packed(args);
  const auto mask = packed.unpack<std::array<bool, 3>>();
  const auto input = packed.unpack<std::optional<at::Tensor>>();
  const auto weight = packed.unpack<std::optional<at::Tensor>>();
  const auto input_sizes = packed.unpack<std::vector<c10::SymInt>>();
  const auto weight_sizes = packed.unpack<std::vector<c10::SymInt>>();
  return linear_grads(grads[0], input.value_or(at::Tensor()), weight.value_or(at::Tensor()),
                      input_sizes, weight_sizes, mask);
}

// Backward of y = linear(x, W, b). Inputs: dL/dY. Outputs: dL/dX, dL/dW, dL/db.
struct LinearBackward final : torch::autograd::Node {
  std::string name() const override { return "EmlLinearBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    input_.reset_data();
    weight_.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    // unpack() raises PyTorch's "backward through the graph a second time" once released.
    return linear_grads(grads[0], input_.unpack(), weight_.unpack(), input_sizes_,
                        weight_sizes_, mask());
  }

  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(input_, false);
    args.collect(weight_, false);
    args.collect(input_sizes_);
    args.collect(weight_sizes_);
    args.collect(has_bias_);
  }

  variable_list apply_with_saved(const variable_list& grads,
                                 torch::dynamo::autograd::SwapSavedVariables& saved) override {
    static std::once_flag bound;
    return apply_functional(*this, bound, linear_grads_functional, grads, saved, mask(), input_,
                            weight_, input_sizes_, weight_sizes_);
  }

  // The gradients this backward pass asks for.
  std::array<bool, 3> mask() const {
    return {task_should_compute_output(0), task_should_compute_output(1),
            has_bias_ && task_should_compute_output(2)};
  }

  // As ATen's linear: input only if the weight needs a gradient, weight only if the input does.
  SavedVariable input_;
  SavedVariable weight_;
  std::vector<c10::SymInt> input_sizes_;
  std::vector<c10::SymInt> weight_sizes_;
  bool has_bias_ = false;
};

NodePtr<LinearBackward> make_grad_fn(const at::Tensor& input, const at::Tensor& weight,
                                                const std::optional<at::Tensor>& bias) {
  auto grad_fn = make_node<LinearBackward>();
  grad_fn->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
  grad_fn->has_bias_ = bias.has_value() && bias->defined();
  if (grad_fn->should_compute_output(1)) grad_fn->input_ = SavedVariable(input, false);
  if (grad_fn->should_compute_output(0)) grad_fn->weight_ = SavedVariable(weight, false);
  grad_fn->input_sizes_ = input.sym_sizes().vec();
  grad_fn->weight_sizes_ = weight.sym_sizes().vec();
  return grad_fn;
}

// Forward mode: the tangent of the output, computed on primal values with our ops outside
// the below-autograd guard, so that it is itself differentiable (reverse-over-forward).
void set_forward_grad(const at::Tensor& output, const at::Tensor& input, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias) {
  using torch::autograd::isFwGradDefined;
  if (!isFwGradDefined(input) && !isFwGradDefined(weight) && !isFwGradDefined(bias)) return;
  const at::Tensor tangent =
      linear_tangent(toNonOptPrimal(input), toNonOptFwGrad(input), toNonOptPrimal(weight),
                     toNonOptFwGrad(weight), toNonOptFwGrad(bias), output.sym_sizes());
  if (tangent.defined()) output._set_fw_grad(tangent, /*level=*/0, /*is_inplace_op=*/false);
}

constexpr char kLinear[] = "eml::linear";
constexpr char kLinearForward[] = "eml::linear_forward";

// eml::linear and eml::linear_forward at the Autograd key: one Node, the forward op below.
// Every kernel of eml::linear_forward checks its arguments, so for that op the check below
// would see nothing new; eml::linear's arguments are checked here, so that an error names
// the op that was called. Nothing before the forward reads more than the arguments' sizes.
template <const char* kOpName>
at::Tensor linear_autograd(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias) {
  if constexpr (kOpName != kLinearForward) detail::check_linear_args(kOpName, input, weight, bias);
  NodePtr<LinearBackward> grad_fn;
  if (torch::autograd::compute_requires_grad(input, weight, bias)) {
    grad_fn = make_grad_fn(input, weight, bias);
  }
  at::Tensor output;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    output = ops::linear_forward(input, weight, bias);
  }
  if (grad_fn) torch::autograd::set_history(output, grad_fn);
  set_forward_grad(output, input, weight, bias);
  return output;
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, Autograd, m) {
  m.impl("linear", &linear_autograd<kLinear>);
  m.impl("linear_forward", &linear_autograd<kLinearForward>);
}

}  // namespace eml::ops::autograd

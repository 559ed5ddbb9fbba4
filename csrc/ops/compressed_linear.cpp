// eml::compressed_linear: a linear layer whose weight is stored compressed (int8 with one
// float32 scale per output channel, or bfloat16 / float16), float32 activations. Its
// schema, argument checks, the ATen kernel (every device, meta and fake tensors) and the
// autograd kernel (gradients for input and bias; the weights are frozen) live here; the
// CPU kernel on our GEMM in cpu/compressed_linear_kernel.cpp.
#include "ops/compressed_linear.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sum.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>

#include "ops/message.h"

namespace eml::ops {

TORCH_LIBRARY_FRAGMENT(eml, m) {
  // Fixed schema: saved TorchScript models refer to it.
  m.def("compressed_linear(Tensor input, Tensor weight, Tensor? scales, Tensor? bias=None) -> Tensor");
}

at::Tensor compressed_linear(const at::Tensor& input, const at::Tensor& weight,
                             const std::optional<at::Tensor>& scales,
                             const std::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("eml::compressed_linear", "")
                       .typed<decltype(compressed_linear)>();
  return op.call(input, weight, scales, bias);
}

namespace detail {
using message::device;
using message::dtype;
using message::fail;
using message::shape;
using message::strides;
using message::sym_int;

namespace {

constexpr const char* kOp = "eml::compressed_linear";

bool has(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && tensor->defined();
}

// A per-output-channel float32 vector (scales, bias) on weight's device.
void check_channel_vector(const char* name, const at::Tensor& vector, const at::Tensor& weight) {
  if (vector.dim() != 1 || vector.sym_size(0) != weight.sym_size(0)) {
    fail(kOp, std::string(name) + " must be 1-D [out_features] = [" + sym_int(weight.sym_size(0)) +
                  "] for weight of shape " + shape(weight) + ", got " + name + " of shape " +
                  shape(vector));
  }
  if (vector.scalar_type() != at::kFloat) {
    fail(kOp, std::string(name) + " must be float32, got " + dtype(vector));
  }
  if (vector.device() != weight.device()) {
    fail(kOp, std::string(name) + " must be on the device of weight, got " + device(vector) +
                  " and " + device(weight));
  }
}

}  // namespace

void check_compressed_linear_args(const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& scales,
                                  const std::optional<at::Tensor>& bias) {
  if (input.dim() < 1) {
    fail(kOp, "input must have at least 1 dimension [*, in_features], got " +
                  std::to_string(input.dim()) + "-D input of shape " + shape(input));
  }
  if (weight.dim() != 2) {
    fail(kOp, "weight must be 2-D [out_features, in_features], got " +
                  std::to_string(weight.dim()) + "-D weight of shape " + shape(weight));
  }
  if (input.sym_size(-1) != weight.sym_size(1)) {
    fail(kOp, "in_features mismatch: input of shape " + shape(input) + " has " +
                  sym_int(input.sym_size(-1)) + " features, weight of shape " + shape(weight) +
                  " expects " + sym_int(weight.sym_size(1)));
  }
  if (input.scalar_type() != at::kFloat) {
    fail(kOp, "input must be float32 (the activations of compressed weights), got " +
                  dtype(input) + " " + shape(input));
  }
  const at::ScalarType weight_type = weight.scalar_type();
  if (weight_type != at::kChar && weight_type != at::kBFloat16 && weight_type != at::kHalf) {
    fail(kOp, "weight must be int8, bfloat16 or float16, got " + dtype(weight) + " " +
                  shape(weight));
  }
  if (!weight.is_contiguous()) {
    fail(kOp, "weight must be contiguous, got weight of shape " + shape(weight) +
                  " with strides " + strides(weight));
  }
  if (input.device() != weight.device()) {
    fail(kOp, "input and weight must be on the same device, got input on " + device(input) +
                  " and weight on " + device(weight));
  }
  if (weight_type == at::kChar) {
    if (!has(scales)) {
      fail(kOp, "int8 weight needs scales (float32 [out_features]), got None");
    }
    check_channel_vector("scales", *scales, weight);
  } else if (has(scales)) {
    fail(kOp, "scales are for int8 weight only, got " + dtype(weight) + " weight with scales");
  }
  if (has(bias)) check_channel_vector("bias", *bias, weight);
}

}  // namespace detail

// The ATen kernel: X · float(W)^T, times the scales, plus bias (the CPU kernel's order of
// operations), on any device; meta and fake tensors get the output's shape from it.
at::Tensor compressed_linear_aten(const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& scales,
                                  const std::optional<at::Tensor>& bias) {
  detail::check_compressed_linear_args(input, weight, scales, bias);
  at::Tensor output = at::linear(input, weight.to(at::kFloat));
  if (detail::has(scales)) output = at::mul(output, *scales);
  if (detail::has(bias)) output = at::add(output, *bias);
  return output;
}

namespace {

// dL/dX = (dL/dY · diag(scales)) · float(W); dL/db = dL/dY summed over all but the last dim.
// Written with ATen ops, so that a gradient with create_graph=True is itself differentiable.
struct CompressedLinearFunction : torch::autograd::Function<CompressedLinearFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const std::optional<at::Tensor>& scales,
                            const std::optional<at::Tensor>& bias) {
    ctx->save_for_backward({weight, detail::has(scales) ? *scales : at::Tensor()});
    // needs_input_grad counts the tensors given (an absent optional is not one).
    if (detail::has(bias)) ctx->saved_data["bias_input"] = detail::has(scales) ? 3 : 2;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return compressed_linear(input, weight, scales, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& weight = saved[0];
    const at::Tensor& scales = saved[1];
    const at::Tensor& grad_output = grads[0];
    at::Tensor grad_input, grad_bias;
    if (grad_output.defined() && ctx->needs_input_grad(0)) {
      const at::Tensor scaled = scales.defined() ? at::mul(grad_output, scales) : grad_output;
      grad_input = at::matmul(scaled, weight.to(at::kFloat));
    }
    const auto bias_input = ctx->saved_data.find("bias_input");
    if (grad_output.defined() && bias_input != ctx->saved_data.end() &&
        ctx->needs_input_grad(bias_input->second.toInt())) {
      grad_bias = grad_output.dim() == 1 ? grad_output : grad_output.flatten(0, -2).sum(0);
    }
    return {grad_input, at::Tensor(), at::Tensor(), grad_bias};
  }
};

at::Tensor compressed_linear_autograd(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& scales,
                                      const std::optional<at::Tensor>& bias) {
  if (weight.requires_grad() || (detail::has(scales) && scales->requires_grad())) {
    message::fail("eml::compressed_linear",
                  "compressed weights are frozen: weight and scales must not require grad "
                  "(gradients flow to input and bias only)");
  }
  return CompressedLinearFunction::apply(input, weight, scales, bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, CompositeExplicitAutograd, m) {
  m.impl("compressed_linear", &compressed_linear_aten);
}

TORCH_LIBRARY_IMPL(eml, Autograd, m) {
  m.impl("compressed_linear", &compressed_linear_autograd);
}

}  // namespace eml::ops

// Schemas of the eml:: operators, their C++ entry points, and the checks that
// every kernel (composite, CPU, autograd) runs first.
#include "ops/linear.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace eml::ops {

TORCH_LIBRARY(eml, m) {
  // These schemas are fixed: saved TorchScript models refer to them.
  m.def("linear_forward(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def(
      "linear_backward(Tensor grad_output, Tensor input, Tensor weight, bool[3] output_mask) "
      "-> (Tensor, Tensor, Tensor)");
  m.def("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
}

at::Tensor linear_forward(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("eml::linear_forward", "")
                       .typed<decltype(linear_forward)>();
  return op.call(input, weight, bias);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(const at::Tensor& grad_output,
                                                               const at::Tensor& input,
                                                               const at::Tensor& weight,
                                                               std::array<bool, 3> output_mask) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("eml::linear_backward", "")
                       .typed<decltype(linear_backward)>();
  return op.call(grad_output, input, weight, output_mask);
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias) {
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("eml::linear", "").typed<decltype(linear)>();
  return op.call(input, weight, bias);
}

namespace detail {

void check_linear_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(input.dim() >= 1, op, ": input must have at least 1 dimension [*, in_features], got ",
              input.dim(), "-D input of shape ", input.sizes());
  TORCH_CHECK(weight.dim() == 2, op, ": weight must be 2-D [out_features, in_features], got ",
              weight.dim(), "-D weight of shape ", weight.sizes());
  TORCH_CHECK(input.sym_size(-1) == weight.sym_size(1), op,
              ": in_features mismatch: input of shape ", input.sym_sizes(),
              " has ", input.sym_size(-1), " features, weight of shape ", weight.sym_sizes(),
              " expects ", weight.sym_size(1));
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), op,
              ": input and weight must have the same dtype, got input ", input.scalar_type(),
              " ", input.sym_sizes(), " and weight ", weight.scalar_type(), " ", weight.sym_sizes());
  TORCH_CHECK(input.device() == weight.device(), op,
              ": input and weight must be on the same device, got input on ", input.device(),
              " and weight on ", weight.device());
  if (!bias.has_value() || !bias->defined()) return;
  TORCH_CHECK(bias->dim() == 1 && bias->sym_size(0) == weight.sym_size(0), op,
              ": bias must be 1-D [out_features] = [", weight.sym_size(0), "] for weight of shape ",
              weight.sym_sizes(), ", got bias of shape ", bias->sym_sizes());
  TORCH_CHECK(bias->scalar_type() == weight.scalar_type(), op,
              ": bias must have the dtype of weight, got bias ", bias->scalar_type(),
              " and weight ", weight.scalar_type());
  TORCH_CHECK(bias->device() == weight.device(), op,
              ": bias must be on the device of weight, got bias on ", bias->device(),
              " and weight on ", weight.device());
}

void check_linear_backward_args(const char* op, const at::Tensor& grad_output,
                                const at::Tensor& input, const at::Tensor& weight) {
  check_linear_args(op, input, weight, std::nullopt);
  auto expected = input.sym_sizes().vec();
  expected.back() = weight.sym_size(0);
  TORCH_CHECK(grad_output.sym_sizes() == c10::SymIntArrayRef(expected), op,
              ": grad_output must have shape ", c10::SymIntArrayRef(expected),
              " (input ", input.sym_sizes(), " with the last dim replaced by out_features of weight ",
              weight.sym_sizes(), "), got ", grad_output.sym_sizes());
  TORCH_CHECK(grad_output.scalar_type() == input.scalar_type(), op,
              ": grad_output must have the dtype of input, got ", grad_output.scalar_type(),
              " and ", input.scalar_type());
  TORCH_CHECK(grad_output.device() == input.device(), op,
              ": grad_output must be on the device of input, got ", grad_output.device(), " and ",
              input.device());
}

std::vector<int64_t> linear_output_shape(const at::Tensor& input, const at::Tensor& weight) {
  auto shape = input.sizes().vec();
  shape.back() = weight.size(0);
  return shape;
}

}  // namespace detail
}  // namespace eml::ops

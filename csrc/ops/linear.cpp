// Schemas of the eml:: operators, their C++ entry points, and the checks that
// every kernel (composite, CPU, autograd) runs first.
#include "ops/linear.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

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
namespace {

// Error messages are built here from std::string alone and handed to TORCH_CHECK as one
// string: streaming IntArrayRef/SymIntArrayRef into TORCH_CHECK segfaults with some torch
// builds and compilers (torch 2.11.0+cu130 with g++ 13.3), a plain string never does.

std::string sym_int_string(const c10::SymInt& value) {
  if (auto concrete = value.maybe_as_int()) return std::to_string(*concrete);
  return value.toSymNode()->str();  // a symbolic size under torch.compile: its expression
}

// "[4, 5]", as torch prints sizes.
std::string shape_string(c10::SymIntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) text += ", ";
    text += sym_int_string(sizes[i]);
  }
  return text + "]";
}

std::string shape_string(const at::Tensor& tensor) { return shape_string(tensor.sym_sizes()); }

std::string dtype_string(const at::Tensor& tensor) {
  return c10::toString(tensor.scalar_type());  // "Float", as torch prints ScalarType
}

std::string device_string(const at::Tensor& tensor) { return tensor.device().str(); }

[[noreturn]] void fail(const char* op, const std::string& message) {
  TORCH_CHECK(false, std::string(op) + ": " + message);
}

}  // namespace

void check_linear_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias) {
  if (input.dim() < 1) {
    fail(op, "input must have at least 1 dimension [*, in_features], got " +
                 std::to_string(input.dim()) + "-D input of shape " + shape_string(input));
  }
  if (weight.dim() != 2) {
    fail(op, "weight must be 2-D [out_features, in_features], got " +
                 std::to_string(weight.dim()) + "-D weight of shape " + shape_string(weight));
  }
  if (input.sym_size(-1) != weight.sym_size(1)) {
    fail(op, "in_features mismatch: input of shape " + shape_string(input) + " has " +
                 sym_int_string(input.sym_size(-1)) + " features, weight of shape " +
                 shape_string(weight) + " expects " + sym_int_string(weight.sym_size(1)));
  }
  if (input.scalar_type() != weight.scalar_type()) {
    fail(op, "input and weight must have the same dtype, got input " + dtype_string(input) + " " +
                 shape_string(input) + " and weight " + dtype_string(weight) + " " +
                 shape_string(weight));
  }
  if (input.device() != weight.device()) {
    fail(op, "input and weight must be on the same device, got input on " +
                 device_string(input) + " and weight on " + device_string(weight));
  }
  if (!bias.has_value() || !bias->defined()) return;
  if (bias->dim() != 1 || bias->sym_size(0) != weight.sym_size(0)) {
    fail(op, "bias must be 1-D [out_features] = [" + sym_int_string(weight.sym_size(0)) +
                 "] for weight of shape " + shape_string(weight) + ", got bias of shape " +
                 shape_string(*bias));
  }
  if (bias->scalar_type() != weight.scalar_type()) {
    fail(op, "bias must have the dtype of weight, got bias " + dtype_string(*bias) +
                 " and weight " + dtype_string(weight));
  }
  if (bias->device() != weight.device()) {
    fail(op, "bias must be on the device of weight, got bias on " + device_string(*bias) +
                 " and weight on " + device_string(weight));
  }
}

void check_linear_backward_args(const char* op, const at::Tensor& grad_output,
                                const at::Tensor& input, const at::Tensor& weight) {
  check_linear_args(op, input, weight, std::nullopt);
  auto expected = input.sym_sizes().vec();
  expected.back() = weight.sym_size(0);
  if (grad_output.sym_sizes() != c10::SymIntArrayRef(expected)) {
    fail(op, "grad_output must have shape " + shape_string(expected) + " (input " +
                 shape_string(input) + " with the last dim replaced by out_features of weight " +
                 shape_string(weight) + "), got " + shape_string(grad_output));
  }
  if (grad_output.scalar_type() != input.scalar_type()) {
    fail(op, "grad_output must have the dtype of input, got " + dtype_string(grad_output) +
                 " and " + dtype_string(input));
  }
  if (grad_output.device() != input.device()) {
    fail(op, "grad_output must be on the device of input, got " + device_string(grad_output) +
                 " and " + device_string(input));
  }
}

std::vector<int64_t> linear_output_shape(const at::Tensor& input, const at::Tensor& weight) {
  auto shape = input.sizes().vec();
  shape.back() = weight.size(0);
  return shape;
}

}  // namespace detail
}  // namespace eml::ops

// Schemas of the eml:: operators, their C++ entry points, and the argument checks:
// every kernel below autograd (composite, CPU) runs them first, and eml::linear's
// autograd kernel, whose errors name eml::linear.
#include "ops/linear.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

#include "ops/message.h"

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
using message::device;
using message::dtype;
using message::fail;
using message::shape;
using message::sym_int;

void check_linear_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias) {
  if (input.dim() < 1) {
    fail(op, "input must have at least 1 dimension [*, in_features], got " +
                 std::to_string(input.dim()) + "-D input of shape " + shape(input));
  }
  if (weight.dim() != 2) {
    fail(op, "weight must be 2-D [out_features, in_features], got " +
                 std::to_string(weight.dim()) + "-D weight of shape " + shape(weight));
  }
  if (input.sym_size(-1) != weight.sym_size(1)) {
    fail(op, "in_features mismatch: input of shape " + shape(input) + " has " +
                 sym_int(input.sym_size(-1)) + " features, weight of shape " +
                 shape(weight) + " expects " + sym_int(weight.sym_size(1)));
  }
  if (input.scalar_type() != weight.scalar_type()) {
    fail(op, "input and weight must have the same dtype, got input " + dtype(input) + " " +
                 shape(input) + " and weight " + dtype(weight) + " " +
                 shape(weight));
  }
  if (input.device() != weight.device()) {
    fail(op, "input and weight must be on the same device, got input on " +
                 device(input) + " and weight on " + device(weight));
  }
  if (!bias.has_value() || !bias->defined()) return;
  if (bias->dim() != 1 || bias->sym_size(0) != weight.sym_size(0)) {
    fail(op, "bias must be 1-D [out_features] = [" + sym_int(weight.sym_size(0)) +
                 "] for weight of shape " + shape(weight) + ", got bias of shape " +
                 shape(*bias));
  }
  if (bias->scalar_type() != weight.scalar_type()) {
    fail(op, "bias must have the dtype of weight, got bias " + dtype(*bias) +
                 " and weight " + dtype(weight));
  }
  if (bias->device() != weight.device()) {
    fail(op, "bias must be on the device of weight, got bias on " + device(*bias) +
                 " and weight on " + device(weight));
  }
}

void check_linear_backward_args(const char* op, const at::Tensor& grad_output,
                                const at::Tensor& input, const at::Tensor& weight) {
  check_linear_args(op, input, weight, std::nullopt);
  auto expected = input.sym_sizes().vec();
  expected.back() = weight.sym_size(0);
  if (grad_output.sym_sizes() != c10::SymIntArrayRef(expected)) {
    fail(op, "grad_output must have shape " + message::list(c10::SymIntArrayRef(expected)) + " (input " +
                 shape(input) + " with the last dim replaced by out_features of weight " +
                 shape(weight) + "), got " + shape(grad_output));
  }
  if (grad_output.scalar_type() != input.scalar_type()) {
    fail(op, "grad_output must have the dtype of input, got " + dtype(grad_output) +
                 " and " + dtype(input));
  }
  if (grad_output.device() != input.device()) {
    fail(op, "grad_output must be on the device of input, got " + device(grad_output) +
                 " and " + device(input));
  }
}

at::Tensor as_matrix(const at::Tensor& tensor) {
  c10::SymInt rows = 1;
  for (int64_t dim = 0; dim + 1 < tensor.dim(); ++dim) rows *= tensor.sym_size(dim);
  return tensor.reshape_symint({rows, tensor.sym_size(-1)});
}

std::vector<int64_t> linear_output_shape(const at::Tensor& input, const at::Tensor& weight) {
  auto shape = input.sizes().vec();
  shape.back() = weight.size(0);
  return shape;
}

}  // namespace detail
}  // namespace eml::ops

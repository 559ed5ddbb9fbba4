// The eml:: linear operators: C++ entry points (through the dispatcher) and the
// argument checks every kernel runs. Schemas live in linear.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <tuple>

namespace eml::ops {

// eml::linear_forward(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor
at::Tensor linear_forward(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias);

// eml::linear_backward(Tensor grad_output, Tensor input, Tensor weight, bool[3] output_mask)
//   -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias); masked-off entries are undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(const at::Tensor& grad_output,
                                                               const at::Tensor& input,
                                                               const at::Tensor& weight,
                                                               std::array<bool, 3> output_mask);

// eml::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor: differentiable.
at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias);

namespace detail {

// F.linear's contract: input [*, in] (at least 1-D), weight [out, in], bias [out];
// one dtype and one device. Throws c10::Error naming `op` and the shapes.
void check_linear_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias);

// The above for input and weight, plus grad_output of shape [*, out] matching input's [*].
void check_linear_backward_args(const char* op, const at::Tensor& grad_output,
                                const at::Tensor& input, const at::Tensor& weight);

// [*, n] (at least 1-D) as the 2-D [rows, n], a view whenever strides allow. reshape
// rather than flatten: the legacy vmap that gradcheck's batched forward-grad check runs
// has a batching rule for reshape, none for flatten.
at::Tensor as_matrix(const at::Tensor& tensor);

// The shape of linear(input, weight): input's shape with the last entry replaced by out.
std::vector<int64_t> linear_output_shape(const at::Tensor& input, const at::Tensor& weight);

}  // namespace detail
}  // namespace eml::ops

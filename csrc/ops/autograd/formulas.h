// The derivatives of y = x W^T (+ b), written with the eml:: ops themselves (called through
// the dispatcher, above autograd), so that every result is differentiable again: double and
// higher backward, forward-over-reverse and reverse-over-forward all stay on our GEMMs.
// An undefined tensor stands for a zero gradient or tangent, as in PyTorch's autograd.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>

namespace eml::ops::autograd {

// dL/dX = G · W = linear(G, W^T): input's shape [*, in] for G = dL/dY of shape [*, out].
at::Tensor input_grad(const at::Tensor& grad_output, const at::Tensor& weight);

// dL/dW = G^T · X over all rows = linear(G^T, X^T): [out, in].
at::Tensor weight_grad(const at::Tensor& grad_output, const at::Tensor& input);

// dL/db = column sums of G: [out].
at::Tensor bias_grad(const at::Tensor& grad_output);

// The directional derivative of linear(x, W, b): linear(dx, W, db) + linear(x, dW), of shape
// `output_sizes`; undefined tangents are zero, and the result is undefined if all are.
at::Tensor linear_tangent(const at::Tensor& input, const at::Tensor& input_tangent,
                          const at::Tensor& weight, const at::Tensor& weight_tangent,
                          const at::Tensor& bias_tangent, c10::SymIntArrayRef output_sizes);

// a + b where an undefined tensor is zero.
at::Tensor add_defined(const at::Tensor& a, const at::Tensor& b);

}  // namespace eml::ops::autograd

// The ATen ("aten" backend) implementations of the eml:: ops. Registered at
// CompositeExplicitAutograd, they serve every device without a kernel of its own
// (CUDA, meta and fake tensors); the CPU kernel calls them for the aten backend
// and for dtypes our GEMMs do not cover.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <tuple>

namespace eml::ops::composite {

at::Tensor linear_forward_aten(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias);

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_aten(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    std::array<bool, 3> output_mask);

}  // namespace eml::ops::composite

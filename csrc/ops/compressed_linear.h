// eml::compressed_linear: float32 activations times weights stored in int8 (one float32
// scale per output channel) or in bfloat16 / float16. Schema in compressed_linear.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace eml::ops {

// eml::compressed_linear(Tensor input, Tensor weight, Tensor? scales, Tensor? bias=None)
//   -> Tensor: y = (x · float(weight)^T) * scales + bias, float32. Differentiable in input and
//   bias; weight and scales are frozen (an error if they require grad).
at::Tensor compressed_linear(const at::Tensor& input, const at::Tensor& weight,
                             const std::optional<at::Tensor>& scales,
                             const std::optional<at::Tensor>& bias);

// The ATen kernel (every device; meta and fake tensors): what the CPU kernel runs for the
// aten backend.
at::Tensor compressed_linear_aten(const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& scales,
                                  const std::optional<at::Tensor>& bias);

namespace detail {

// input float32 [*, in]; weight [out, in] contiguous, int8 (then scales float32 [out]
// required) or bfloat16 / float16 (then no scales); bias float32 [out]; one device.
// Throws c10::Error naming eml::compressed_linear and the shapes.
void check_compressed_linear_args(const at::Tensor& input, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& scales,
                                  const std::optional<at::Tensor>& bias);

}  // namespace detail
}  // namespace eml::ops

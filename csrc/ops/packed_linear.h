// eml::pack_weight and eml::linear_packed: a frozen weight packed once into the GEMM's panels
// (gemm::prepack_b, gemm/blocked/blocked_gemm.h), then multiplied without packing it again on
// every call. Inference only. Schemas in packed_linear.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace eml::ops {

// eml::pack_weight(Tensor weight) -> (Tensor, int): weight [out, in] (float32 or float64, CPU
//   or meta) packed as [in, padded_out] (padded_out: out rounded up to the panel width),
//   and the depth of its blocks of steps (block_k). A constant: no gradient flows through it.
std::tuple<at::Tensor, int64_t> pack_weight(const at::Tensor& weight);

// eml::linear_packed(Tensor input, Tensor packed_weight, int block_k, int out_features,
//   Tensor? bias=None) -> Tensor: F.linear(input, weight, bias) for the weight that
//   pack_weight packed. Computes no gradients (an error where one is needed).
at::Tensor linear_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                         int64_t block_k, int64_t out_features,
                         const std::optional<at::Tensor>& bias);

namespace detail {

// The width pack_weight pads out_features to, for float32 or float64.
int64_t padded_out_features(int64_t out_features, at::ScalarType dtype);

// weight 2-D, float32 or float64. Throws c10::Error naming eml::pack_weight and the shape.
void check_pack_weight_args(const at::Tensor& weight);

// input [*, in] float32 or float64; packed_weight [in, padded_out] of its dtype, contiguous;
// block_k >= 1; bias [out_features] of its dtype; one device. Throws c10::Error naming
// eml::linear_packed and the shapes.
void check_linear_packed_args(const at::Tensor& input, const at::Tensor& packed_weight,
                              int64_t block_k, int64_t out_features,
                              const std::optional<at::Tensor>& bias);

}  // namespace detail
}  // namespace eml::ops

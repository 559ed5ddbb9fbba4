// eml::pack_weight and eml::linear_packed (packed_linear.h): schemas, argument checks, the
// Meta kernels (shapes for fake tensors: torch.compile, torch.export) and the autograd
// kernels (a packed weight is a constant; linear_packed refuses to be differentiated). The
// CPU kernels, on our GEMM, are in cpu/packed_linear_kernel.cpp.
#include "ops/packed_linear.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "gemm/blocked/blocked_gemm.h"
#include "ops/message.h"

namespace eml::ops {

TORCH_LIBRARY_FRAGMENT(eml, m) {
  // Fixed schemas: saved TorchScript models refer to them.
  m.def("pack_weight(Tensor weight) -> (Tensor, int)");
  m.def(
      "linear_packed(Tensor input, Tensor packed_weight, int block_k, int out_features, "
      "Tensor? bias=None) -> Tensor");
}

std::tuple<at::Tensor, int64_t> pack_weight(const at::Tensor& weight) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("eml::pack_weight", "")
                       .typed<decltype(pack_weight)>();
  return op.call(weight);
}

at::Tensor linear_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                         int64_t block_k, int64_t out_features,
                         const std::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("eml::linear_packed", "")
                       .typed<decltype(linear_packed)>();
  return op.call(input, packed_weight, block_k, out_features, bias);
}

namespace detail {
using message::device;
using message::dtype;
using message::fail;
using message::shape;
using message::strides;
using message::sym_int;

namespace {

constexpr const char* kPack = "eml::pack_weight";
constexpr const char* kOp = "eml::linear_packed";

bool is_packable(at::ScalarType type) { return type == at::kFloat || type == at::kDouble; }

}  // namespace

int64_t padded_out_features(int64_t out_features, at::ScalarType dtype) {
  return dtype == at::kDouble ? gemm::prepacked_b_size<double>(1, out_features)
                              : gemm::prepacked_b_size<float>(1, out_features);
}

void check_pack_weight_args(const at::Tensor& weight) {
  if (weight.dim() != 2) {
    fail(kPack, "weight must be 2-D [out_features, in_features], got " +
                    std::to_string(weight.dim()) + "-D weight of shape " + shape(weight));
  }
  if (!is_packable(weight.scalar_type())) {
    fail(kPack, "weight must be float32 or float64, got " + dtype(weight) + " " + shape(weight));
  }
}

void check_linear_packed_args(const at::Tensor& input, const at::Tensor& packed_weight,
                              int64_t block_k, int64_t out_features,
                              const std::optional<at::Tensor>& bias) {
  if (input.dim() < 1) {
    fail(kOp, "input must have at least 1 dimension [*, in_features], got " +
                  std::to_string(input.dim()) + "-D input of shape " + shape(input));
  }
  if (!is_packable(input.scalar_type())) {
    fail(kOp, "input must be float32 or float64, got " + dtype(input) + " " + shape(input));
  }
  if (packed_weight.scalar_type() != input.scalar_type()) {
    fail(kOp, "input and packed_weight must have the same dtype, got input " + dtype(input) +
                  " and packed_weight " + dtype(packed_weight));
  }
  if (out_features < 0 || block_k < 1) {
    fail(kOp, "out_features must be >= 0 and block_k >= 1, got out_features " +
                  std::to_string(out_features) + " and block_k " + std::to_string(block_k));
  }
  const int64_t padded = padded_out_features(out_features, input.scalar_type());
  if (packed_weight.dim() != 2 || packed_weight.sym_size(0) != input.sym_size(-1) ||
      packed_weight.sym_size(1) != padded) {
    fail(kOp, "packed_weight must be [in_features, padded out_features] = [" +
                  sym_int(input.sym_size(-1)) + ", " + std::to_string(padded) +
                  "] (eml::pack_weight's) for input of shape " + shape(input) +
                  " and out_features " + std::to_string(out_features) + ", got " +
                  shape(packed_weight));
  }
  if (!packed_weight.is_contiguous()) {
    fail(kOp, "packed_weight must be contiguous, got strides " + strides(packed_weight));
  }
  if (input.device() != packed_weight.device()) {
    fail(kOp, "input and packed_weight must be on the same device, got input on " +
                  device(input) + " and packed_weight on " + device(packed_weight));
  }
  if (bias.has_value() && bias->defined()) {
    if (bias->dim() != 1 || bias->sym_size(0) != out_features) {
      fail(kOp, "bias must be 1-D [out_features] = [" + std::to_string(out_features) +
                    "], got bias of shape " + shape(*bias));
    }
    if (bias->scalar_type() != input.scalar_type() || bias->device() != input.device()) {
      fail(kOp, "bias must have input's dtype and device, got bias " + dtype(*bias) + " on " +
                    device(*bias) + " and input " + dtype(input) + " on " + device(input));
    }
  }
}

}  // namespace detail

namespace {

int64_t block_depth(const at::Tensor& weight) {
  const int64_t k = weight.size(1);
  return weight.scalar_type() == at::kDouble ? gemm::prepack_depth<double>(k)
                                             : gemm::prepack_depth<float>(k);
}

std::tuple<at::Tensor, int64_t> pack_weight_meta(const at::Tensor& weight) {
  detail::check_pack_weight_args(weight);
  const int64_t padded = detail::padded_out_features(weight.size(0), weight.scalar_type());
  return {at::empty({weight.size(1), padded}, weight.options()), block_depth(weight)};
}

at::Tensor linear_packed_meta(const at::Tensor& input, const at::Tensor& packed_weight,
                              int64_t block_k, int64_t out_features,
                              const std::optional<at::Tensor>& bias) {
  detail::check_linear_packed_args(input, packed_weight, block_k, out_features, bias);
  std::vector<c10::SymInt> sizes = input.sym_sizes().vec();
  sizes.back() = out_features;
  return at::empty_symint(sizes, input.options());
}

// The packed copy is a constant: packed from the weight's data, with no graph behind it.
std::tuple<at::Tensor, int64_t> pack_weight_autograd(const at::Tensor& weight) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return pack_weight(weight.detach());
}

at::Tensor linear_packed_autograd(const at::Tensor& input, const at::Tensor& packed_weight,
                                  int64_t block_k, int64_t out_features,
                                  const std::optional<at::Tensor>& bias) {
  const bool bias_needs_grad = bias.has_value() && bias->defined() && bias->requires_grad();
  if (c10::GradMode::is_enabled() &&
      (input.requires_grad() || packed_weight.requires_grad() || bias_needs_grad)) {
    message::fail("eml::linear_packed", "computes no gradients (a packed weight is frozen for "
                             "inference): call it under torch.no_grad(), or use eml::linear");
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return linear_packed(input, packed_weight, block_k, out_features, bias);
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, Meta, m) {
  m.impl("pack_weight", &pack_weight_meta);
  m.impl("linear_packed", &linear_packed_meta);
}

TORCH_LIBRARY_IMPL(eml, Autograd, m) {
  m.impl("pack_weight", &pack_weight_autograd);
  m.impl("linear_packed", &linear_packed_autograd);
}

}  // namespace eml::ops

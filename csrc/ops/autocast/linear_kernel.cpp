// Autocast kernels of eml::linear: under torch.autocast the op casts its floating
// inputs to the autocast dtype, as aten::linear (a "lower precision" op) does.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "ops/linear.h"

namespace eml::ops::autocast {
namespace {

template <c10::DeviceType device_type, c10::DispatchKey autocast_key>
at::Tensor linear_autocast(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(autocast_key);
  const at::ScalarType dtype = at::autocast::get_autocast_dtype(device_type);
  return ops::linear(at::autocast::cached_cast(dtype, input, device_type),
                     at::autocast::cached_cast(dtype, weight, device_type),
                     at::autocast::cached_cast(dtype, bias, device_type));
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, AutocastCPU, m) {
  m.impl("linear", &linear_autocast<c10::DeviceType::CPU, c10::DispatchKey::AutocastCPU>);
}

TORCH_LIBRARY_IMPL(eml, AutocastCUDA, m) {
  m.impl("linear", &linear_autocast<c10::DeviceType::CUDA, c10::DispatchKey::AutocastCUDA>);
}

}  // namespace eml::ops::autocast

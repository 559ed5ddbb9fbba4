// The public C++ API (include/eml_ops/eml_ops.h) over the ops and the controls.
#include "eml_ops/eml_ops.h"

#include <torch/headeronly/version.h>

#include <stdexcept>

#include "gemm/backend.h"
#include "gemm/isa.h"
#include "ops/linear.h"

// setup.py passes the package version (pyproject.toml) as numbers.
#ifndef EML_OPS_VERSION_MAJOR
#error "build eml_ops with setup.py: EML_OPS_VERSION_{MAJOR,MINOR,PATCH} are not defined"
#endif

namespace eml_ops {
namespace {

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

std::string version() {
  return dotted(EML_OPS_VERSION_MAJOR, EML_OPS_VERSION_MINOR, EML_OPS_VERSION_PATCH);
}

std::string torch_version() {
  return dotted(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias) {
  return eml::ops::linear(input, weight, bias);
}

at::Tensor linear_forward(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias) {
  return eml::ops::linear_forward(input, weight, bias);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(const at::Tensor& grad_output,
                                                               const at::Tensor& input,
                                                               const at::Tensor& weight,
                                                               std::array<bool, 3> output_mask) {
  return eml::ops::linear_backward(grad_output, input, weight, output_mask);
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (eml::Backend backend : eml::available_backends()) names.emplace_back(eml::backend_name(backend));
  return names;
}

std::string get_backend() { return eml::backend_name(eml::current_backend()); }

void set_backend(const std::string& name) { eml::set_process_backend(name); }

std::string detected_isa() { return eml::gemm::isa_name(eml::gemm::detected_isa()); }

std::string get_isa() { return eml::gemm::isa_name(eml::gemm::active_isa()); }

void set_isa(const std::string& name) {
  for (eml::gemm::Isa isa : eml::gemm::kAllIsas) {
    if (name == eml::gemm::isa_name(isa)) return eml::gemm::set_active_isa(isa);
  }
  throw std::invalid_argument("eml_ops: unknown ISA '" + name +
                              "'; choose generic, avx2 or avx512");
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (eml::gemm::Isa isa : eml::gemm::kAllIsas) {
    if (eml::gemm::isa_supported(isa)) names.emplace_back(eml::gemm::isa_name(isa));
  }
  return names;
}

}  // namespace eml_ops

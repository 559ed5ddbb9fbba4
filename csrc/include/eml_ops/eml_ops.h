// eml_ops for C++ programs: the public API of libeml_ops.so.
//
// Linking libeml_ops.so registers the operators eml::linear, eml::linear_forward and
// eml::linear_backward with libtorch's dispatcher, so TorchScript models saved from Python
// (eml_ops.Layer) load and train with torch::jit::load. With CMake:
//
//   find_package(Torch REQUIRED)
//   find_package(eml_ops REQUIRED)   # CMAKE_PREFIX_PATH += `python -m eml_ops cmake-prefix`
//   target_link_libraries(app PRIVATE eml_ops::eml_ops)
//
// Without CMake: -I<prefix>/include, and -Wl,--no-as-needed -leml_ops (a program that calls
// nothing from this header still needs the library for the operators in its models).
//
// The process-wide settings below are the ones EML_OPS_BACKEND and EML_OPS_ISA set at start.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace eml_ops {

// The version of the library, e.g. "0.1.0".
std::string version();
// The torch release the library was built against (e.g. "2.13.0"); only that one loads it.
std::string torch_version();

// y = x W^T (+ b), differentiable (autograd, double backward): eml::linear, with the semantics
// of torch::nn::functional::linear. Bad arguments throw c10::Error naming the op and shapes.
at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias = std::nullopt);
// eml::linear_forward: the same product under its own name. It is differentiable too: its
// autograd kernel records the same backward node as eml::linear's.
at::Tensor linear_forward(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias = std::nullopt);
// eml::linear_backward: {dL/dinput, dL/dweight, dL/dbias}; masked-off entries are undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    std::array<bool, 3> output_mask = {true, true, true});

// GEMM backends: "aten", "reference", "blocked" (default: built everywhere, every dtype and
// shape), "tpp" (when built with LIBXSMM; faster than blocked on some shapes, not all).
std::vector<std::string> available_backends();
std::string get_backend();
// Process-wide; throws std::invalid_argument naming the choices for an unknown one.
void set_backend(const std::string& name);

// Micro-kernel ISA of the blocked GEMM: "avx512", "avx2" or "generic".
std::string detected_isa();
// The ISAs this CPU runs, from "generic" up to detected_isa().
std::vector<std::string> supported_isas();
std::string get_isa();
// Throws std::invalid_argument for an unknown ISA or one this CPU lacks.
void set_isa(const std::string& name);

}  // namespace eml_ops

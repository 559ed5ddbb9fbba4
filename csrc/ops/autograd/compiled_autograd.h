// Compiled autograd (torch._dynamo.compiled_autograd) for our Nodes, done as PyTorch's
// generated nodes and C++ custom Functions do it: the node's backward is a free function of
// (gradients, packed saved state), bound with the compiler and called through it: the
// compiled backward graph calls it, and through it our ops.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace eml::ops::autograd {

using torch::dynamo::autograd::PackedArgs;

namespace compiled = torch::dynamo::autograd;

// Registers `functional` with compiled autograd under `name`, once per process (the registry
// is global, as for PyTorch's generated nodes). `schema`: the types of the packed arguments.
inline void bind_once(std::once_flag& bound, compiled::SwapSavedVariables& saved,
                      const std::string& name, torch::autograd::functional_apply_t functional,
                      const std::vector<at::TypePtr>& schema) {
  std::call_once(bound, [&] {
    compiled::getPyCompilerInterface()->bind_function(saved.get_py_compiler(), name,
                                                      std::move(functional), schema);
  });
}

// Calls the functional bound as `node.name()` on `grads` and the packed state.
inline torch::autograd::variable_list call_bound(const torch::autograd::Node& node,
                                                 const torch::autograd::variable_list& grads,
                                                 const PackedArgs& args,
                                                 compiled::SwapSavedVariables& saved) {
  const c10::IValue output_metadata =
      compiled::IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
          compiled::get_input_metadata(node.next_edges()));
  return compiled::getPyCompilerInterface()->call_function(
      saved.get_py_compiler(), "apply_functional", node.name(), grads, args.vec(),
      output_metadata);
}

// A saved tensor for packing: undefined (not saved) becomes None.
inline std::optional<at::Tensor> saved_or_none(const at::Tensor& tensor) {
  return tensor.defined() ? std::optional<at::Tensor>(tensor) : std::nullopt;
}

// The packed type of a T (an entry of a schema).
template <typename T>
at::TypePtr packed_type() {
  return compiled::IValuePacker<T>::packed_type();
}

}  // namespace eml::ops::autograd

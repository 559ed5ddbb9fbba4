// Compiled autograd (torch._dynamo.compiled_autograd) for our Nodes, done as PyTorch's
// generated nodes and C++ custom Functions do it: the node's backward is a free function of
// (gradients, packed saved state), bound with the compiler and called through it: the
// compiled backward graph calls it, and through it our ops.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
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

// What a node packs of one field of its saved state: a saved tensor (None when not saved), or
// the sizes as they are.
inline std::optional<at::Tensor> packed_value(const torch::autograd::SavedVariable& tensor) {
  return saved_or_none(tensor.unpack());
}
inline const std::vector<c10::SymInt>& packed_value(const std::vector<c10::SymInt>& sizes) {
  return sizes;
}

// A node's apply_with_saved: its saved `fields` swapped for the compiler's proxies while the
// mask of gradients to compute and the fields are packed, in that order, for `functional`
// (bound once per node type, through `bound`, as node.name()), which is then called.
template <typename... Fields>
torch::autograd::variable_list apply_functional(const torch::autograd::Node& node,
                                                std::once_flag& bound,
                                                torch::autograd::functional_apply_t functional,
                                                const torch::autograd::variable_list& grads,
                                                compiled::SwapSavedVariables& saved,
                                                const std::array<bool, 3>& mask,
                                                Fields&... fields) {
  (saved.before(fields), ...);
  PackedArgs packed;
  packed.pack(mask);
  (packed.pack(packed_value(fields)), ...);
  bind_once(bound, saved, node.name(), std::move(functional),
            {packed_type<std::array<bool, 3>>(),
             packed_type<std::decay_t<decltype(packed_value(fields))>>()...});
  torch::autograd::variable_list result = call_bound(node, grads, packed, saved);
  (saved.after(fields), ...);
  return result;
}

}  // namespace eml::ops::autograd

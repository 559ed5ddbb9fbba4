// Creating an autograd Node portably: PyTorch holds Nodes in std::shared_ptr (created with
// deleteNode, which frees long graphs without deep recursion) up to torch 2.12 and in
// c10::intrusive_ptr since. We build against both (2.13 here, 2.11 on the CUDA machines).
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace eml::ops::autograd {

inline constexpr bool kNodesAreIntrusive =
    std::is_same_v<decltype(std::declval<torch::autograd::Node&>().getptr()),
                   c10::intrusive_ptr<torch::autograd::Node>>;

// A new T (a Node subclass) in the pointer type this torch's autograd graph uses.
template <typename T>
auto make_node() {
  if constexpr (kNodesAreIntrusive) {
    return c10::make_intrusive<T>();
  } else {
    // deleteNode is found by argument-dependent lookup (torch::autograd) at instantiation,
    // which happens only with a torch that has it.
    return std::shared_ptr<T>(new T(), [](T* node) { deleteNode(node); });
  }
}

// The pointer type make_node<T>() returns.
template <typename T>
using NodePtr = decltype(make_node<T>());

}  // namespace eml::ops::autograd

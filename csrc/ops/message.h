// Error messages from plain strings: shapes, dtypes and devices formatted here, so that
// TORCH_CHECK only ever gets one std::string and no stream of ours formats them. (Streaming
// IntArrayRef into TORCH_CHECK segfaulted on a machine whose compiler linked libstdc++.a into
// our library and exported it, most likely the cause; setup.py now keeps such a copy's
// symbols inside.)
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/Exception.h>

#include <string>

namespace eml::message {

inline std::string sym_int(const c10::SymInt& value) {
  if (auto concrete = value.maybe_as_int()) return std::to_string(*concrete);
  return value.toSymNode()->str();  // a symbolic size under torch.compile: its expression
}

// "[4, 5]", as torch prints sizes (and strides).
template <typename T>
std::string list(c10::ArrayRef<T> values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ", ";
    if constexpr (std::is_same_v<T, c10::SymInt>) {
      text += sym_int(values[i]);
    } else {
      text += std::to_string(values[i]);
    }
  }
  return text + "]";
}

inline std::string shape(const at::Tensor& tensor) { return list(tensor.sym_sizes()); }
inline std::string strides(const at::Tensor& tensor) { return list(tensor.strides()); }
// "Float", as torch prints a ScalarType.
inline std::string dtype(const at::Tensor& tensor) {
  return c10::toString(tensor.scalar_type());
}
// "cpu", "cuda:0", "meta".
inline std::string device(const at::Tensor& tensor) { return tensor.device().str(); }

// Throws c10::Error (RuntimeError in Python) with "<op>: <message>".
[[noreturn]] inline void fail(const std::string& op, const std::string& text) {
  TORCH_CHECK(false, op + ": " + text);
}

}  // namespace eml::message

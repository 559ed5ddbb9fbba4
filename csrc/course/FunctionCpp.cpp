#include "course/FunctionCpp.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <iostream>
#include <string>

#include "gemm/gemm.h"
#include "ops/message.h"

namespace eml::course {

void hello() { std::cout << "Hello World!" << std::endl; }

namespace with_aten {

torch::Tensor forward(torch::Tensor i_input, torch::Tensor i_weight) {
  return torch::matmul(i_input, i_weight.t());
}

std::vector<torch::Tensor> backward(torch::Tensor i_grad, torch::Tensor i_input,
                                    torch::Tensor i_weights) {
  torch::Tensor l_grad_input = torch::matmul(i_grad, i_weights);
  torch::Tensor l_grad_weight = torch::matmul(i_grad.t(), i_input);
  return {l_grad_input, l_grad_weight};
}

}  // namespace with_aten

namespace with_loops {
namespace {

void check_matrix(const char* function, const char* name, const torch::Tensor& tensor) {
  const std::string op = std::string("eml_ops.linear_cpp ") + function;
  if (tensor.dim() != 2 || !tensor.is_contiguous()) {
    message::fail(op, std::string(name) + " must be a contiguous 2-D tensor, got shape " +
                          message::shape(tensor) + " with strides " + message::strides(tensor));
  }
  if (tensor.scalar_type() != torch::kFloat && tensor.scalar_type() != torch::kDouble) {
    message::fail(op, std::string(name) + " must be float32 or float64, got " +
                          message::dtype(tensor));
  }
  if (!tensor.device().is_cpu()) {
    message::fail(op, std::string(name) + " must be on the CPU, got " + message::device(tensor));
  }
}

// A contiguous row-major matrix read through its raw data pointer.
template <typename T>
gemm::ConstMatrixView<T> rows_of(const torch::Tensor& matrix) {
  return {matrix.const_data_ptr<T>(), matrix.size(0), matrix.size(1), matrix.size(1), 1};
}

template <typename T>
gemm::OutputMatrix<T> result_rows_of(torch::Tensor& matrix) {
  return {matrix.mutable_data_ptr<T>(), matrix.size(0), matrix.size(1), matrix.size(1)};
}

// C = A · B for contiguous A and B, where either may be read transposed.
torch::Tensor multiply(const torch::Tensor& a, bool transpose_a, const torch::Tensor& b,
                       bool transpose_b) {
  const int64_t rows = transpose_a ? a.size(1) : a.size(0);
  const int64_t cols = transpose_b ? b.size(0) : b.size(1);
  torch::Tensor result = torch::empty({rows, cols}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "eml_ops.linear_cpp", [&] {
    auto a_view = transpose_a ? rows_of<scalar_t>(a).transposed() : rows_of<scalar_t>(a);
    auto b_view = transpose_b ? rows_of<scalar_t>(b).transposed() : rows_of<scalar_t>(b);
    gemm::reference_gemm(a_view, b_view, result_rows_of<scalar_t>(result));
  });
  return result;
}

}  // namespace

torch::Tensor forward(torch::Tensor i_input, torch::Tensor i_weight) {
  check_matrix("forward", "input", i_input);
  check_matrix("forward", "weight", i_weight);
  if (i_input.size(1) != i_weight.size(1) || i_input.scalar_type() != i_weight.scalar_type()) {
    message::fail("eml_ops.linear_cpp forward",
                  "input " + message::shape(i_input) + " " + message::dtype(i_input) +
                      " does not fit weight " + message::shape(i_weight) + " " +
                      message::dtype(i_weight));
  }
  return multiply(i_input, false, i_weight, true);
}

std::vector<torch::Tensor> backward(torch::Tensor i_grad, torch::Tensor i_input,
                                    torch::Tensor i_weights) {
  check_matrix("backward", "grad", i_grad);
  check_matrix("backward", "input", i_input);
  check_matrix("backward", "weights", i_weights);
  if (i_grad.size(0) != i_input.size(0) || i_grad.size(1) != i_weights.size(0) ||
      i_input.size(1) != i_weights.size(1) || i_grad.scalar_type() != i_input.scalar_type() ||
      i_input.scalar_type() != i_weights.scalar_type()) {
    message::fail("eml_ops.linear_cpp backward",
                  "grad " + message::shape(i_grad) + ", input " + message::shape(i_input) +
                      " and weights " + message::shape(i_weights) +
                      " do not fit (or differ in dtype)");
  }
  return {multiply(i_grad, false, i_weights, false), multiply(i_grad, true, i_input, false)};
}

}  // namespace with_loops
}  // namespace eml::course

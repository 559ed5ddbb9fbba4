// CPU kernels of eml::linear_forward and eml::linear_backward: translate tensors
// into strided matrix views and run the selected GEMM backend on them.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "gemm/blocked_gemm.h"
#include "gemm/gemm.h"
#include "ops/backend.h"
#include "ops/composite/linear_kernel.h"
#include "ops/linear.h"
#ifdef EML_OPS_WITH_LIBXSMM
#include "gemm/tpp/tpp_gemm.h"
#endif

namespace eml::ops::cpu {
namespace {

using composite::as_matrix;

constexpr int64_t kTppMinRowsAndCols = 4;

// Our GEMMs cover float32 and float64; everything else goes through ATen.
bool runs_on_own_gemm(Backend backend, at::ScalarType dtype) {
  return backend != Backend::aten &&
         (dtype == at::ScalarType::Float || dtype == at::ScalarType::Double);
}

// A 2-D tensor as a read-only view; its strides are taken as they are, never assumed.
template <typename T>
gemm::ConstMatrixView<T> matrix_view(const at::Tensor& matrix) {
  TORCH_INTERNAL_ASSERT(matrix.dim() == 2);
  return {matrix.const_data_ptr<T>(), matrix.size(0), matrix.size(1), matrix.stride(0),
          matrix.stride(1)};
}

// A freshly allocated, contiguous 2-D result.
template <typename T>
gemm::OutputMatrix<T> output_matrix(at::Tensor& matrix) {
  TORCH_INTERNAL_ASSERT(matrix.dim() == 2 && matrix.is_contiguous());
  return {matrix.mutable_data_ptr<T>(), matrix.size(0), matrix.size(1), matrix.size(1)};
}

// torch's intra-op thread pool, so torch.set_num_threads applies to our GEMMs too.
gemm::Threading torch_threading() {
  gemm::Threading threading;
  threading.num_threads = at::get_num_threads();
  threading.parallel_for = [](int64_t begin, int64_t end,
                              const std::function<void(int64_t, int64_t)>& body) {
    at::parallel_for(begin, end, /*grain_size=*/1, body);
  };
  return threading;
}

template <typename T>
void run_gemm(Backend backend, gemm::ConstMatrixView<T> a, gemm::ConstMatrixView<T> b,
              gemm::OutputMatrix<T> c, const gemm::Epilogue<T>& epilogue) {
  switch (backend) {
    case Backend::reference:
      gemm::reference_gemm(a, b, c, epilogue);
      return;
    case Backend::tpp:
#ifdef EML_OPS_WITH_LIBXSMM
      // Matrix-vector shapes (fewer than 4 rows or columns of C) run near scalar speed in
      // LIBXSMM 1.17's kernels; the blocked GEMM has streaming paths for them.
      if (std::min(c.rows, c.cols) >= kTppMinRowsAndCols &&
          gemm::tpp_gemm(a, b, c, epilogue, torch_threading())) {
        return;
      }
#endif
      [[fallthrough]];  // no JIT kernel for this shape: our blocked GEMM instead
    case Backend::blocked:
    case Backend::aten:
      gemm::blocked_gemm(a, b, c, epilogue, torch_threading());
      return;
  }
}

at::Tensor linear_forward_cpu(const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias) {
  const Backend backend = current_backend();
  if (!runs_on_own_gemm(backend, input.scalar_type())) {
    return composite::linear_forward_aten(input, weight, bias);
  }
  detail::check_linear_args("eml::linear_forward", input, weight, bias);
  const at::Tensor input_2d = as_matrix(input);
  const bool has_bias = bias.has_value() && bias->defined();
  const at::Tensor bias_contiguous = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor output = at::empty({input_2d.size(0), weight.size(0)}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "eml::linear_forward", [&] {
    gemm::Epilogue<scalar_t> epilogue;
    epilogue.bias = has_bias ? bias_contiguous.const_data_ptr<scalar_t>() : nullptr;
    // Y = X · W^T: W^T is W's memory with its strides swapped, no copy.
    run_gemm<scalar_t>(backend, matrix_view<scalar_t>(input_2d),
                       matrix_view<scalar_t>(weight).transposed(),
                       output_matrix<scalar_t>(output), epilogue);
  });
  return output.view(detail::linear_output_shape(input, weight));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    std::array<bool, 3> output_mask) {
  const Backend backend = current_backend();
  if (!runs_on_own_gemm(backend, input.scalar_type())) {
    return composite::linear_backward_aten(grad_output, input, weight, output_mask);
  }
  detail::check_linear_backward_args("eml::linear_backward", grad_output, input, weight);
  const auto [wants_grad_input, wants_grad_weight, wants_grad_bias] = output_mask;
  const at::Tensor grad_2d = as_matrix(grad_output);
  const at::Tensor input_2d = as_matrix(input);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (wants_grad_input) grad_input = at::empty(input_2d.sizes(), input.options());
  if (wants_grad_weight) grad_weight = at::empty(weight.sizes(), weight.options());
  if (wants_grad_bias) grad_bias = at::empty({weight.size(0)}, weight.options());

  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "eml::linear_backward", [&] {
    if (wants_grad_input) {  // dL/dX = dL/dY · W
      run_gemm<scalar_t>(backend, matrix_view<scalar_t>(grad_2d), matrix_view<scalar_t>(weight),
                         output_matrix<scalar_t>(grad_input), {});
    }
    if (wants_grad_weight) {  // dL/dW = (dL/dY)^T · X, and dL/db = row sums of (dL/dY)^T
      gemm::Epilogue<scalar_t> epilogue;
      epilogue.a_row_sums = wants_grad_bias ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr;
      run_gemm<scalar_t>(backend, matrix_view<scalar_t>(grad_2d).transposed(),
                         matrix_view<scalar_t>(input_2d), output_matrix<scalar_t>(grad_weight),
                         epilogue);
    } else if (wants_grad_bias) {
      grad_bias.copy_(grad_2d.sum(0));
    }
  });
  if (wants_grad_input) grad_input = grad_input.view(input.sizes());
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(eml, CPU, m) {
  m.impl("linear_forward", &linear_forward_cpu);
  m.impl("linear_backward", &linear_backward_cpu);
}

}  // namespace eml::ops::cpu

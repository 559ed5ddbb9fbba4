// CPU kernels of eml::linear_forward and eml::linear_backward: translate tensors
// into strided matrix views and run the selected GEMM backend on them.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "gemm/blocked/blocked_gemm.h"
#include "gemm/gemm.h"
#include "ops/backend.h"
#include "ops/composite/linear_kernel.h"
#include "ops/cpu/huge_pages.h"
#include "ops/linear.h"
#ifdef EML_OPS_WITH_LIBXSMM
#include "gemm/tpp/tpp_gemm.h"
#endif

namespace eml::ops::cpu {
namespace {

using composite::as_matrix;

constexpr int64_t kTppMinRowsAndCols = 4;

// Our GEMMs cover float32, float64, bfloat16 and float16 (the 16-bit types computed in
// float32, rounded once); everything else goes through ATen, and so does bfloat16 where
// ATen is faster (bf16_on_own_gemm: CPUs with bfloat16 dot products).
bool runs_on_own_gemm(Backend backend, at::ScalarType dtype) {
  if (backend == Backend::aten) return false;
  switch (dtype) {
    case at::ScalarType::Float:
    case at::ScalarType::Double:
    case at::ScalarType::Half:
      return true;
    case at::ScalarType::BFloat16:
      return bf16_on_own_gemm();
    default:
      return false;
  }
}

// The GEMM library's element type for a torch scalar type: the same bits and layout
// (c10::BFloat16 / c10::Half hold one uint16_t), so pointers are reinterpreted.
template <typename scalar_t>
struct GemmElement {
  using type = scalar_t;
};
template <>
struct GemmElement<at::BFloat16> {
  using type = gemm::bfloat16_t;
};
template <>
struct GemmElement<at::Half> {
  using type = gemm::float16_t;
};
template <typename scalar_t>
using gemm_t = typename GemmElement<scalar_t>::type;

static_assert(sizeof(at::BFloat16) == sizeof(gemm::bfloat16_t) &&
              alignof(at::BFloat16) == alignof(gemm::bfloat16_t));
static_assert(sizeof(at::Half) == sizeof(gemm::float16_t) &&
              alignof(at::Half) == alignof(gemm::float16_t));

template <typename scalar_t>
const gemm_t<scalar_t>* gemm_data(const at::Tensor& tensor) {
  return reinterpret_cast<const gemm_t<scalar_t>*>(tensor.const_data_ptr<scalar_t>());
}

template <typename scalar_t>
gemm_t<scalar_t>* gemm_mutable_data(at::Tensor& tensor) {
  return reinterpret_cast<gemm_t<scalar_t>*>(tensor.mutable_data_ptr<scalar_t>());
}

// A 2-D tensor as a read-only view; its strides are taken as they are, never assumed.
template <typename scalar_t>
gemm::ConstMatrixView<gemm_t<scalar_t>> matrix_view(const at::Tensor& matrix) {
  TORCH_INTERNAL_ASSERT(matrix.dim() == 2);
  return {gemm_data<scalar_t>(matrix), matrix.size(0), matrix.size(1), matrix.stride(0),
          matrix.stride(1)};
}

// A fresh result for our GEMMs to write whole: large ones on huge pages (huge_pages.h).
at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor result = at::empty(sizes, options);
  advise_huge_pages(result.data_ptr(), result.nbytes());
  return result;
}

// A freshly allocated, contiguous 2-D result.
template <typename scalar_t>
gemm::OutputMatrix<gemm_t<scalar_t>> output_matrix(at::Tensor& matrix) {
  TORCH_INTERNAL_ASSERT(matrix.dim() == 2 && matrix.is_contiguous());
  return {gemm_mutable_data<scalar_t>(matrix), matrix.size(0), matrix.size(1), matrix.size(1)};
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
      // LIBXSMM 1.17's kernels; the blocked GEMM has streaming paths for them, and is faster
      // where tpp_kernel_wins says so. bfloat16 and float16 always take the blocked GEMM:
      // LIBXSMM 1.17's bf16 kernels need AVX-512.
      if constexpr (!gemm::is_half_v<T>) {
        if (std::min(c.rows, c.cols) >= kTppMinRowsAndCols && gemm::tpp_kernel_wins(a, b) &&
            gemm::tpp_gemm(a, b, c, epilogue, torch_threading())) {
          return;
        }
      }
#endif
      [[fallthrough]];  // no JIT kernel for this shape or type: our blocked GEMM instead
    case Backend::blocked:
      gemm::blocked_gemm(a, b, c, epilogue, torch_threading());
      return;
    case Backend::aten:  // runs_on_own_gemm() sends it to ATen before any view is made
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "eml_ops: run_gemm reached for backend ", backend_name(backend));
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
  at::Tensor output = empty_output({input_2d.size(0), weight.size(0)}, input.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(),
                                  "eml::linear_forward", [&] {
    gemm::Epilogue<gemm_t<scalar_t>> epilogue;
    epilogue.bias = has_bias ? gemm_data<scalar_t>(bias_contiguous) : nullptr;
    // Y = X · W^T: W^T is W's memory with its strides swapped, no copy.
    run_gemm<gemm_t<scalar_t>>(backend, matrix_view<scalar_t>(input_2d),
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
  if (wants_grad_input) grad_input = empty_output(input_2d.sizes(), input.options());
  if (wants_grad_weight) grad_weight = empty_output(weight.sizes(), weight.options());
  if (wants_grad_bias) grad_bias = at::empty({weight.size(0)}, weight.options());

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(),
                                  "eml::linear_backward", [&] {
    using element_t = gemm_t<scalar_t>;
    if (wants_grad_input) {  // dL/dX = dL/dY · W
      run_gemm<element_t>(backend, matrix_view<scalar_t>(grad_2d), matrix_view<scalar_t>(weight),
                          output_matrix<scalar_t>(grad_input), {});
    }
    if (wants_grad_weight) {  // dL/dW = (dL/dY)^T · X, and dL/db = row sums of (dL/dY)^T
      gemm::Epilogue<element_t> epilogue;
      epilogue.a_row_sums = wants_grad_bias ? gemm_mutable_data<scalar_t>(grad_bias) : nullptr;
      run_gemm<element_t>(backend, matrix_view<scalar_t>(grad_2d).transposed(),
                          matrix_view<scalar_t>(input_2d), output_matrix<scalar_t>(grad_weight),
                          epilogue);
    } else if (wants_grad_bias) {
      // Summed in float32 (the 16-bit types too), rounded once.
      grad_bias.copy_(grad_2d.sum({0}, /*keepdim=*/false, at::toOpMathType(grad_2d.scalar_type())));
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

// The one entry from the op layer into the GEMM library: the backend policy (which element
// types run on our GEMMs, which shapes tpp takes, tpp falling back to blocked) lives here,
// so that the CPU kernels only check arguments, make views and allocate outputs.
//
// Each combination of element types has its own overload of run() and its own coverage
// query; a new one (e.g. float activations with int8 weights) is added beside these.
// Torch-free, like gemm.h.
#pragma once

#include "backend.h"
#include "gemm.h"

namespace eml::gemm {

// The element types of C = A·B that run() computes with A, B and C of one type.
enum class Element { float32, float64, bfloat16, float16 };

// Whether run() computes `element` on `backend` (false: the caller runs ATen's matmul).
// aten: never. float32, float64, float16: on every other backend. bfloat16: as
// bf16_on_own_gemm() says (ATen's oneDNN kernels on CPUs with bfloat16 dot products).
bool runs_on_own_gemm(Backend backend, Element element);

// C = A·B (+ epilogue) on `backend`, with the contract of blocked_gemm (blocked_gemm.h):
// beta = 0, any strides of A and B, C row-major; std::invalid_argument on mismatched
// shapes, on every backend. tpp computes float32 and float64 when C has at least
// kTppMinRowsAndCols rows and columns and LIBXSMM dispatches its kernels; every other call
// for tpp runs on blocked. Throws std::invalid_argument for Backend::aten (not ours).
// Defined for T = float, double, bfloat16_t and float16_t.
template <typename T>
void run(Backend backend, ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
         const Epilogue<T>& epilogue, const Threading& threading);

// Matrix-vector shapes (fewer rows or columns of C than this) run near scalar speed in
// LIBXSMM 1.17's kernels; the blocked GEMM has streaming paths for them.
inline constexpr int64_t kTppMinRowsAndCols = 4;

}  // namespace eml::gemm

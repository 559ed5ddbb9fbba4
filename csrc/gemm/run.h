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

// The size of a linear layer's forward product C (m x n) = A (m x k) · B (k x n): m rows
// of input (tokens), k in-features, n out-features. Its backward's products have the same
// m·k·n.
struct ProductSize {
  int64_t m = 0, k = 0, n = 0;
};
// A layer's products: the forward Y = X·W^T, and the backward's dL/dX = G·W and dL/dW =
// G^T·X (with dL/db, the column sums of G).
enum class Pass { forward, input_gradient, weight_gradient };

// Whether run() computes `element` on `backend` for a layer's `pass` of `size` (false: the
// caller runs ATen's kernels). aten: never. float32, float64, float16: on every other
// backend. bfloat16: as bf16_policy() says (backend.h); under Bf16Policy::automatic
//   the forward when m <= bf16_own_max_rows(k) or m·k·n < kBf16OwnForwardVolume;
//   dL/dX when m <= kBf16OwnInputGradientRows or m·k·n <= kBf16OwnBackwardVolume;
//   dL/dW when m·k·n <= kBf16OwnBackwardVolume.
bool runs_on_own_gemm(Backend backend, Element element, ProductSize size, Pass pass);

// The most rows of a bfloat16 forward of depth k that Bf16Policy::automatic runs on ours at
// any size: kBf16OwnMaxRows; from k = kBf16DotTilesMinDepth on, where our active kernels
// multiply bfloat16 with bfloat16 dot products (`dot_tiles_native`) and ATen's have no AMX
// tiles (`aten_has_amx`), the rows the dot path takes at that depth (blocked::dot_max_rows_at:
// 32). The first overload asks the CPU (blocked::active_bf16_dot_tiles_are_native,
// cpu_has_amx_bf16).
int64_t bf16_own_max_rows(int64_t k);
int64_t bf16_own_max_rows(int64_t k, bool dot_tiles_native, bool aten_has_amx);

// Measured on Zen 4 against oneDNN's bfloat16 kernels (torch 2.13), 1 and 2 threads. Our
// float32-widening kernels: a forward of up to 3 rows streams the weight 1.04-3.6x faster
// (oneDNN catches up at 4 rows: 0.8-1.6x). Our bfloat16 dot tiles (vdpbf16ps), on the dot
// path: 1.04-4.5x up to 32 rows at depths of 512 and more (2 threads 1.2-5.6x); shallower,
// they lose sooner (depth 64 x 4096 columns, 1 thread: 4 rows 1.35x, 7 rows 0.98x; depth 32
// x 8192: 4 rows 0.86x). Forwards below 2^20 multiply-adds run 1.36-7.8x faster (oneDNN's cost
// per call; 0.92-1.27x at 2^20), backwards up to 2^16 1.1-6x. dL/dX, 1024^2 to 4096 x 11008:
// 1 row (our stream path) 1.1-2.6x, 2 rows 0.97-2.2x (2 threads 1.0-3.3x), 3 rows and more
// 0.5-1.6x. dL/dW of few rows (write-bound) runs 0.2-0.8x on ours, its output allocated alike
// (with huge pages: the CPU kernel allocates the gradients it hands to ATen).
// On a Xeon with AMX-BF16, oneDNN's AMX kernels outrun our dot tiles from 4-8 rows on (8
// rows 0.62-0.90x, 32 rows 0.23-0.47x; 2 threads 8 rows 0.67-0.87x), so there the forward
// keeps to 3 rows at every depth (1-3 rows 1.00-5.7x; 2 threads 1.29-4.8x). The other limits
// hold there too (1 thread): below 2^20 1.1-5.7x, dL/dX of 1-2 rows 1.2-4.1x, backwards up
// to 2^16 1.15-6.5x.
inline constexpr int64_t kBf16OwnMaxRows = 3;
inline constexpr int64_t kBf16DotTilesMinDepth = 256;
inline constexpr int64_t kBf16OwnForwardVolume = int64_t{1} << 20;
inline constexpr int64_t kBf16OwnBackwardVolume = int64_t{1} << 16;
inline constexpr int64_t kBf16OwnInputGradientRows = 2;

// C = A·B (+ epilogue) on `backend`, with the contract of blocked_gemm (blocked_gemm.h):
// beta = 0, any strides of A and B, C row-major; std::invalid_argument on mismatched
// shapes, on every backend. tpp computes float32 and float64 when C has at least
// kTppMinRowsAndCols rows and columns, tpp_kernel_wins (tpp_gemm.h) and LIBXSMM dispatches
// its kernels; every other call for tpp runs on blocked. Throws std::invalid_argument for Backend::aten (not ours).
// Defined for T = float, double, bfloat16_t and float16_t.
template <typename T>
void run(Backend backend, ConstMatrixView<T> a, ConstMatrixView<T> b, OutputMatrix<T> c,
         const Epilogue<T>& epilogue, const Threading& threading);

// Compressed weights: C = A·(scales ⊙ W)^T + bias with float A and C and W of int8_t,
// bfloat16_t or float16_t, with the contract of compressed_gemm (blocked/compressed_gemm.h).
// Every backend but aten computes it (runs_compressed_on_own_gemm), on blocked: tpp hands it
// over as it does the 16-bit types (LIBXSMM 1.17 has no kernels that widen int8 or 16-bit
// operands against float ones on AVX2), and reference has no loops of its own for it.
// Throws std::invalid_argument for Backend::aten.
bool runs_compressed_on_own_gemm(Backend backend);
template <typename W>
void run_compressed(Backend backend, ConstMatrixView<float> a, ConstMatrixView<W> weight,
                    const float* scales, OutputMatrix<float> c, const float* bias,
                    const Threading& threading);

// Matrix-vector shapes (fewer rows or columns of C than this) run near scalar speed in
// LIBXSMM 1.17's kernels; the blocked GEMM has streaming paths for them.
inline constexpr int64_t kTppMinRowsAndCols = 4;

}  // namespace eml::gemm

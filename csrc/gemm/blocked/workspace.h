// Per-thread scratch memory for packed blocks, reused across calls.
//
// Sizes are bounded by the block sizes (MC x KC for A, KC x NC for B), by L3 (the
// thread's share for a staged C, the threads' shares for a shared B) or by a path's limits
// (the small C of partial products), never by the problem, so a thread allocates
// at most once per buffer and then reuses it.
#pragma once

#include <cstddef>

#include "../aligned_buffer.h"

namespace eml::gemm::blocked {

// The calling thread's buffers for packed A and packed B of element type T.
template <typename T>
T* packed_a_buffer(std::size_t elements);
template <typename T>
T* packed_b_buffer(std::size_t elements);
// The calling thread's buffer for C staged away from an aliasing row stride (packed_gemm.cpp).
template <typename T>
T* staged_c_buffer(std::size_t elements);
// The calling thread's buffer for a B that all threads of its product pack between them and
// read (blocked_gemm.cpp); bounded by the threads' shares of L3.
template <typename T>
T* shared_b_buffer(std::size_t elements);
// The calling thread's buffer for the partial products of a GEMM whose threads split its depth
// (blocked_gemm.cpp): a C of at most 256 x 768 per thread beyond the first.
template <typename T>
T* partial_products_buffer(std::size_t elements);
// The calling thread's float buffer for the float results of 16-bit GEMMs, before
// they are rounded (its size is bounded by the caller, blocked_gemm.cpp).
float* accumulator_buffer(std::size_t elements);

}  // namespace eml::gemm::blocked

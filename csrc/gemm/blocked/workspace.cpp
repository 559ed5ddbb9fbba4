#include "workspace.h"

namespace eml::gemm::blocked {
namespace {

// One buffer per (thread, purpose, type); lives until the thread exits.
template <typename T, int kPurpose>
AlignedBuffer& thread_buffer() {
  thread_local AlignedBuffer buffer;
  return buffer;
}

}  // namespace

template <typename T>
T* packed_a_buffer(std::size_t elements) {
  return static_cast<T*>(thread_buffer<T, 0>().reserve(elements * sizeof(T)));
}

template <typename T>
T* packed_b_buffer(std::size_t elements) {
  return static_cast<T*>(thread_buffer<T, 1>().reserve(elements * sizeof(T)));
}

template <typename T>
T* staged_c_buffer(std::size_t elements) {
  return static_cast<T*>(thread_buffer<T, 3>().reserve(elements * sizeof(T)));
}

template <typename T>
T* shared_b_buffer(std::size_t elements) {
  return static_cast<T*>(thread_buffer<T, 4>().reserve(elements * sizeof(T)));
}

template <typename T>
T* partial_products_buffer(std::size_t elements) {
  return static_cast<T*>(thread_buffer<T, 5>().reserve(elements * sizeof(T)));
}

float* accumulator_buffer(std::size_t elements) {
  return static_cast<float*>(thread_buffer<float, 2>().reserve(elements * sizeof(float)));
}

template float* packed_a_buffer<float>(std::size_t);
template double* packed_a_buffer<double>(std::size_t);
template float* packed_b_buffer<float>(std::size_t);
template double* packed_b_buffer<double>(std::size_t);
template float* staged_c_buffer<float>(std::size_t);
template double* staged_c_buffer<double>(std::size_t);
template float* shared_b_buffer<float>(std::size_t);
template double* shared_b_buffer<double>(std::size_t);
template float* partial_products_buffer<float>(std::size_t);
template double* partial_products_buffer<double>(std::size_t);

}  // namespace eml::gemm::blocked

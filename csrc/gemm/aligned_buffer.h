// A 64-byte aligned scratch buffer that grows on demand: the one kind of per-thread
// scratch memory of the GEMMs (blocked/workspace.cpp, tpp's packing and tiles).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace eml::gemm {

class AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 64;  // a cache line; also fits 32-byte AVX loads

  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { release(); }

  // At least `bytes` of storage; contents are not preserved when it grows. Throws
  // std::bad_alloc when the memory cannot be had.
  void* reserve(std::size_t bytes) {
    if (bytes <= capacity_) return data_;
    release();
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    data_ = std::aligned_alloc(kAlignment, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
    capacity_ = rounded;
    return data_;
  }

  // Gives the storage back.
  void release() {
    std::free(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

  std::size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace eml::gemm

#include "kernels.h"

namespace eml::gemm::blocked {

template <typename S>
const Kernels<S>& generic_kernels() {
  static const Kernels<S> kernels = [] {
    Kernels<S> table{};
    table.registers.tile = generic_micro_kernel<Acc<S>>();
    set_generic_direct_tiles(table);
    if constexpr (is_half_v<S>) set_generic_conversions(table);
    return table;
  }();
  return kernels;
}

template const Kernels<float>& generic_kernels<float>();
template const Kernels<double>& generic_kernels<double>();
template const Kernels<bfloat16_t>& generic_kernels<bfloat16_t>();
template const Kernels<float16_t>& generic_kernels<float16_t>();

#if EML_GEMM_X86
template <typename S>
const Kernels<S>& avx2_kernels() {
  static const Kernels<S> kernels = [] {
    Kernels<S> table{};
    table.registers.tile = avx2_micro_kernel<Acc<S>>();
    for (int rows = 1; rows < static_cast<int>(BlockSizes<Acc<S>>::mr); ++rows) {
      table.registers.tile_rows[rows - 1] = avx2_micro_kernel_rows<Acc<S>>(rows);
    }
    for (int rows = 1; rows <= static_cast<int>(BlockSizes<Acc<S>>::mr); ++rows) {
      table.registers.tile_next[rows - 1] = avx2_micro_kernel_next<Acc<S>>(rows);
    }
    // float16 operands need F16C to be widened in registers; without it the float
    // micro-kernel still runs, on panels the portable code widened.
    if constexpr (std::is_same_v<S, float16_t>) {
      if (!cpu_has_f16c()) {
        set_generic_direct_tiles(table);
        set_generic_conversions(table);
        return table;
      }
    }
    set_avx2_direct_tiles(table);
    set_avx2_packing(table);
    if constexpr (is_half_v<S>) set_avx2_conversions(table);
    return table;
  }();
  return kernels;
}

template const Kernels<float>& avx2_kernels<float>();
template const Kernels<double>& avx2_kernels<double>();
template const Kernels<bfloat16_t>& avx2_kernels<bfloat16_t>();
template const Kernels<float16_t>& avx2_kernels<float16_t>();

template <typename S>
const Kernels<S>& avx512_kernels() {
  static const Kernels<S> kernels = [] {
    Kernels<S> table = avx2_kernels<S>();
    table.registers.pair = avx512_micro_kernel_pair<Acc<S>>();
    table.registers.pair_block = avx512_micro_kernel_pair_block<Acc<S>>();
    table.registers.pair_block_store = avx512_micro_kernel_pair_block_store<Acc<S>>();
    table.registers.pair_block_stream = avx512_micro_kernel_pair_block_stream<Acc<S>>();
    for (int rows = 1; rows < static_cast<int>(BlockSizes<Acc<S>>::mr); ++rows) {
      table.registers.pair_rows[rows - 1] = avx512_micro_kernel_pair_rows<Acc<S>>(rows);
    }
    for (int rows = 1; rows <= static_cast<int>(BlockSizes<Acc<S>>::mr); ++rows) {
      table.registers.pair_next[rows - 1] = avx512_micro_kernel_pair_next<Acc<S>>(rows);
    }
    if constexpr (!is_half_v<S>) {
      set_avx512_dot_tiles(table);
      set_avx512_interleaved_tiles(table);
      set_avx512_broadcast_tiles(table);
    }
    if constexpr (std::is_same_v<S, float>) set_avx512_packing(table);
    if constexpr (std::is_same_v<S, bfloat16_t>) {
      if (cpu_has_avx512_bf16()) set_avx512_bf16_dot_tiles(table);
    }
    return table;
  }();
  return kernels;
}

template const Kernels<float>& avx512_kernels<float>();
template const Kernels<double>& avx512_kernels<double>();
template const Kernels<bfloat16_t>& avx512_kernels<bfloat16_t>();
template const Kernels<float16_t>& avx512_kernels<float16_t>();
#endif

bool active_bf16_dot_tiles_are_native() {
#if EML_GEMM_X86
  return active_isa() == Isa::avx512 && cpu_has_avx512_bf16();
#else
  return false;
#endif
}

template <typename S>
const Kernels<S>& active_kernels() {
#if EML_GEMM_X86
  switch (active_isa()) {
    case Isa::avx512:
      return avx512_kernels<S>();
    case Isa::avx2:
      return avx2_kernels<S>();
    case Isa::generic:
      break;
  }
#endif
  return generic_kernels<S>();
}

template const Kernels<float>& active_kernels<float>();
template const Kernels<double>& active_kernels<double>();
template const Kernels<bfloat16_t>& active_kernels<bfloat16_t>();
template const Kernels<float16_t>& active_kernels<float16_t>();

}  // namespace eml::gemm::blocked

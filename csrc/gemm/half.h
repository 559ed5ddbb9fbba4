// 16-bit floating-point storage types of the GEMM library: bfloat16 and IEEE
// float16, with scalar conversions to and from float. Torch-free, like gemm.h; the
// op layer maps c10::BFloat16 / c10::Half onto them (same bits, same layout).
//
// The GEMMs never compute in these types: operands are widened to float, products
// accumulate in float, and each result is rounded once (round-to-nearest-even).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace eml::gemm {

// The upper half of a float32: 8 exponent bits, 7 mantissa bits.
struct bfloat16_t {
  uint16_t bits;
};

// IEEE 754 binary16: 5 exponent bits, 10 mantissa bits.
struct float16_t {
  uint16_t bits;
};

static_assert(sizeof(bfloat16_t) == 2 && std::is_trivially_copyable_v<bfloat16_t>);
static_assert(sizeof(float16_t) == 2 && std::is_trivially_copyable_v<float16_t>);

template <typename T>
inline constexpr bool is_half_v =
    std::is_same_v<T, bfloat16_t> || std::is_same_v<T, float16_t>;

// The type products of T operands accumulate in: float for the 16-bit types.
template <typename T>
using accumulator_t = std::conditional_t<is_half_v<T>, float, T>;

namespace half_detail {

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace half_detail

inline float to_float(bfloat16_t value) {
  return half_detail::bits_float(static_cast<uint32_t>(value.bits) << 16);
}

// Round-to-nearest-even; NaN stays a (quiet) NaN with its sign, Inf stays Inf.
inline bfloat16_t to_bfloat16(float value) {
  uint32_t bits = half_detail::float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return {static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<uint16_t>(bits >> 16)};
}

// Exact (every float16 is a float), subnormals, Inf and NaN included.
inline float to_float(float16_t value) {
  using half_detail::bits_float;
  using half_detail::float_bits;
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  uint32_t bits = static_cast<uint32_t>(value.bits & 0x7fffu) << 13;  // exponent and mantissa
  const uint32_t exponent = bits & 0x0f800000u;
  bits += (127u - 15u) << 23;  // rebias the exponent
  if (exponent == 0x0f800000u) {
    bits += (128u - 16u) << 23;  // Inf or NaN: all exponent bits set
  } else if (exponent == 0) {
    // Zero or subnormal: renormalise through one exact float subtraction.
    bits += 1u << 23;
    bits = float_bits(bits_float(bits) - bits_float(113u << 23));
  }
  return bits_float(bits | sign);
}

// Round-to-nearest-even, overflow to Inf, subnormals; NaN stays a quiet NaN.
inline float16_t to_float16(float value) {
  using half_detail::bits_float;
  using half_detail::float_bits;
  constexpr uint32_t kFloatInf = 255u << 23;
  constexpr uint32_t kHalfOverflow = (127u + 16u) << 23;  // 65520 rounds to Inf
  constexpr uint32_t kHalfMinNormal = 113u << 23;
  uint32_t bits = float_bits(value);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint16_t result;
  if (bits >= kHalfOverflow) {
    result = bits > kFloatInf ? 0x7e00u : 0x7c00u;
  } else if (bits < kHalfMinNormal) {
    // Subnormal or zero: one float addition rounds the mantissa into place.
    const float magic = bits_float(((127u - 15u) + (23u - 10u) + 1u) << 23);
    result = static_cast<uint16_t>(float_bits(bits_float(bits) + magic) - float_bits(magic));
  } else {
    const uint32_t mantissa_odd = (bits >> 13) & 1u;
    bits += ((15u - 127u) << 23) + 0xfffu + mantissa_odd;
    result = static_cast<uint16_t>(bits >> 13);
  }
  return {static_cast<uint16_t>(result | (sign >> 16))};
}

// Uniform spellings for templates: widen any element type to its accumulator type,
// and round an accumulator back to the element type.
inline float widen(bfloat16_t value) { return to_float(value); }
inline float widen(float16_t value) { return to_float(value); }
inline float widen(float value) { return value; }
inline double widen(double value) { return value; }

template <typename T>
T narrow(accumulator_t<T> value) {
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    return to_bfloat16(value);
  } else if constexpr (std::is_same_v<T, float16_t>) {
    return to_float16(value);
  } else {
    return value;
  }
}

}  // namespace eml::gemm

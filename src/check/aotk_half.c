#include "aotk_half.h"

#include <math.h>
#include <string.h>

#include "aotk.h"

/* memcpy is the portable way to reinterpret bits in C11 (a union would do too, but memcpy also keeps
 * C++ compilers of this file quiet); compilers turn it into a register move. */
static uint32_t float_bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}

static float float_from_bits(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

#define FLOAT_SIGN_BIT 0x80000000u
#define FLOAT_EXPONENT_MASK 0x7F800000u
#define FLOAT_MANTISSA_MASK 0x007FFFFFu
#define FLOAT_EXPONENT_BIAS 127
#define FP16_EXPONENT_BIAS 15

float aotk__bf16_to_float(uint16_t bits) { return float_from_bits((uint32_t)bits << 16); }

uint16_t aotk__float_to_bf16(float x) {
  uint32_t bits = float_bits(x);
  if ((bits & ~FLOAT_SIGN_BIT) > FLOAT_EXPONENT_MASK) {
    /* 0x0040 is float's quiet bit (bit 22) after the shift. */
    return (uint16_t)((bits >> 16) | 0x0040u);
  }
  /* Adding 0x7FFF rounds up exactly the discarded halves above one half; the kept part's lowest bit
   * added on top turns an exact half into a round-up only when that bit is odd (ties to even). A carry
   * out of the mantissa bumps the exponent, which is the right result, up to infinity. */
  uint32_t lowest_kept_bit = (bits >> 16) & 1u;
  bits += 0x7FFFu + lowest_kept_bit;
  return (uint16_t)(bits >> 16);
}

float aotk__fp16_to_float(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu) {
    /* Infinity, or a NaN whose payload (quiet bit included) moves to the top of float's mantissa. */
    return float_from_bits(sign | FLOAT_EXPONENT_MASK | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return float_from_bits(sign);
    /* A subnormal fp16 is a normal float: shift the leading one up to the implicit position, lowering
     * the exponent once per shift. fp16's smallest normal has unbiased exponent -14. */
    int32_t unbiased_exponent = -14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      unbiased_exponent -= 1;
    }
    mantissa &= 0x3FFu;
    uint32_t float_exponent = (uint32_t)(unbiased_exponent + FLOAT_EXPONENT_BIAS);
    return float_from_bits(sign | (float_exponent << 23) | (mantissa << 13));
  }
  uint32_t float_exponent = exponent - FP16_EXPONENT_BIAS + FLOAT_EXPONENT_BIAS;
  return float_from_bits(sign | (float_exponent << 23) | (mantissa << 13));
}

uint16_t aotk__float_to_fp16(float x) {
  uint32_t bits = float_bits(x);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & ~FLOAT_SIGN_BIT;

  if (magnitude > FLOAT_EXPONENT_MASK) {
    /* 0x0200 is fp16's quiet bit; it also keeps the result a NaN when the kept payload bits are 0. */
    return (uint16_t)(sign | 0x7C00u | 0x0200u | ((magnitude & FLOAT_MANTISSA_MASK) >> 13));
  }
  /* 0x477FF000 is 65520: the tie between 65504 (the largest fp16) and 65536, which rounds to the even
   * side, 65536, which overflows. Float infinity lands here too. */
  if (magnitude >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);

  /* 0x38800000 is 2^-14, fp16's smallest normal. */
  if (magnitude >= 0x38800000u) {
    /* Rebias the exponent (127 - 15 = 112) in place, then round away the 13 extra mantissa bits as
     * aotk__float_to_bf16 does; a carry into the exponent is again the right result. */
    uint32_t lowest_kept_bit = (magnitude >> 13) & 1u;
    uint32_t rebiased = magnitude - ((uint32_t)(FLOAT_EXPONENT_BIAS - FP16_EXPONENT_BIAS) << 23);
    return (uint16_t)(sign | ((rebiased + 0xFFFu + lowest_kept_bit) >> 13));
  }

  /* 0x33000000 is 2^-25, half the smallest subnormal: it and everything below round to zero (the tie
   * goes to the even side, 0). */
  if (magnitude <= 0x33000000u) return sign;

  /* Subnormal result: count units of 2^-24. The float is m * 2^(e - 150) with m the 24-bit significand
   * and e the biased exponent (here 102..112), so the count is m >> (126 - e), shift 14..24. */
  uint32_t float_exponent = magnitude >> 23;
  uint32_t significand = (magnitude & FLOAT_MANTISSA_MASK) | 0x800000u;
  uint32_t shift = 126u - float_exponent;
  uint32_t units = significand >> shift;
  uint32_t remainder = significand & ((1u << shift) - 1u);
  uint32_t half_unit = 1u << (shift - 1u);
  if (remainder > half_unit || (remainder == half_unit && (units & 1u))) {
    /* May carry into 0x400, the smallest normal's encoding, which is the right result. */
    units += 1u;
  }
  return (uint16_t)(sign | units);
}

float aotk__round_to_dtype(float x, int dtype) {
  switch (dtype) {
    case AOTK_DTYPE_FLOAT16:
      return aotk__fp16_to_float(aotk__float_to_fp16(x));
    case AOTK_DTYPE_BFLOAT16:
      return aotk__bf16_to_float(aotk__float_to_bf16(x));
    case AOTK_DTYPE_FLOAT32:
      return x;
    default:
      return NAN;
  }
}

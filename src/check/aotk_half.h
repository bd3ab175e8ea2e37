/*
 * Conversions between float and the 16-bit floating-point formats the kernels read and write.
 *
 * Bit-exact and independent of the host's half support (no _Float16, no F16C), so the float64
 * reference, the self-test and the tests convert exactly as the GPU does: round to nearest, ties to
 * even, with NaN kept a NaN. Only the host side of the library and the tests use these; they are
 * never on a launch path.
 */
#ifndef AOTK_HALF_H
#define AOTK_HALF_H

#include <stdint.h>

/* bfloat16: float's sign and 8-bit exponent, 7 mantissa bits. Every bf16 value is a float, so the
 * widening is exact. */
float aotk__bf16_to_float(uint16_t bits);
/* Rounds to nearest even. Values past the largest bf16 become infinity (as float's own rounding
 * would); float subnormals round like any other value. A NaN stays a NaN of the same sign with its
 * top payload bits, made quiet: plain truncation would turn a NaN whose payload lies in the low 16
 * bits into infinity. */
uint16_t aotk__float_to_bf16(float x);

/* IEEE 754 binary16: 5-bit exponent, 10 mantissa bits, subnormals down to 2^-24. Exact. */
float aotk__fp16_to_float(uint16_t bits);
/* Rounds to nearest even, with subnormal results rounded at their own (2^-24) spacing; magnitudes of
 * 65520 and above become infinity (65520 is the tie between 65504 and the next step, and 65504's
 * mantissa is odd). A NaN stays a quiet NaN of the same sign with the top 9 bits of its payload. */
uint16_t aotk__float_to_fp16(float x);

/* x rounded to the nearest value of `dtype` (an aotk_dtype value) and widened back to float:
 * AOTK_DTYPE_FLOAT16 and AOTK_DTYPE_BFLOAT16 round as above, AOTK_DTYPE_FLOAT32 returns x. Any other
 * dtype returns NaN, so a caller passing a wrong value sees it in its comparisons instead of silently
 * getting float32 results. */
float aotk__round_to_dtype(float x, int dtype);

#endif /* AOTK_HALF_H */

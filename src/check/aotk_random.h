/* The host-side random inputs of the self-test and the GPU tests: splitmix64 and what is drawn from
 * it, and the conversions between float and a dtype's 16-bit pattern. Header-only (static inline), for
 * src/check/aotk_check_case.c, src/check/aotk_sel_check.c and the tests, which each had their own copy. */
#ifndef AOTK_RANDOM_H
#define AOTK_RANDOM_H

#include <math.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_half.h"

/* splitmix64: a small, good generator; each case draws from its own seed. */
static inline uint64_t aotk__random_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so that log() of it is finite. */
static inline double aotk__random_uniform(uint64_t *state) {
  return ((double)(aotk__random_next(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Uniform in [low, high]. */
static inline int64_t aotk__random_int(uint64_t *state, int64_t low, int64_t high) {
  return low + (int64_t)(aotk__random_next(state) % (uint64_t)(high - low + 1));
}

/* N(0, 1), Box-Muller. */
static inline float aotk__random_normal(uint64_t *state) {
  double u = aotk__random_uniform(state), v = aotk__random_uniform(state);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Fisher-Yates. */
static inline void aotk__random_shuffle_int32(int32_t *values, int64_t count, uint64_t *state) {
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = aotk__random_int(state, 0, i);
    int32_t swap = values[i];
    values[i] = values[j];
    values[j] = swap;
  }
}

/* x rounded to dtype (fp16 or bf16), as its bits; and back, exactly. */
static inline uint16_t aotk__dtype_bits(float x, aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_BFLOAT16 ? aotk__float_to_bf16(x) : aotk__float_to_fp16(x);
}

static inline float aotk__dtype_value(uint16_t bits, aotk_dtype dtype) {
  return dtype == AOTK_DTYPE_BFLOAT16 ? aotk__bf16_to_float(bits) : aotk__fp16_to_float(bits);
}

#endif /* AOTK_RANDOM_H */

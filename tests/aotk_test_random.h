/*
 * The reference tests' random inputs (tests/test_reference.c, test_reference_bwd.c,
 * test_sel_reference.c): splitmix64 seeded per case from the run's seed, so that a case's inputs do not
 * depend on which cases ran before it. (src/check/aotk_random.h is the GPU tests' and the self-test's:
 * uniform in (0, 1) and float normals, another stream.) Static functions, each test using what it needs.
 */
#ifndef AOTK_TEST_RANDOM_H
#define AOTK_TEST_RANDOM_H

#include <math.h>
#include <stdint.h>

static uint64_t run_seed;

typedef struct random_generator {
  uint64_t state;
} random_generator;

static random_generator random_for_case(uint64_t case_salt) {
  random_generator generator = {run_seed ^ (case_salt * 0x9E3779B97F4A7C15ull)};
  return generator;
}

static uint64_t random_u64(random_generator *generator) {
  uint64_t z = (generator->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 random bits. */
static double random_uniform(random_generator *generator) {
  return (double)(random_u64(generator) >> 11) * 0x1.0p-53;
}

/* Uniform in [low, high]. */
static int64_t random_int(random_generator *generator, int64_t low, int64_t high) {
  return low + (int64_t)(random_u64(generator) % (uint64_t)(high - low + 1));
}

/* N(0, 1) by Box-Muller. */
static double random_normal(random_generator *generator) {
  double u1 = 1.0 - random_uniform(generator); /* in (0, 1], so log is finite */
  double u2 = random_uniform(generator);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif /* AOTK_TEST_RANDOM_H */

/*
 * A header-only harness for aotk's C test binaries, after libuv's test runner. Include it in the one
 * file of a binary (or see AOTK_TEST_STATE_EXTERN below), write each case as a void function, and run
 * them from main:
 *
 *   static void test_round_trip(void) { CHECK(x == y); CHECK_MSG(err < tol, "err %g", err); }
 *   static void test_on_gpu(void) { if (!have_gpu) { TEST_SKIP("no GPU"); return; } ... }
 *   int main(void) { RUN_TEST(test_round_trip); RUN_TEST(test_on_gpu); return aotk_test_finish(); }
 *
 * Each case prints one line ("ok  name", "FAIL name: first failure", "skip name: reason"), and
 * aotk_test_finish() prints "N passed, M failed, K skipped" alone on the last line and returns the
 * exit status: 1 if any case failed, 77 if every case was skipped (ctest's SKIP_RETURN_CODE), else 0.
 * A failed CHECK records the failure and lets the case go on, so one run shows every broken check;
 * the first few of a case are printed as they happen, the rest only counted.
 */
#ifndef AOTK_TEST_HARNESS_H
#define AOTK_TEST_HARNESS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { AOTK_TEST_FAILURES_PRINTED_PER_CASE = 8 };

struct aotk_test_state {
  int passed, failed, skipped;
  int filtered;              /* cases not run: their names lack AOTK_TEST_FILTER */
  int case_failures;         /* failed checks in the running case */
  int case_skipped;
  char case_detail[512];     /* the first failure or the skip reason */
};
/* A binary built from several files (tests/api) shares one record: each of its files defines
 * AOTK_TEST_STATE_EXTERN before including this header, and one of them defines the record. */
#ifdef AOTK_TEST_STATE_EXTERN
extern struct aotk_test_state aotk_test_state;
#else
static struct aotk_test_state aotk_test_state;
#endif

#define CHECK(cond) \
  ((cond) ? (void)0 : aotk_test_record_failure(__FILE__, __LINE__, "CHECK(%s) failed", #cond))
#define CHECK_MSG(cond, ...) ((cond) ? (void)0 : aotk_test_record_failure(__FILE__, __LINE__, __VA_ARGS__))
/* Marks the running case skipped; the case should return right after. */
#define TEST_SKIP(...) aotk_test_record_skip(__VA_ARGS__)
#define RUN_TEST(function) aotk_test_run(#function, function)

#if defined(__GNUC__)
#define AOTK_TEST_PRINTF_LIKE(format_index) __attribute__((format(printf, format_index, format_index + 1)))
#else
#define AOTK_TEST_PRINTF_LIKE(format_index)
#endif

static inline AOTK_TEST_PRINTF_LIKE(3) void aotk_test_record_failure(const char *file, int line,
                                                                       const char *format, ...) {
  char message[400];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  if (aotk_test_state.case_failures == 0) {
    snprintf(aotk_test_state.case_detail, sizeof aotk_test_state.case_detail, "%s:%d: %s", file, line, message);
  }
  if (aotk_test_state.case_failures < AOTK_TEST_FAILURES_PRINTED_PER_CASE) {
    printf("    %s:%d: %s\n", file, line, message);
  }
  aotk_test_state.case_failures += 1;
}

static inline AOTK_TEST_PRINTF_LIKE(1) void aotk_test_record_skip(const char *format, ...) {
  aotk_test_state.case_skipped = 1;
  if (aotk_test_state.case_failures > 0) return; /* the case counts as failed; keep its first failure */
  va_list args;
  va_start(args, format);
  vsnprintf(aotk_test_state.case_detail, sizeof aotk_test_state.case_detail, format, args);
  va_end(args);
}

static inline void aotk_test_begin_case(void) {
  aotk_test_state.case_failures = 0;
  aotk_test_state.case_skipped = 0;
  aotk_test_state.case_detail[0] = '\0';
}

static inline void aotk_test_end_case(const char *name);

/* AOTK_TEST_FILTER=text runs only the cases whose names contain it (to run a few cases under a slow
 * tool such as compute-sanitizer's racecheck); the others are neither run nor counted. */
static inline int aotk_test_selected(const char *name) {
  const char *filter = getenv("AOTK_TEST_FILTER");
  if (filter == NULL || filter[0] == '\0' || strstr(name, filter) != NULL) return 1;
  aotk_test_state.filtered += 1;
  return 0;
}

static inline void aotk_test_run(const char *name, void (*function)(void)) {
  if (!aotk_test_selected(name)) return;
  aotk_test_begin_case();
  function();
  aotk_test_end_case(name);
}

/* Runs a case that takes an argument: one row of a parameterized matrix. */
static inline void aotk_test_run_with(const char *name, void (*function)(const void *), const void *argument) {
  if (!aotk_test_selected(name)) return;
  aotk_test_begin_case();
  function(argument);
  aotk_test_end_case(name);
}

static inline void aotk_test_end_case(const char *name) {
  /* A case that failed checks before skipping still counts as failed: the failures are real. */
  if (aotk_test_state.case_failures > 0) {
    aotk_test_state.failed += 1;
    printf("FAIL %s: %s", name, aotk_test_state.case_detail);
    if (aotk_test_state.case_failures > 1) printf(" (%d failed checks)", aotk_test_state.case_failures);
    printf("\n");
  } else if (aotk_test_state.case_skipped) {
    aotk_test_state.skipped += 1;
    printf("skip %s: %s\n", name, aotk_test_state.case_detail);
  } else {
    aotk_test_state.passed += 1;
    printf("ok  %s\n", name);
  }
  /* Keep the lines in order with anything the case wrote to stderr, and on disk if the binary dies. */
  fflush(stdout);
}

static inline int aotk_test_finish(void) {
  if (aotk_test_state.filtered > 0) {
    printf("%d cases not run (AOTK_TEST_FILTER=%s)\n", aotk_test_state.filtered, getenv("AOTK_TEST_FILTER"));
  }
  printf("%d passed, %d failed, %d skipped\n", aotk_test_state.passed, aotk_test_state.failed,
         aotk_test_state.skipped);
  fflush(stdout);
  if (aotk_test_state.failed > 0) return 1;
  if (aotk_test_state.skipped > 0 && aotk_test_state.passed == 0) return 77;
  return 0;
}

/* The seed of this run's random inputs: AOTK_TEST_SEED if set, else taken from the clock. Printed, so
 * that a failing run can be repeated with AOTK_TEST_SEED=<seed>. */
static inline uint64_t aotk_test_seed(void) {
  const char *from_environment = getenv("AOTK_TEST_SEED");
  uint64_t seed;
  if (from_environment != NULL && from_environment[0] != '\0') {
    seed = strtoull(from_environment, NULL, 0);
  } else {
    /* Nanoseconds, so that binaries ctest starts in the same second still draw different inputs. */
    struct timespec now;
    if (timespec_get(&now, TIME_UTC) == 0) now = (struct timespec){.tv_sec = time(NULL), .tv_nsec = 0};
    seed = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
  }
  printf("seed %llu (rerun with AOTK_TEST_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
  return seed;
}

#endif /* AOTK_TEST_HARNESS_H */

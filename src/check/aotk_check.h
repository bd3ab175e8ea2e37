/* Checking the forward and the backward on the GPU against the float64 reference: one case at a time.
 * Shared by aotk_self_test() and the GPU tests, so the two cannot drift apart. Not a launch path: it
 * allocates and synchronizes. */
#ifndef AOTK_CHECK_H
#define AOTK_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "aotk.h"
#include "aotk_driver.h"

typedef enum aotk__check_layout {
  AOTK__LAYOUT_CONTIGUOUS = 0, /* [batch, seqlen, heads, head_dim] packed */
  AOTK__LAYOUT_PERMUTED = 1,   /* memory [batch, heads, seqlen, head_dim], viewed as [b, s, h, d]: strided */
  AOTK__LAYOUT_PADDED = 2,     /* each head's row padded by 3 elements: strides not multiples of 16 */
  AOTK__LAYOUT_OFFSET = 3,     /* packed, but data starts one element past a 16-byte boundary */
  AOTK__LAYOUT_COUNT = 4,
} aotk__check_layout;

const char *aotk__check_layout_name(aotk__check_layout layout);

/* The most batch entries (dense) or sequences (varlen) one case may have. */
#define AOTK__CHECK_MAX_SEQS 64
/* Unused rows after the last sequence of the varlen layout's q, k, v, out (and their gradients): the
 * tensors' first dimension is larger than cu_seqlens' last offset, which the API allows, and a call
 * must leave those rows alone. */
#define AOTK__CHECK_VARLEN_TAIL_ROWS 2

/*
 * The features of include/aotk.h's aotk_attn_params that a case turns on, each off when zero, so that
 * a case which sets none of them is plain dense attention. Shared by forward and backward cases.
 *
 * Variable length (num_seqs > 0): the case's batch, seqlen_q and seqlen_k are ignored; sequence s has
 * seqlens_q[s] query rows and seqlens_k[s] keys (0 allowed), packed in that order into q, out
 * [total_q, heads_q, d] and k, v [total_k, heads_kv, d], each followed by AOTK__CHECK_VARLEN_TAIL_ROWS
 * unused rows; lse is [heads_q, total_q]; max_seqlen_q and max_seqlen_k are the longest lengths (at
 * least 1) plus max_seqlen_slack. The layout applies to the packed tensors as to the dense ones (one
 * batch entry of total rows). The reference runs one problem per sequence, pointed at its rows.
 */
typedef struct aotk__check_features {
  int64_t head_dim_v;        /* values per row of v, out, dout, dv; 0: the case's head_dim (= head_dim_qk) */
  int num_seqs;              /* 0: dense; 1 .. AOTK__CHECK_MAX_SEQS: the varlen layout */
  int64_t seqlens_q[AOTK__CHECK_MAX_SEQS], seqlens_k[AOTK__CHECK_MAX_SEQS];
  int64_t max_seqlen_slack;  /* >= 0 */
  int window;                /* 0: no window (-1, -1 passed); 1: window_left, window_right as given (-1: unbounded) */
  int32_t window_left, window_right;
  int top_left;              /* causal_align = AOTK_ALIGN_TOP_LEFT (else bottom-right) */
  float softcap;             /* 0: off */
  int alibi;                 /* 0: off; 1: random slopes [heads_q]; 2: [batch, heads_q] ([num_seqs, heads_q]) */
  int sinks;                 /* random sinks [heads_q]; the backward also checks dsinks */
  /* Dropout, dropout_p > 0: rng_state {rng_seed, rng_offset} in device memory, and the forward asked
   * for its dropout_mask, which is checked against the host's Philox (aotk__check_dropout_keep) and
   * given to the reference. */
  float dropout_p;
  int64_t rng_seed, rng_offset;
} aotk__check_features;

typedef struct aotk__fwd_check_case {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim; /* head_dim: head_dim_qk */
  int causal;
  float softmax_scale;        /* 0: the default */
  aotk__check_layout layout;  /* of q, k, v, out (and lse, alibi slopes and dropout mask padded for PADDED) */
  int out_permuted;           /* 1: out heads-outer (PERMUTED) whatever `layout` is (dense only), which the
                                 sm_90 Gluon forward cannot store by TMA: it takes its masked stores */
  int with_lse;
  int64_t rows_per_head;      /* query rows compared per (sequence, head): all when the sequence has at most this */
  uint64_t seed;
  aotk_stream stream;
  aotk__check_features features;
} aotk__fwd_check_case;

typedef struct aotk__fwd_check_result {
  int passed;
  double max_error;       /* max |out - float64 reference| over the rows checked */
  double lowp_max_error;  /* the same for the same-precision reference: the bound is 2x this + a floor */
  double lse_max_error;   /* max |lse - reference| over rows with keys, in units of its tolerance */
  int64_t rows_checked;
  int64_t unwritten;      /* output elements (out, lse) still holding the poison after the call */
  int64_t clobbered;      /* elements between outputs (padding, unused rows) that the call overwrote */
  int64_t bad_empty_rows; /* rows with no visible key (and no sink) whose out is not 0 or lse not -inf */
  char kernel_name[96];
  int from_ptx;
  /* What aotk_query reported for the call. */
  int32_t kernel_head_dim_qk, kernel_head_dim_v;
  uint32_t features;
  int32_t launches;
  /* Dropout only. The mask's elements are every (sequence, head, row, key) with row < len_q, key < len_k. */
  int64_t mask_elements;
  int64_t mask_kept;
  double mask_keep_z;       /* (kept - elements (1 - p)) / sqrt(elements p (1 - p)); checked from
                               AOTK__CHECK_KEEP_RATE_MIN_ELEMENTS elements */
  int64_t mask_mismatches;  /* mask elements unlike the host's Philox4x32-7 (poison left counts), over the
                               first run and the run with another offset */
  int64_t mask_clobbered;   /* mask elements outside every sequence's pairs that a call wrote */
  int rerun_differs;        /* 1: a second call with the same rng_state gave other out, lse or mask bits */
  int new_offset_same_mask; /* 1: a call with rng_offset + 1 gave the same mask (checked from 256 elements) */
  char detail[400];
} aotk__fwd_check_result;

/* Runs one case with fresh random inputs: allocates, poisons outputs, calls aotk_attn_fwd on
 * c->stream, synchronizes, compares. Returns the aotk or driver status of the run itself (AOTK_OK
 * when it ran; whether the numbers pass is r->passed). Uses the context current on the thread.
 * AOTK_ERROR_INVALID_VALUE for a case it cannot describe (more than AOTK__CHECK_MAX_SEQS sequences,
 * a negative length). */
aotk_status aotk__check_attn_fwd(const aotk__driver *driver, const aotk__fwd_check_case *c,
                                 aotk__fwd_check_result *r);

/* The absolute error floor added to 2x the same-precision reference's error. */
#define AOTK__CHECK_ERROR_FLOOR 1e-4
#define AOTK__CHECK_LSE_ABS 1e-3
#define AOTK__CHECK_LSE_REL 1e-4

/* Helpers the check functions share (the forward's and the backward's, src/check/aotk_sel_check.c's,
 * src/check/aotk_decode_check.c's), defined in src/check/aotk_check_case.c. */
/* Inside a check function with a `status` and a `done:` label that releases everything: a failed driver
 * call sets the status and jumps there. */
#define AOTK__CHECK_CU(call, what)                             \
  do {                                                         \
    CUresult check_result = (call);                            \
    if (check_result != CUDA_SUCCESS) {                        \
      status = aotk__cuda_failure(driver, check_result, what); \
      goto done;                                               \
    }                                                          \
  } while (0)
/* Allocates `bytes` (at least 1) of device memory and copies `host` into it. */
aotk_status aotk__check_upload(const aotk__driver *driver, CUdeviceptr *device, const void *host, size_t bytes);
/* Allocates `bytes` (at least 1) filled with `poison` (0xff: NaN in fp16, bf16 and fp32). */
aotk_status aotk__check_alloc_poisoned(const aotk__driver *driver, CUdeviceptr *device, size_t bytes,
                                       unsigned char poison);
/* calloc of `count` elements (at least 1). */
void *aotk__check_host_array(int64_t count, size_t size);
/* The lse tolerance at a reference value: AOTK__CHECK_LSE_ABS + AOTK__CHECK_LSE_REL |reference|. */
double aotk__check_lse_tolerance(double reference);
/* The keep-rate test: over at least this many mask elements, the kept fraction must lie within
 * AOTK__CHECK_KEEP_RATE_SIGMAS standard deviations of 1 - dropout_p (a false alarm once in ~3.5
 * million cases). */
#define AOTK__CHECK_KEEP_RATE_MIN_ELEMENTS 1000000
#define AOTK__CHECK_KEEP_RATE_SIGMAS 5.0

/*
 * The backward: one case runs the forward (for out and lse: the two are tested together), then the
 * backward, and compares dq, dk and dv (every element, or sampled rows), and dsinks with sinks, with
 * the float64 reference.
 *
 * The error rule is the forward's, per gradient tensor: max |x - float64| <= 2 x (the same-precision
 * emulation's max error) + a floor. The forward's outputs are convex combinations of N(0, 1) values, so
 * an absolute floor of 1e-4 sits well below their rounding; gradients are sums over sequence rows and
 * GQA heads (|dv| reaches ~100 at seqlen 1000, group 8), so the floor here is the forward's measured in
 * the tensor's own units: AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max |float64 reference| of the tensor).
 * Relative to the tensor's largest value that is 1/39 of bf16's unit roundoff (2^-8) and 1/5 of
 * fp16's (2^-11), so it only matters where the emulation's error happens to be near 0 (e.g. dk, which
 * is exactly 0 when every query row sees a single key, while the kernel's float32 dP - delta leaves
 * ~1e-6).
 *
 * dsinks (float32, one value per query head: -sum_i exp(sink - lse_i) delta_i over every row of the
 * batch) gets a bound per head, since a maximum over a few heads is no stable statistic: the kernel's
 * error and the emulation's are two draws of one random walk (each row's delta carries its own
 * rounding of out), and one draw is more than twice the other in ~30% of pairs. So the bound adds to
 * 2 x the emulation's error of that head AOTK__CHECK_DSINK_SIGMAS standard deviations of the walk,
 * sqrt(sum_i (exp(sink - lse_i) (delta_i emulated - delta_i float64))^2), plus the floor. A missing
 * row, block or sequence, a wrong sign or lse in the wrong units all move dsinks by far more.
 */
#define AOTK__CHECK_BWD_ERROR_FLOOR 1e-4
#define AOTK__CHECK_DSINK_SIGMAS 10.0

/* The gradient tensors of a backward result, in the order of its arrays. */
enum { AOTK__CHECK_DQ, AOTK__CHECK_DK, AOTK__CHECK_DV, AOTK__CHECK_DSINKS, AOTK__CHECK_GRADIENTS };

typedef struct aotk__bwd_check_case {
  aotk_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim; /* head_dim: head_dim_qk */
  int causal;
  float softmax_scale;       /* 0: the default */
  aotk__check_layout layout; /* of q, k, v, out, dout, dq, dk, dv (and lse, alibi, mask padded for PADDED) */
  int mix_layouts;           /* 1: every other tensor (k, out, dq, dv) takes the layout's partner of the same
                                alignment (contiguous <-> permuted, padded <-> offset), so that q and dq,
                                out and dout, k and dk, v and dv, dk and dv all have different strides */
  int deterministic;         /* params.deterministic */
  int repeats;               /* further backward runs, each on re-poisoned outputs and workspace, that must
                                reproduce the first run's dq, dk, dv (and dsinks) bit for bit */
  uint64_t seed;
  aotk_stream stream;
  /* 0: compare every row of dq and every key row of dk and dv. Otherwise that many rows per (sequence,
   * query head) of dq and key rows per (sequence, kv head) of dk and dv, the first and the last among
   * them; every element is still checked for poison and clobbering, and dsinks is always whole. */
  int64_t rows_per_head;
  /* 1: the same-precision emulation's delta = sum(dout * out) reads out as the forward stored it (the
   * kernels' delta does) instead of the emulation's own rounding of out. Off in the suites; a diagnosis
   * (bench/explore/sinks_short_probe.c) for rows whose dP - delta cancels, where the two roundings of out
   * are independent draws that "2x the emulation's error" compares one to one. */
  int stored_out_delta;
  aotk__check_features features;
} aotk__bwd_check_case;

typedef struct aotk__bwd_check_result {
  int passed;
  /* Per gradient tensor, indexed by AOTK__CHECK_DQ .. AOTK__CHECK_DSINKS (dsinks all 0 without sinks): */
  double max_error[AOTK__CHECK_GRADIENTS];      /* max |x - float64 reference| over the elements compared */
  double lowp_max_error[AOTK__CHECK_GRADIENTS]; /* the same for the same-precision emulation */
  double max_magnitude[AOTK__CHECK_GRADIENTS];  /* max |float64 reference|: the floor's scale */
  double bound[AOTK__CHECK_GRADIENTS];          /* 2 x lowp_max_error + AOTK__CHECK_BWD_ERROR_FLOOR x max(1, max_magnitude);
                                                   dsinks: the values of the head nearest its own bound */
  double worst_fraction;    /* max over the tensors of max_error / bound (> 1: failed) */
  int64_t elements_checked;
  int64_t unwritten;        /* gradient elements still holding the poison after the call */
  int64_t clobbered;        /* elements between gradient elements (padding, unused rows) that the call overwrote */
  int64_t bad_empty_rows;   /* rows that see no key whose dq is not exactly 0 */
  int64_t nondeterministic; /* repeats that did not reproduce the first run's bits */
  int64_t mask_mismatches;  /* the forward's dropout mask against the host's Philox (see the forward's) */
  size_t workspace_bytes;   /* what aotk_query reported (and the call was given) */
  char kernel_name[96];     /* the query's: the dK/dV kernel */
  int from_ptx;
  int32_t kernel_head_dim_qk, kernel_head_dim_v;
  uint32_t features;        /* the backward query's AOTK_FEATURE_* */
  int32_t launches;
  char detail[512];
} aotk__bwd_check_result;

/* Runs one backward case with fresh random q, k, v, dout (N(0, 1) in the dtype): allocates, runs
 * aotk_attn_fwd for out and lse (and the dropout mask), queries the backward's workspace and allocates
 * it, poisons dq, dk, dv, dsinks and the workspace (0xff bytes: NaN), calls aotk_attn_bwd on c->stream
 * (1 + repeats times), synchronizes and compares. The host reference is spread over the machine's
 * cores. Returns the aotk or driver status of the run itself (AOTK_OK when it ran; whether the numbers
 * pass is r->passed); AOTK_ERROR_INVALID_VALUE for a case it cannot describe. */
aotk_status aotk__check_attn_bwd(const aotk__driver *driver, const aotk__bwd_check_case *c,
                                 aotk__bwd_check_result *r);

/*
 * The host's model of the dropout RNG (include/aotk.h, rng_state): whether element (row, key) of
 * stream b * heads_q + h is kept under {seed, offset} with dropout_p. Philox4x32-7 keyed by seed ^
 * (offset's high 32 bits, in place); with row = 16 I + 8 a + 2 p + e and key = 16 J + 8 b' + 2 q + c, at
 * counter (4 J + q, 4 I + p, stream, offset's low 32 bits), byte 2 a + b' of word 2 e + c kept when >= the
 * threshold the library derives from dropout_p (round(256 p), at most 255).
 */
bool aotk__check_dropout_keep(int64_t seed, int64_t offset, float dropout_p, uint32_t stream, int64_t row, int64_t key);

/* Philox4x32 with `rounds` rounds on counter[4] under key[2], in place (Random123's philox4x32_R), for
 * the known-answer test of the model above. */
void aotk__check_philox4x32(uint32_t counter[4], const uint32_t key[2], int rounds);

#endif /* AOTK_CHECK_H */

"""Pieces the attention kernels share: sequences, masks, score modifiers and the dropout RNG.

Every feature of issue 4 is a run-time argument here, so the variant count stays bounded:
- variable length: a program reads its sequence's start and length from cu_seqlens;
- causal masks and sliding windows: one rule, row i sees key j when
  i + diag - window_left <= j <= i + diag + window_right (a negative bound is unbounded; causal is
  window_right = 0), with diag = seqlen_k - seqlen_q (bottom-right) or 0 (top-left). The rule decides
  the key (or query) range a program walks, split into blocks every row sees in full (no mask
  computed) and the blocks at the edges (masked), so the work grows with the window;
- softcap, ALiBi and dropout: flags in `flags`, compiled only into the EXTRAS variant (the plain
  variant keeps the inner loop of issue 2); sinks touch only the forward's epilogue and the backward's
  pre-pass, so every variant takes them.
"""

import triton
import triton.language as tl

# Bits of the kernels' `flags` argument (src/attn/aotk_attn.c sets them).
FLAG_WRITE_LSE = tl.constexpr(1)
FLAG_VARLEN = tl.constexpr(2)
FLAG_TOP_LEFT = tl.constexpr(4)
FLAG_SOFTCAP = tl.constexpr(8)
FLAG_ALIBI = tl.constexpr(16)
FLAG_SINKS = tl.constexpr(32)
FLAG_DROPOUT = tl.constexpr(64)
FLAG_REVERSE = tl.constexpr(128)  # run the last query blocks first (causal-like work per block)

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def sequence(CuSeqlens, batch, dense_length, flags):
    """(first row, length) of sequence `batch`: from cu_seqlens in the varlen layout, else (0, dense)."""
    if (flags & FLAG_VARLEN) != 0:
        start = tl.load(CuSeqlens + batch)
        length = tl.load(CuSeqlens + batch + 1) - start
        # A sequence longer than max_seqlen is cut to it: the grid only covers max_seqlen rows.
        length = tl.minimum(length, dense_length)
    else:
        start = batch * 0
        length = dense_length
    return start, length


@triton.jit
def diagonal(seqlen_q, seqlen_k, flags):
    if (flags & FLAG_TOP_LEFT) != 0:
        return seqlen_q * 0
    return seqlen_k - seqlen_q


@triton.jit
def key_ranges(first_row, last_row, seqlen_k, diag, lo_rel, hi_rel, BLOCK_N: tl.constexpr):
    """For query rows first_row..last_row: key ranges [lo, full_lo) masked, [full_lo, full_hi) seen in
    full by every row (and all < seqlen_k), [full_hi, hi) masked. lo is a multiple of BLOCK_N, as is
    every range start that is not empty. Scalar arithmetic in int64, so unbounded windows (the int32
    extremes of window_bounds) cannot overflow."""
    first = first_row.to(tl.int64) + diag
    last = last_row.to(tl.int64) + diag
    lo = tl.minimum(tl.maximum(first + lo_rel, 0), seqlen_k).to(tl.int32)
    full_lo = tl.minimum(tl.maximum(last + lo_rel, 0), seqlen_k).to(tl.int32)
    hi = tl.maximum(tl.minimum(last + hi_rel + 1, seqlen_k), 0).to(tl.int32)
    full_hi = tl.maximum(tl.minimum(first + hi_rel + 1, seqlen_k), 0).to(tl.int32)
    lo = (lo // BLOCK_N) * BLOCK_N
    full_lo = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_N) * BLOCK_N, lo), hi)
    full_hi = tl.maximum(tl.minimum((full_hi // BLOCK_N) * BLOCK_N, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def query_ranges(first_col, last_col, seqlen_q, diag, lo_rel, hi_rel, partial_block, BLOCK_M: tl.constexpr):
    """The transpose of key_ranges, for keys first_col..last_col: the query rows that see some of
    them ([lo, hi)), and within that [full_lo, full_hi), rows that see all of them (empty when the key
    block is partial, since its missing keys need the mask). Row i sees key j when
    j - diag - hi_rel <= i <= j - diag - lo_rel."""
    first = first_col.to(tl.int64) - diag
    last = last_col.to(tl.int64) - diag
    lo = tl.minimum(tl.maximum(first - hi_rel, 0), seqlen_q).to(tl.int32)
    full_lo = tl.minimum(tl.maximum(last - hi_rel, 0), seqlen_q).to(tl.int32)
    hi = tl.maximum(tl.minimum(last - lo_rel + 1, seqlen_q), 0).to(tl.int32)
    full_hi = tl.maximum(tl.minimum(first - lo_rel + 1, seqlen_q), 0).to(tl.int32)
    if partial_block:
        full_lo = hi
    lo = (lo // BLOCK_M) * BLOCK_M
    full_lo = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_M) * BLOCK_M, lo), hi)
    full_hi = tl.maximum(tl.minimum((full_hi // BLOCK_M) * BLOCK_M, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def window_bounds(window_left, window_right):
    """The window as bounds on rel = j - i - diag, with -1 (unbounded) as the int32 extremes. rel itself
    stays in range: j - i - diag lies in (-seqlen_k, seqlen_q) bottom-right and (-seqlen_q, seqlen_k)
    top-left (give or take a block of padding rows and keys)."""
    lo_rel = tl.where(window_left >= 0, -window_left, -2147483647)
    hi_rel = tl.where(window_right >= 0, window_right, 2147483647)
    return lo_rel, hi_rel


@triton.jit
def key_bounds(rows, seqlen_k, diag, lo_rel, hi_rel):
    """Per query row, the first and last key it sees (first > last: none), from the window rule and the
    key length; computed once per program in int64 (unbounded windows are the int32 extremes), so the
    masked inner loop only compares: cols >= first & cols <= last. Rows past the query length need no
    mask: they are never stored, and the backward's padded statistics zero them."""
    base = rows.to(tl.int64) + diag
    first = tl.minimum(tl.maximum(base + lo_rel, 0), seqlen_k).to(tl.int32)
    last = tl.maximum(tl.minimum(base + hi_rel, seqlen_k - 1), -1).to(tl.int32)
    return first, last


@triton.jit
def query_bounds(cols, seqlen_q, seqlen_k, diag, lo_rel, hi_rel):
    """The transpose: per key, the first and last query row that sees it (none for keys past the key
    length). Row i sees key j when j - diag - hi_rel <= i <= j - diag - lo_rel."""
    base = cols.to(tl.int64) - diag
    first = tl.minimum(tl.maximum(base - hi_rel, 0), seqlen_q).to(tl.int32)
    last = tl.maximum(tl.minimum(base - lo_rel, seqlen_q - 1), -1).to(tl.int32)
    last = tl.where(cols < seqlen_k, last, -1)
    return first, last


@triton.jit
def tanh_approx(x):
    # tanh.approx.f32: one MUFU instruction (max relative error ~2^-11, far below bf16/fp16 rounding of
    # the probabilities it feeds); libdevice's tanh costs ~20 instructions in the inner loop.
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def modified_scores(qk, rows, cols, diag, qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags):
    """Scores in log2 units with softcap and ALiBi applied (EXTRAS kernels). Also returns tanh of the
    capped score (for the backward's chain rule; 0 when softcap is off)."""
    t = qk * 0.0
    s = qk * qk_scale_log2
    if (flags & FLAG_SOFTCAP) != 0:
        t = tanh_approx(qk * softcap_scale)
        s = t * softcap_log2
    if (flags & FLAG_ALIBI) != 0:
        distance = tl.abs(rows[:, None] + diag - cols[None, :]).to(tl.float32)
        s = s - slope_log2 * distance
    return s, t


@triton.jit
def dropout_keep(seed, offset_lo, stream, rows, start_n, threshold, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] keep mask for query rows `rows` and keys start_n .. start_n + BLOCK_N - 1 (start_n a
    multiple of 16).

    The rule (docs/design.md, "Dropout"): write the query index i = 16 I + 8 a + 2 p + e and the key index
    j = 16 J + 8 b + 2 q + c (a, b, c, e single bits; p, q in 0..3). Element (i, j) of stream s (= batch *
    heads_q + head) takes byte 2 a + b of word 2 e + c of Philox4x32-7 at counter (4 J + q, 4 I + p, s,
    offset_lo) under the 64-bit key `seed`, and is kept when that byte is >= threshold (0..255). One call
    serves 16 elements, of which a thread of a wgmma accumulator holds 8 (rows r and r + 8, columns 2 q + c
    and 8 + 2 q + c), so the Gluon kernels can draw one call per 8 scores in registers, in both of their
    layouts.
    Here a call per (row, J, q) serves the row's 4 elements, today's rate. The result depends only on
    (seed, offset, s, i, j), never on the tile shape, so the backward's differently tiled kernels
    regenerate exactly the forward's mask.
    """
    tl.static_assert(BLOCK_N % 16 == 0)
    groups = (start_n // 4) + tl.arange(0, BLOCK_N // 4)  # 4 J + q of key group g: J = g // 4, q = g % 4
    c0 = tl.broadcast_to(groups[None, :], (BLOCK_M, BLOCK_N // 4)).to(tl.uint32, bitcast=True)
    row_counter = (rows >> 4) * 4 + ((rows >> 1) & 3)
    c1 = tl.broadcast_to(row_counter[:, None], (BLOCK_M, BLOCK_N // 4)).to(tl.uint32, bitcast=True)
    c2 = tl.full((BLOCK_M, BLOCK_N // 4), 0, tl.uint32) + stream.to(tl.uint32, bitcast=True)
    c3 = tl.full((BLOCK_M, BLOCK_N // 4), 0, tl.uint32) + offset_lo
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3, 7)
    # The row's words (e: 2 and 3 for odd rows) and bytes (a: the high half for rows with bit 3 set).
    odd = ((rows & 1) != 0)[:, None]
    shift = (((rows >> 3) & 1) * 16)[:, None].to(tl.uint32)
    w_c0 = tl.where(odd, r2, r0) >> shift
    w_c1 = tl.where(odd, r3, r1) >> shift
    # Columns: c (word) innermost, then b (byte), spread to j = 16 J + 8 b + 2 q + c.
    bytes_b0 = tl.join(w_c0 & 255, w_c1 & 255)
    bytes_b1 = tl.join((w_c0 >> 8) & 255, (w_c1 >> 8) & 255)
    x = tl.join(bytes_b0, bytes_b1)  # [BLOCK_M, BLOCK_N // 4, 2 (c), 2 (b)]
    x = tl.reshape(x, (BLOCK_M, BLOCK_N // 16, 4, 2, 2))
    x = tl.permute(x, (0, 1, 4, 2, 3))
    x = tl.reshape(x, (BLOCK_M, BLOCK_N))
    return x >= threshold


@triton.jit
def rng_state(RngState):
    """The device-side {seed, offset}: the key (seed with the offset's high word mixed in) and the
    offset's low word, the fourth Philox counter."""
    seed = tl.load(RngState)
    offset = tl.load(RngState + 1)
    key = seed ^ (offset & -4294967296)
    offset_lo = (offset & 4294967295).to(tl.uint32)
    return key, offset_lo

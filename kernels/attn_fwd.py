"""FlashAttention forward, written for ahead-of-time compilation.

Layouts: dense q [batch, seqlen_q, heads_q, head_dim_qk], k [batch, seqlen_k, heads_kv, head_dim_qk],
v [batch, seqlen_k, heads_kv, head_dim_v], out like q with head_dim_v, lse [batch, heads_q, seqlen_q]
fp32 (natural log). Variable length (FLAG_VARLEN): the same with batch stride 0, each sequence's first
row read from cu_seqlens, and lse [heads_q, total_q] (batch stride 0 too). The last dimension is
contiguous, so its stride is not an argument; every other stride is.

Masks (causal, sliding window, either alignment), lengths and GQA are run-time arguments; see
kernels/attn_common.py for the block ranges. The head dims are compiled as powers of two
(HEAD_DIM_QK, HEAD_DIM_V) and the true ones (multiples of 8) masked at run time. EXTRAS compiles in
softcap, ALiBi and dropout, each switched by a flag; sinks (epilogue only) are in every variant.

Integer arguments: batch strides are i64 (a batch can exceed 2^31 elements) and so is a varlen
sequence's start offset; the other strides and the lengths are i32, and the host checks that one
sequence's span fits (tile offsets stay 32-bit, which keeps the inner loop's address arithmetic cheap).

The kernel module is free of torch and of driver calls: it is imported on a machine with no GPU.
"""

import triton
import triton.language as tl

from attn_common import (FLAG_ALIBI, FLAG_DROPOUT, FLAG_REVERSE, FLAG_SINKS, FLAG_WRITE_LSE, LN2, LOG2E, diagonal,
                         dropout_keep, key_bounds, key_ranges, modified_scores, rng_state, sequence, window_bounds)


@triton.jit
def _attn_fwd_block_range(q, k_base, v_base, stride_ks, stride_vs, acc, m_i, l_i,
                          lo, hi, gap_lo, gap_hi, rows, seqlen_k, diag, first_key, last_key,
                          offs_n, offs_dqk, offs_dv, dqk_ok, dv_ok,
                          qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags,
                          seed, offset_lo, stream, threshold, desc_batch, desc_col_k, desc_col_v,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                          EXTRAS: tl.constexpr, TMA: tl.constexpr):
    # One pass of online softmax over the key blocks of [lo, hi) outside [gap_lo, gap_hi). MASKED blocks
    # apply the window rule and the key bound; unmasked blocks are known to be fully visible to every
    # row. The masked blocks at both edges of a window run in one loop, skipping the unmasked middle:
    # three loops (left edge, middle, right edge) kept 186 registers live instead of 126 in the plain
    # forward (the loops' hoisted pointers and masks overlap), which halved its occupancy.
    count = tl.cdiv(gap_lo - lo, BLOCK_N) + tl.cdiv(hi - gap_hi, BLOCK_N)
    for i in range(0, count):
        start_n = lo + i * BLOCK_N
        start_n = tl.where(start_n >= gap_lo, start_n + (gap_hi - gap_lo), start_n)
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if TMA:
            # k_base and v_base are [batch, seqlen_k, heads_kv * head_dim] descriptors: a block past
            # seqlen_k reads zeros (the hardware's bounds), and the mask below drops those keys.
            k = k_base.load([desc_batch, start_n, desc_col_k]).reshape(BLOCK_N, q.shape[1])
        else:
            # The block's first key in int64 (a sequence may span more than 2^31 elements), the rows
            # within it in int32 (the host keeps a token stride times 256 rows under 2^31).
            k_ptrs = k_base + start_n.to(tl.int64) * stride_ks + offs_n[:, None] * stride_ks + offs_dqk[None, :]
            v_ptrs = v_base + start_n.to(tl.int64) * stride_vs + offs_n[:, None] * stride_vs + offs_dv[None, :]
            if MASKED:
                col_ok = cols < seqlen_k
                k = tl.load(k_ptrs, mask=col_ok[:, None] & dqk_ok[None, :], other=0.0)
            else:
                k = tl.load(k_ptrs, mask=dqk_ok[None, :], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if EXTRAS:
            s, _ = modified_scores(qk, rows, cols, diag, qk_scale_log2, softcap_scale, softcap_log2, slope_log2,
                                   flags)
        else:
            s = qk * qk_scale_log2
        if MASKED:
            s = tl.where((cols[None, :] >= first_key[:, None]) & (cols[None, :] <= last_key[:, None]), s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen no visible key yet keeps m = -inf; subtract 0 instead so that
            # exp2 gives 0 rather than NaN.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(s - m_safe[:, None])
            alpha = tl.math.exp2(m_i - m_safe)
        else:
            if EXTRAS:
                m_new = tl.maximum(m_i, tl.max(s, 1))
                p = tl.math.exp2(s - m_new[:, None])
            else:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale_log2)
                p = tl.math.exp2(qk * qk_scale_log2 - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if EXTRAS:
            if (flags & FLAG_DROPOUT) != 0:
                p = tl.where(dropout_keep(seed, offset_lo, stream, rows, start_n, threshold, BLOCK_M, BLOCK_N), p, 0.0)
        if TMA:
            v = v_base.load([desc_batch, start_n, desc_col_v]).reshape(BLOCK_N, acc.shape[1])
        elif MASKED:
            v = tl.load(v_ptrs, mask=col_ok[:, None] & dv_ok[None, :], other=0.0)
        else:
            v = tl.load(v_ptrs, mask=dv_ok[None, :], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attn_fwd_program(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                      stride_qb, stride_qs, stride_qh,
                      stride_kb, stride_ks, stride_kh,
                      stride_vb, stride_vs, stride_vh,
                      stride_ob, stride_os, stride_oh,
                      stride_lb, stride_lh, stride_ab,
                      seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                      window_left, window_right, flags,
                      qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                      DescQ, DescK, DescV,
                      HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, EXTRAS: tl.constexpr, TMA: tl.constexpr):
    # Grid: one program per (query block, batch, query head), flattened to 1-d with the query block
    # fastest, so the programs in flight share one head's K and V in L2. With FLAG_REVERSE (causal
    # masks) the heaviest, last, query blocks run first, which shortens the tail.
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    if (flags & FLAG_REVERSE) != 0:
        m_block = num_m_blocks - 1 - m_block
    batch = bh // heads_q
    head_q = bh % heads_q
    head_kv = head_q // group_size

    q_start, sq = sequence(CuSeqlensQ, batch, seqlen_q, flags)
    k_start, sk = sequence(CuSeqlensK, batch, seqlen_k, flags)
    start_m = m_block * BLOCK_M
    if start_m >= sq:
        return
    offs_m = tl.arange(0, BLOCK_M)
    rows = start_m + offs_m
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, HEAD_DIM_QK)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    # Written as a multiple of 8 so that the masks below stay constant over 8-element (16-byte) runs and
    # the loads stay vectorized.
    dqk_ok = offs_dqk < head_dim_qk8 * 8
    dv_ok = offs_dv < head_dim_v8 * 8

    # Offsets to a tile's first row in int64, within the tile in int32: a sequence may span more than
    # 2^31 elements, a tile of up to 256 rows may not (the host's rule on token strides).
    batch64 = batch.to(tl.int64)
    first_q64 = q_start.to(tl.int64) + start_m
    q_base = Q + batch64 * stride_qb + first_q64 * stride_qs + head_q.to(tl.int64) * stride_qh
    k_base = K + batch64 * stride_kb + k_start.to(tl.int64) * stride_ks + head_kv.to(tl.int64) * stride_kh
    v_base = V + batch64 * stride_vb + k_start.to(tl.int64) * stride_vs + head_kv.to(tl.int64) * stride_vh
    row_ok = rows < sq
    if TMA:
        # Dense layouts only (the host sends varlen to the pointer kernel): the descriptors' first
        # dimension is the batch, so blocks past a sequence's end read zeros, never the next entry.
        q = DescQ.load([batch, start_m, head_q * HEAD_DIM_QK]).reshape(BLOCK_M, HEAD_DIM_QK)
    else:
        q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_dqk[None, :], mask=row_ok[:, None] & dqk_ok[None, :],
                    other=0.0)
    if TMA:
        k_base = DescK
        v_base = DescV

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], dtype=tl.float32)

    diag = diagonal(sq, sk, flags)
    last_row = tl.minimum(start_m + BLOCK_M, sq) - 1
    lo_rel, hi_rel = window_bounds(window_left, window_right)
    lo, full_lo, full_hi, hi = key_ranges(start_m, last_row, sk, diag, lo_rel, hi_rel, BLOCK_N)
    first_key, last_key = key_bounds(rows, sk, diag, lo_rel, hi_rel)

    slope_log2 = qk_scale_log2 * 0.0
    seed = tl.zeros([], dtype=tl.int64)
    offset_lo = tl.zeros([], dtype=tl.uint32)
    stream = bh
    threshold = dropout_threshold.to(tl.uint32, bitcast=True)
    if EXTRAS:
        if (flags & FLAG_ALIBI) != 0:
            slope_log2 = tl.load(AlibiSlopes + batch64 * stride_ab + head_q) * LOG2E
        if (flags & FLAG_DROPOUT) != 0:
            seed, offset_lo = rng_state(RngState)

    acc, m_i, l_i = _attn_fwd_block_range(q, k_base, v_base, stride_ks, stride_vs, acc, m_i, l_i,
                                          full_lo, full_hi, full_hi, full_hi, rows, sk, diag, first_key, last_key,
                                          offs_n, offs_dqk, offs_dv, dqk_ok, dv_ok,
                                          qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags,
                                          seed, offset_lo, stream, threshold, batch, head_kv * HEAD_DIM_QK,
                                          head_kv * HEAD_DIM_V, BLOCK_M, BLOCK_N, False, EXTRAS, TMA)
    acc, m_i, l_i = _attn_fwd_block_range(q, k_base, v_base, stride_ks, stride_vs, acc, m_i, l_i,
                                          lo, hi, full_lo, full_hi, rows, sk, diag, first_key, last_key,
                                          offs_n, offs_dqk, offs_dv, dqk_ok, dv_ok,
                                          qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags,
                                          seed, offset_lo, stream, threshold, batch, head_kv * HEAD_DIM_QK,
                                          head_kv * HEAD_DIM_V, BLOCK_M, BLOCK_N, True, EXTRAS, TMA)

    if (flags & FLAG_SINKS) != 0:
        # The sink joins the denominator as one more score (log2 units), with no value. It touches only
        # this epilogue, so every variant has it (not only EXTRAS).
        sink = tl.load(Sinks + head_q) * LOG2E
        m_fin = tl.maximum(m_i, sink)
        rescale = tl.math.exp2(m_i - m_fin)
        l_i = l_i * rescale + tl.math.exp2(sink - m_fin)
        acc = acc * rescale[:, None]
        m_i = m_fin
    # A row with no visible key (and no sink) has l = 0: its output is 0 and its lse is -inf.
    has_keys = l_i > 0.0
    l_safe = tl.where(has_keys, l_i, 1.0)
    if EXTRAS:
        if (flags & FLAG_DROPOUT) != 0:
            l_safe = l_safe / dropout_scale
    out = acc / l_safe[:, None]
    o_ptrs = Out + batch64 * stride_ob + first_q64 * stride_os + head_q.to(tl.int64) * stride_oh
    o_ptrs = o_ptrs + offs_m[:, None] * stride_os + offs_dv[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & dv_ok[None, :])
    if (flags & FLAG_WRITE_LSE) != 0:
        # m is in log2 units (scores were multiplied by log2(e)); lse is natural log.
        lse = tl.where(has_keys, (m_i + tl.math.log2(l_i)) * LN2, float("-inf"))
        lse_ptrs = Lse + batch64 * stride_lb + head_q.to(tl.int64) * stride_lh + q_start.to(tl.int64) + rows
        tl.store(lse_ptrs, lse, mask=row_ok)


@triton.jit
def attn_fwd(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
             stride_qb, stride_qs, stride_qh,
             stride_kb, stride_ks, stride_kh,
             stride_vb, stride_vs, stride_vh,
             stride_ob, stride_os, stride_oh,
             stride_lb, stride_lh, stride_ab,
             seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
             window_left, window_right, flags,
             qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
             HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             EXTRAS: tl.constexpr):
    _attn_fwd_program(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                      stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                      stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
                      stride_lb, stride_lh, stride_ab,
                      seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                      window_left, window_right, flags,
                      qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                      Q, K, V, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M, BLOCK_N, EXTRAS, False)


@triton.jit
def attn_fwd_tma(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                 stride_qb, stride_qs, stride_qh,
                 stride_kb, stride_ks, stride_kh,
                 stride_vb, stride_vs, stride_vh,
                 stride_ob, stride_os, stride_oh,
                 stride_lb, stride_lh, stride_ab,
                 seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                 window_left, window_right, flags,
                 qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                 DescQ, DescK, DescV,
                 HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 EXTRAS: tl.constexpr):
    # sm_90: Q, K and V arrive through host-side TMA descriptors (DescQ/K/V, encoded per call by the
    # runtime over [batch, seqlen, heads * head_dim]); the pointer arguments stay so that both kernels
    # take the same parameters before the descriptors, and the launcher packs them once.
    _attn_fwd_program(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                      stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                      stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
                      stride_lb, stride_lh, stride_ab,
                      seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                      window_left, window_right, flags,
                      qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                      DescQ, DescK, DescV, HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M, BLOCK_N, EXTRAS, True)


@triton.jit
def attn_dropout_mask(Mask, CuSeqlensQ, CuSeqlensK, RngState,
                      stride_mb, stride_mh, stride_ms,
                      seqlen_q, seqlen_k, heads_q, num_m_blocks, flags, dropout_threshold,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # The debug output: the keep mask the forward and backward draw, for every (row, key) pair of each
    # sequence, from the same function they call (attn_common.dropout_keep).
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    batch = bh // heads_q
    head_q = bh % heads_q
    _, sq = sequence(CuSeqlensQ, batch, seqlen_q, flags)
    _, sk = sequence(CuSeqlensK, batch, seqlen_k, flags)
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    seed, offset_lo = rng_state(RngState)
    threshold = dropout_threshold.to(tl.uint32, bitcast=True)
    base = Mask + batch.to(tl.int64) * stride_mb + head_q.to(tl.int64) * stride_mh
    for start_n in range(0, sk, BLOCK_N):
        cols = start_n + offs_n
        keep = dropout_keep(seed, offset_lo, bh, rows, start_n, threshold, BLOCK_M, BLOCK_N)
        ptrs = base + rows[:, None].to(tl.int64) * stride_ms + cols[None, :]
        tl.store(ptrs, keep.to(tl.uint8), mask=(rows[:, None] < sq) & (cols[None, :] < sk))

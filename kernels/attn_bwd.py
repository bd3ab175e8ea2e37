"""FlashAttention backward, written for ahead-of-time compilation.

Kernels, each output owned by exactly one program, so results are bitwise deterministic with no
atomics and no zero-initialized buffers:
  attn_bwd_preprocess  delta[b, h, i] = sum_d dO[i, d] * O[i, d], and lse in log2 units, staged in
                       the workspace; with sinks, each program's partial sum of the sink gradient
  attn_bwd_dkdv        one program per (key block, batch, kv head): loops over the query heads of its
                       GQA group and over the query blocks that see its keys; dK and dV summed in
                       registers over the group, written once.
  attn_bwd_dq          one program per (query block, batch, query head): loops over the key blocks it
                       sees; dQ written once.
  attn_bwd_sink_reduce one program per query head: sums the sink gradient's partials in a fixed order.
The price of ownership is recomputing Q K^T and dO V^T in both passes (7 matrix products instead of 5).
The non-deterministic sm_90 backward (kernels/attn_bwd_hopper.py, attn_bwd_fused_hopper) computes 5:
its one pass adds dQ into an fp32 accumulator, and attn_bwd_dq_convert here casts that into dq.

Layouts, masks and features follow kernels/attn_fwd.py and kernels/attn_common.py. A row that saw no
key has lse = -inf; it gets no gradient. The workspace holds delta and lse * log2(e), fp32
[batch * heads_q, stats_stride] each, stats_stride being seqlen_q (max_seqlen_q for varlen) rounded up
to 128, then the sink partials.

Gradients of the features: dropout multiplies dP and P by keep / (1 - p) (the mask regenerated from
the same counters as the forward's); softcap multiplies dS by 1 - tanh^2 (the derivative of
c * tanh(s / c)); ALiBi adds a constant to the scores and nothing to the gradients; a sink's gradient
is -sum_i exp(sink - lse_i) * delta_i.
"""

import triton
import triton.language as tl

from attn_common import (FLAG_ALIBI, FLAG_DROPOUT, FLAG_REVERSE, FLAG_SINKS, FLAG_SOFTCAP, LOG2E, diagonal,
                         dropout_keep, key_bounds, key_ranges, modified_scores, query_bounds, query_ranges, rng_state,
                         sequence, window_bounds)


@triton.jit
def attn_bwd_preprocess(Out, DOut, Lse, Delta, LseLog2, CuSeqlensQ, Sinks, SinkPartial,
                        stride_ob, stride_os, stride_oh,
                        stride_db, stride_ds, stride_dh,
                        stride_lb, stride_lh,
                        seqlen_q, heads_q, num_seqs, num_m_blocks, stats_stride, head_dim_v8, flags,
                        HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr):
    # Stages the per-row statistics the two passes read in every step, in the workspace: delta and
    # lse * log2(e) (with -inf, a row that saw no key, turned into +inf so that exp2(s - lse) = 0), in
    # rows of stats_stride (seqlen_q rounded up to 128) floats. Rows past the sequence are written too
    # (delta 0, lse +inf), so the passes load these vectors unmasked and 16-byte aligned: with the
    # caller's lse (any stride, any length) they were scalar loads inside the inner loop.
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    batch = bh // heads_q
    head = bh % heads_q
    q_start, sq = sequence(CuSeqlensQ, batch, seqlen_q, flags)
    # The block's first row in int64, the rows within it in int32 (see attn_fwd).
    batch64 = batch.to(tl.int64)
    head64 = head.to(tl.int64)
    start64 = q_start.to(tl.int64)
    local = tl.arange(0, BLOCK_M)
    offs_m = m_block * BLOCK_M + local
    first64 = start64 + m_block * BLOCK_M
    offs_d = tl.arange(0, HEAD_DIM_V)
    d_ok = offs_d < head_dim_v8 * 8
    row_ok = offs_m < sq
    mask = row_ok[:, None] & d_ok[None, :]
    o = tl.load(Out + batch64 * stride_ob + first64 * stride_os + head64 * stride_oh + local[:, None] * stride_os
                + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(DOut + batch64 * stride_db + first64 * stride_ds + head64 * stride_dh + local[:, None] * stride_ds
                 + offs_d[None, :], mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    lse = tl.load(Lse + batch64 * stride_lb + head64 * stride_lh + start64 + offs_m, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse) * LOG2E
    row = bh.to(tl.int64) * stats_stride
    tl.store(Delta + row + offs_m, delta)
    tl.store(LseLog2 + row + offs_m, lse)
    if (flags & FLAG_SINKS) != 0:
        # d loss / d sink = -sum_i P_i,sink * delta_i; this program's rows, summed by attn_bwd_sink_reduce.
        sink = tl.load(Sinks + head) * LOG2E
        partial = -tl.sum(tl.math.exp2(sink - lse) * delta, axis=0)
        tl.store(SinkPartial + (head.to(tl.int64) * num_seqs + batch) * num_m_blocks + m_block, partial)


@triton.jit
def attn_bwd_dq_convert(DQAcc, DQ, CuSeqlensQ, stride_qb, stride_qs, stride_qh, seqlen_q, heads_q, num_m_blocks,
                        stats_stride, flags, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    # dq[b, i, h, :] = acc[b * heads_q + h, i, :] for the rows i of sequence b (varlen: from its first
    # row in the packed dq): one program per (query block, sequence, query head). The accumulator is
    # already scaled by softmax_scale; rows past the sequence (the padding up to stats_stride) are not
    # written.
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    rows = (pid % num_m_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    b = bh // heads_q
    h = bh % heads_q
    q_start, sq = sequence(CuSeqlensQ, b, seqlen_q, flags)
    acc = tl.load(DQAcc + (bh.to(tl.int64) * stats_stride + rows[:, None]) * HEAD_DIM + cols[None, :])
    ptrs = DQ + b.to(tl.int64) * stride_qb + q_start.to(tl.int64) * stride_qs + h.to(tl.int64) * stride_qh + \
        rows[:, None].to(tl.int64) * stride_qs + cols[None, :]
    tl.store(ptrs, acc.to(DQ.dtype.element_ty), mask=rows[:, None] < sq)


@triton.jit
def attn_bwd_sink_reduce(SinkPartial, DSinks, count, BLOCK: tl.constexpr):
    head = tl.program_id(0)
    base = SinkPartial + head.to(tl.int64) * count
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, count, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        total += tl.load(base + offs, mask=offs < count, other=0.0)
    tl.store(DSinks + head, tl.sum(total, axis=0))


# Causal-like masks (FLAG_REVERSE): about this many programs per group of heads (program_tile).
GROUP_PROGRAMS = tl.constexpr(128)


@triton.jit
def program_tile(pid, num_blocks, flags):
    """The (block, sequence x head) tile of program pid: block fastest; under causal-like masks heaviest
    first within groups of about GROUP_PROGRAMS programs (kernels/attn_hopper_common.py's program_tile,
    which says why)."""
    num_heads = tl.num_programs(0) // num_blocks
    block = pid % num_blocks
    head = pid // num_blocks
    if (flags & FLAG_REVERSE) != 0:
        group_heads = tl.minimum(tl.cdiv(GROUP_PROGRAMS, num_blocks), num_heads)
        first = pid // (group_heads * num_blocks) * group_heads
        in_group = tl.minimum(group_heads, num_heads - first)
        rank = pid - first * num_blocks
        block = rank // in_group
        head = first + rank % in_group
    return block, head


@triton.jit
def _load_row_stats(lse_base, delta_base, rows):
    # Staged by attn_bwd_preprocess: padded, so no mask; lse already in log2 units.
    return tl.load(lse_base + rows), tl.load(delta_base + rows)


@triton.jit
def attn_bwd_dkdv(Q, K, V, DOut, LseLog2, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
                  stride_qb, stride_qs, stride_qh,
                  stride_kb, stride_ks, stride_kh,
                  stride_vb, stride_vs, stride_vh,
                  stride_dob, stride_dos, stride_doh,
                  stride_dkb, stride_dks, stride_dkh,
                  stride_dvb, stride_dvs, stride_dvh,
                  stride_ab,
                  seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride,
                  head_dim_qk8, head_dim_v8, window_left, window_right, flags,
                  softmax_scale, qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                  HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, EXTRAS: tl.constexpr):
    n_block, bh = program_tile(tl.program_id(0), num_n_blocks, flags)
    batch = bh // heads_kv
    head_kv = bh % heads_kv
    q_start, sq = sequence(CuSeqlensQ, batch, seqlen_q, flags)
    k_start, sk = sequence(CuSeqlensK, batch, seqlen_k, flags)
    start_n = n_block * BLOCK_N
    if start_n >= sk:
        return
    batch64 = batch.to(tl.int64)
    q_start64 = q_start.to(tl.int64)
    k_start64 = k_start.to(tl.int64)
    local_n = tl.arange(0, BLOCK_N)
    offs_n = start_n + local_n
    offs_m = tl.arange(0, BLOCK_M)
    offs_dqk = tl.arange(0, HEAD_DIM_QK)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    dqk_ok = offs_dqk < head_dim_qk8 * 8
    dv_ok = offs_dv < head_dim_v8 * 8
    col_ok = offs_n < sk
    # Offsets to a block's first row in int64, within the block in int32 (see attn_fwd).
    first_k64 = k_start64 + start_n
    head_kv64 = head_kv.to(tl.int64)

    k = tl.load(K + batch64 * stride_kb + first_k64 * stride_ks + head_kv64 * stride_kh + local_n[:, None] * stride_ks
                + offs_dqk[None, :], mask=col_ok[:, None] & dqk_ok[None, :], other=0.0)
    v = tl.load(V + batch64 * stride_vb + first_k64 * stride_vs + head_kv64 * stride_vh + local_n[:, None] * stride_vs
                + offs_dv[None, :], mask=col_ok[:, None] & dv_ok[None, :], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM_QK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_V], dtype=tl.float32)

    diag = diagonal(sq, sk, flags)
    last_col = tl.minimum(start_n + BLOCK_N, sk) - 1
    lo_rel, hi_rel = window_bounds(window_left, window_right)
    lo, full_lo, full_hi, hi = query_ranges(start_n, last_col, sq, diag, lo_rel, hi_rel,
                                            start_n + BLOCK_N > sk, BLOCK_M)
    first_row, last_row = query_bounds(offs_n, sq, sk, diag, lo_rel, hi_rel)
    seed = tl.zeros([], dtype=tl.int64)
    offset_lo = tl.zeros([], dtype=tl.uint32)
    threshold = dropout_threshold.to(tl.uint32, bitcast=True)
    if EXTRAS:
        if (flags & FLAG_DROPOUT) != 0:
            seed, offset_lo = rng_state(RngState)

    for g in range(0, group_size):
        head_q = head_kv * group_size + g
        q_base = Q + batch64 * stride_qb + q_start64 * stride_qs + head_q.to(tl.int64) * stride_qh
        do_base = DOut + batch64 * stride_dob + q_start64 * stride_dos + head_q.to(tl.int64) * stride_doh
        stats_row = (batch64 * heads_q + head_q) * stats_stride
        lse_base = LseLog2 + stats_row
        delta_base = Delta + stats_row
        stream = batch * heads_q + head_q
        slope_log2 = qk_scale_log2 * 0.0
        if EXTRAS:
            if (flags & FLAG_ALIBI) != 0:
                slope_log2 = tl.load(AlibiSlopes + batch64 * stride_ab + head_q) * LOG2E
        dk, dv = _dkdv_block_range(q_base, do_base, lse_base, delta_base, k, v, dk, dv,
                                   stride_qs, stride_dos, full_lo, full_hi, full_hi, full_hi, sq, sk, offs_m, offs_n,
                                   offs_dqk, offs_dv,
                                   dqk_ok, dv_ok, diag, first_row, last_row, flags, qk_scale_log2,
                                   softcap_scale, softcap_log2, slope_log2, seed, offset_lo, stream, threshold,
                                   dropout_scale, start_n, BLOCK_M, BLOCK_N, False, EXTRAS)
        dk, dv = _dkdv_block_range(q_base, do_base, lse_base, delta_base, k, v, dk, dv,
                                   stride_qs, stride_dos, lo, hi, full_lo, full_hi, sq, sk, offs_m, offs_n, offs_dqk,
                                   offs_dv,
                                   dqk_ok, dv_ok, diag, first_row, last_row, flags, qk_scale_log2,
                                   softcap_scale, softcap_log2, slope_log2, seed, offset_lo, stream, threshold,
                                   dropout_scale, start_n, BLOCK_M, BLOCK_N, True, EXTRAS)

    dk = dk * softmax_scale
    tl.store(DK + batch64 * stride_dkb + first_k64 * stride_dks + head_kv64 * stride_dkh + local_n[:, None] * stride_dks
             + offs_dqk[None, :], dk.to(DK.dtype.element_ty), mask=col_ok[:, None] & dqk_ok[None, :])
    tl.store(DV + batch64 * stride_dvb + first_k64 * stride_dvs + head_kv64 * stride_dvh + local_n[:, None] * stride_dvs
             + offs_dv[None, :], dv.to(DV.dtype.element_ty), mask=col_ok[:, None] & dv_ok[None, :])


@triton.jit
def _dkdv_block_range(q_base, do_base, lse_base, delta_base, k, v, dk, dv,
                      stride_qs, stride_dos, lo, hi, gap_lo, gap_hi, seqlen_q, seqlen_k, offs_m, offs_n, offs_dqk,
                      offs_dv,
                      dqk_ok, dv_ok, diag, first_row, last_row, flags, qk_scale_log2,
                      softcap_scale, softcap_log2, slope_log2, seed, offset_lo, stream, threshold, dropout_scale,
                      start_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                      EXTRAS: tl.constexpr):
    # Transposed formulation: the key block is the M side of every product, so dK and dV accumulate
    # in registers as [BLOCK_N, HEAD_DIM].
    # Query blocks of [lo, hi) outside [gap_lo, gap_hi), in one loop (see attn_fwd's _attn_fwd_block_range).
    count = tl.cdiv(gap_lo - lo, BLOCK_M) + tl.cdiv(hi - gap_hi, BLOCK_M)
    for i in range(0, count):
        start_m = lo + i * BLOCK_M
        start_m = tl.where(start_m >= gap_lo, start_m + (gap_hi - gap_lo), start_m)
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m
        # The block's first row in int64, the rows within it in int32 (see attn_fwd).
        q_ptrs = q_base + start_m.to(tl.int64) * stride_qs + offs_m[:, None] * stride_qs + offs_dqk[None, :]
        do_ptrs = do_base + start_m.to(tl.int64) * stride_dos + offs_m[:, None] * stride_dos + offs_dv[None, :]
        if MASKED:
            row_ok = rows < seqlen_q
            q = tl.load(q_ptrs, mask=row_ok[:, None] & dqk_ok[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None] & dv_ok[None, :], other=0.0)
        else:
            q = tl.load(q_ptrs, mask=dqk_ok[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=dv_ok[None, :], other=0.0)
        lse, delta = _load_row_stats(lse_base, delta_base, rows)
        qk_t = tl.dot(k, tl.trans(q))  # [BLOCK_N, BLOCK_M]
        if EXTRAS:
            # |i + diag - j| = |j - diag - i|: the transposed call swaps rows and keys and negates diag.
            s_t, t_t = modified_scores(qk_t, offs_n, rows, -diag, qk_scale_log2, softcap_scale, softcap_log2,
                                       slope_log2, flags)
            p_t = tl.math.exp2(s_t - lse[None, :])
        else:
            p_t = tl.math.exp2(qk_t * qk_scale_log2 - lse[None, :])
        if MASKED:
            p_t = tl.where((rows[None, :] >= first_row[:, None]) & (rows[None, :] <= last_row[:, None]), p_t, 0.0)
        dp_t = tl.dot(v, tl.trans(do))  # [BLOCK_N, BLOCK_M]
        if EXTRAS:
            pd_t = p_t
            if (flags & FLAG_DROPOUT) != 0:
                keep_t = tl.trans(dropout_keep(seed, offset_lo, stream, rows, start_n, threshold, BLOCK_M, BLOCK_N))
                pd_t = tl.where(keep_t, p_t * dropout_scale, 0.0)
                dp_t = tl.where(keep_t, dp_t * dropout_scale, 0.0)
            dv = tl.dot(pd_t.to(do.dtype), do, dv)
            ds_t = p_t * (dp_t - delta[None, :])
            if (flags & FLAG_SOFTCAP) != 0:
                ds_t = ds_t * (1.0 - t_t * t_t)
        else:
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dq(Q, K, V, DOut, LseLog2, Delta, DQ, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
                stride_qb, stride_qs, stride_qh,
                stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh,
                stride_dob, stride_dos, stride_doh,
                stride_dqb, stride_dqs, stride_dqh,
                stride_ab,
                seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, stats_stride,
                head_dim_qk8, head_dim_v8, window_left, window_right, flags,
                softmax_scale, qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                EXTRAS: tl.constexpr):
    m_block, bh = program_tile(tl.program_id(0), num_m_blocks, flags)
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
    batch64 = batch.to(tl.int64)
    q_start64 = q_start.to(tl.int64)
    k_start64 = k_start.to(tl.int64)
    local_m = tl.arange(0, BLOCK_M)
    rows = start_m + local_m
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, HEAD_DIM_QK)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    dqk_ok = offs_dqk < head_dim_qk8 * 8
    dv_ok = offs_dv < head_dim_v8 * 8
    row_ok = rows < sq
    # Offsets to a block's first row in int64, within the block in int32 (see attn_fwd).
    first_q64 = q_start64 + start_m
    head_q64 = head_q.to(tl.int64)

    q = tl.load(Q + batch64 * stride_qb + first_q64 * stride_qs + head_q64 * stride_qh + local_m[:, None] * stride_qs
                + offs_dqk[None, :], mask=row_ok[:, None] & dqk_ok[None, :], other=0.0)
    do = tl.load(DOut + batch64 * stride_dob + first_q64 * stride_dos + head_q64 * stride_doh
                 + local_m[:, None] * stride_dos + offs_dv[None, :], mask=row_ok[:, None] & dv_ok[None, :], other=0.0)
    stats_row = bh.to(tl.int64) * stats_stride
    lse, delta = _load_row_stats(LseLog2 + stats_row, Delta + stats_row, rows)
    dq = tl.zeros([BLOCK_M, HEAD_DIM_QK], dtype=tl.float32)
    k_base = K + batch64 * stride_kb + k_start64 * stride_ks + head_kv.to(tl.int64) * stride_kh
    v_base = V + batch64 * stride_vb + k_start64 * stride_vs + head_kv.to(tl.int64) * stride_vh

    diag = diagonal(sq, sk, flags)
    last_row = tl.minimum(start_m + BLOCK_M, sq) - 1
    lo_rel, hi_rel = window_bounds(window_left, window_right)
    lo, full_lo, full_hi, hi = key_ranges(start_m, last_row, sk, diag, lo_rel, hi_rel, BLOCK_N)
    first_key, last_key = key_bounds(rows, sk, diag, lo_rel, hi_rel)
    slope_log2 = qk_scale_log2 * 0.0
    seed = tl.zeros([], dtype=tl.int64)
    offset_lo = tl.zeros([], dtype=tl.uint32)
    threshold = dropout_threshold.to(tl.uint32, bitcast=True)
    if EXTRAS:
        if (flags & FLAG_ALIBI) != 0:
            slope_log2 = tl.load(AlibiSlopes + batch64 * stride_ab + head_q) * LOG2E
        if (flags & FLAG_DROPOUT) != 0:
            seed, offset_lo = rng_state(RngState)

    dq = _dq_block_range(k_base, v_base, q, do, lse, delta, dq, stride_ks, stride_vs,
                         full_lo, full_hi, full_hi, full_hi, rows, first_key, last_key, sk,
                         offs_n, offs_dqk, offs_dv, dqk_ok, dv_ok, diag, lo_rel, hi_rel, flags,
                         qk_scale_log2, softcap_scale, softcap_log2, slope_log2, seed, offset_lo, bh, threshold,
                         dropout_scale, BLOCK_M, BLOCK_N, False, EXTRAS)
    dq = _dq_block_range(k_base, v_base, q, do, lse, delta, dq, stride_ks, stride_vs,
                         lo, hi, full_lo, full_hi, rows, first_key, last_key, sk,
                         offs_n, offs_dqk, offs_dv, dqk_ok, dv_ok, diag, lo_rel, hi_rel, flags,
                         qk_scale_log2, softcap_scale, softcap_log2, slope_log2, seed, offset_lo, bh, threshold,
                         dropout_scale, BLOCK_M, BLOCK_N, True, EXTRAS)
    dq = dq * softmax_scale
    tl.store(DQ + batch64 * stride_dqb + first_q64 * stride_dqs + head_q64 * stride_dqh + local_m[:, None] * stride_dqs
             + offs_dqk[None, :], dq.to(DQ.dtype.element_ty), mask=row_ok[:, None] & dqk_ok[None, :])


@triton.jit
def _dq_block_range(k_base, v_base, q, do, lse, delta, dq, stride_ks, stride_vs, lo, hi, gap_lo, gap_hi, rows,
                    first_key, last_key, seqlen_k,
                    offs_n, offs_dqk, offs_dv, dqk_ok, dv_ok, diag, lo_rel, hi_rel, flags,
                    qk_scale_log2, softcap_scale, softcap_log2, slope_log2, seed, offset_lo, stream, threshold,
                    dropout_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                    EXTRAS: tl.constexpr):
    # Blocks of [lo, hi) outside [gap_lo, gap_hi), in one loop (see attn_fwd's _attn_fwd_block_range).
    count = tl.cdiv(gap_lo - lo, BLOCK_N) + tl.cdiv(hi - gap_hi, BLOCK_N)
    for i in range(0, count):
        start_n = lo + i * BLOCK_N
        start_n = tl.where(start_n >= gap_lo, start_n + (gap_hi - gap_lo), start_n)
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        # The block's first key in int64, the keys within it in int32 (see attn_fwd).
        k_ptrs = k_base + start_n.to(tl.int64) * stride_ks + offs_n[:, None] * stride_ks + offs_dqk[None, :]
        v_ptrs = v_base + start_n.to(tl.int64) * stride_vs + offs_n[:, None] * stride_vs + offs_dv[None, :]
        if MASKED:
            col_ok = cols < seqlen_k
            k = tl.load(k_ptrs, mask=col_ok[:, None] & dqk_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=col_ok[:, None] & dv_ok[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs, mask=dqk_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=dv_ok[None, :], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if EXTRAS:
            s, t = modified_scores(qk, rows, cols, diag, qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags)
            p = tl.math.exp2(s - lse[:, None])
        else:
            p = tl.math.exp2(qk * qk_scale_log2 - lse[:, None])
        if MASKED:
            p = tl.where((cols[None, :] >= first_key[:, None]) & (cols[None, :] <= last_key[:, None]), p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        if EXTRAS:
            if (flags & FLAG_DROPOUT) != 0:
                keep = dropout_keep(seed, offset_lo, stream, rows, start_n, threshold, BLOCK_M, BLOCK_N)
                dp = tl.where(keep, dp * dropout_scale, 0.0)
            ds = p * (dp - delta[:, None])
            if (flags & FLAG_SOFTCAP) != 0:
                ds = ds * (1.0 - t * t)
        else:
            ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq

"""FlashAttention backward, written for ahead-of-time compilation.

Three kernels, each output owned by exactly one program, so results are bitwise deterministic with no
atomics and no zero-initialized buffers:
  attn_bwd_preprocess  delta[b, h, i] = sum_d dO[i, d] * O[i, d], and lse in log2 units, staged in
                       the workspace
  attn_bwd_dkdv        one program per (key block, batch, kv head): loops over the query heads of its
                       GQA group and over the query blocks that see its keys; dK and dV summed in
                       registers over the group, written once.
  attn_bwd_dq          one program per (query block, batch, query head): loops over the key blocks it
                       sees; dQ written once.
The price of ownership is recomputing Q K^T and dO V^T in both passes (7 matrix products instead of 5).

Layouts and masks follow kernels/attn_fwd.py: q/dq [batch, seqlen_q, heads_q, head_dim], k/v/dk/dv
[batch, seqlen_k, heads_kv, head_dim], lse [batch, heads_q, seqlen_q] (natural log, from the forward),
causal bottom-right as a run-time argument. A row that saw no key has lse = -inf; it gets no gradient.
The workspace holds delta and lse * log2(e), fp32 [batch * heads_q, stats_stride] each, stats_stride
being seqlen_q rounded up to 128 (see attn_bwd_preprocess for why).
"""

import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def attn_bwd_preprocess(Out, DOut, Lse, Delta, LseLog2,
                        stride_ob, stride_os, stride_oh,
                        stride_db, stride_ds, stride_dh,
                        stride_lb, stride_lh,
                        seqlen_q, heads_q, num_m_blocks, stats_stride,
                        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    # Stages the per-row statistics the two passes read in every step, in the workspace: delta and
    # lse * log2(e) (with -inf, a row that saw no key, turned into +inf so that exp2(s - lse) = 0), in
    # rows of stats_stride (seqlen_q rounded up to 128) floats. Rows past seqlen_q are written too
    # (delta 0, lse +inf), so the passes load these vectors unmasked and 16-byte aligned: with the
    # caller's lse (any stride, any length) they were scalar loads inside the inner loop.
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    batch = (bh // heads_q).to(tl.int64)
    head = bh % heads_q
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q
    o = tl.load(Out + batch * stride_ob + head * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    do = tl.load(DOut + batch * stride_db + head * stride_dh + offs_m[:, None] * stride_ds + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    lse = tl.load(Lse + batch * stride_lb + head * stride_lh + offs_m, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse) * 1.4426950408889634
    row = bh.to(tl.int64) * stats_stride
    tl.store(Delta + row + offs_m, delta)
    tl.store(LseLog2 + row + offs_m, lse)


@triton.jit
def _load_row_stats(lse_base, delta_base, rows):
    # Staged by attn_bwd_preprocess: padded, so no mask; lse already in log2 units.
    return tl.load(lse_base + rows), tl.load(delta_base + rows)


@triton.jit
def attn_bwd_dkdv(Q, K, V, DOut, LseLog2, Delta, DK, DV,
                  stride_qb, stride_qs, stride_qh,
                  stride_kb, stride_ks, stride_kh,
                  stride_vb, stride_vs, stride_vh,
                  stride_dob, stride_dos, stride_doh,
                  stride_dkb, stride_dks, stride_dkh,
                  stride_dvb, stride_dvs, stride_dvh,
                  seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride,
                  softmax_scale, qk_scale_log2, causal,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    bh = pid // num_n_blocks
    n_block = pid % num_n_blocks
    batch = bh // heads_kv
    head_kv = bh % heads_kv
    batch64 = batch.to(tl.int64)
    start_n = n_block * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < seqlen_k

    k = tl.load(K + batch64 * stride_kb + head_kv * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                mask=col_ok[:, None], other=0.0)
    v = tl.load(V + batch64 * stride_vb + head_kv * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :],
                mask=col_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)

    # Query rows that see key j: i >= j - causal_offset. Rows from lo on see some key of this block;
    # rows from full_lo on see all of them (no mask needed there).
    causal_offset = seqlen_k - seqlen_q
    if causal:
        lo = tl.maximum(start_n - causal_offset, 0)
        lo = (lo // BLOCK_M) * BLOCK_M
        full_lo = tl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0)
        full_lo = tl.cdiv(full_lo, BLOCK_M) * BLOCK_M
    else:
        lo = 0
        full_lo = 0
    # Partial key blocks (past seqlen_k) always need the mask on the key side.
    if start_n + BLOCK_N > seqlen_k:
        full_lo = tl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M
    full_lo = tl.minimum(full_lo, tl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M)
    hi = tl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M

    for g in range(0, group_size):
        head_q = head_kv * group_size + g
        q_base = Q + batch64 * stride_qb + head_q * stride_qh
        do_base = DOut + batch64 * stride_dob + head_q * stride_doh
        stats_row = (batch64 * heads_q + head_q) * stats_stride
        lse_base = LseLog2 + stats_row
        delta_base = Delta + stats_row
        dk, dv = _dkdv_block_range(q_base, do_base, lse_base, delta_base, k, v, dk, dv,
                                   stride_qs, stride_dos, lo, full_lo, seqlen_q, offs_m, offs_n, offs_d,
                                   causal_offset, col_ok, causal, qk_scale_log2, True)
        dk, dv = _dkdv_block_range(q_base, do_base, lse_base, delta_base, k, v, dk, dv,
                                   stride_qs, stride_dos, full_lo, hi, seqlen_q, offs_m, offs_n, offs_d,
                                   causal_offset, col_ok, causal, qk_scale_log2, False)

    dk = dk * softmax_scale
    tl.store(DK + batch64 * stride_dkb + head_kv * stride_dkh + offs_n[:, None] * stride_dks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + batch64 * stride_dvb + head_kv * stride_dvh + offs_n[:, None] * stride_dvs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


@triton.jit
def _dkdv_block_range(q_base, do_base, lse_base, delta_base, k, v, dk, dv,
                      stride_qs, stride_dos, lo, hi, seqlen_q, offs_m, offs_n, offs_d,
                      causal_offset, col_ok, causal, qk_scale_log2, MASKED: tl.constexpr):
    # Transposed formulation: the key block is the M side of every product, so dK and dV accumulate
    # in registers as [BLOCK_N, HEAD_DIM].
    for start_m in range(lo, hi, offs_m.shape[0]):
        rows = start_m + offs_m
        row_ok = rows < seqlen_q
        q = tl.load(q_base + rows[:, None] * stride_qs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(do_base + rows[:, None] * stride_dos + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        lse, delta = _load_row_stats(lse_base, delta_base, rows)
        qk_t = tl.dot(k, tl.trans(q))  # [BLOCK_N, BLOCK_M]
        p_t = tl.math.exp2(qk_t * qk_scale_log2 - lse[None, :])
        if MASKED:
            visible = col_ok[:, None] & row_ok[None, :]
            if causal:
                visible = visible & (offs_n[:, None] <= rows[None, :] + causal_offset)
            p_t = tl.where(visible, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))  # [BLOCK_N, BLOCK_M]
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dq(Q, K, V, DOut, LseLog2, Delta, DQ,
                stride_qb, stride_qs, stride_qh,
                stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh,
                stride_dob, stride_dos, stride_doh,
                stride_dqb, stride_dqs, stride_dqh,
                seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, stats_stride,
                softmax_scale, qk_scale_log2, causal,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    if causal:
        m_block = num_m_blocks - 1 - m_block
    batch = bh // heads_q
    head_q = bh % heads_q
    head_kv = head_q // group_size
    batch64 = batch.to(tl.int64)
    start_m = m_block * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = rows < seqlen_q

    q = tl.load(Q + batch64 * stride_qb + head_q * stride_qh + rows[:, None] * stride_qs + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    do = tl.load(DOut + batch64 * stride_dob + head_q * stride_doh + rows[:, None] * stride_dos + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)
    stats_row = bh.to(tl.int64) * stats_stride
    lse, delta = _load_row_stats(LseLog2 + stats_row, Delta + stats_row, rows)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    k_base = K + batch64 * stride_kb + head_kv * stride_kh
    v_base = V + batch64 * stride_vb + head_kv * stride_vh

    causal_offset = seqlen_k - seqlen_q
    if causal:
        hi = tl.minimum(seqlen_k, start_m + BLOCK_M + causal_offset)
        full_hi = tl.minimum(seqlen_k, start_m + causal_offset + 1)
    else:
        hi = seqlen_k
        full_hi = seqlen_k
    hi = tl.maximum(hi, 0)
    full_hi = (tl.maximum(full_hi, 0) // BLOCK_N) * BLOCK_N
    row_limit = tl.where(causal != 0, rows + causal_offset, seqlen_k)

    dq = _dq_block_range(k_base, v_base, q, do, lse, delta, dq, stride_ks, stride_vs, 0, full_hi, seqlen_k,
                         row_limit, offs_n, offs_d, qk_scale_log2, False)
    dq = _dq_block_range(k_base, v_base, q, do, lse, delta, dq, stride_ks, stride_vs, full_hi, hi, seqlen_k,
                         row_limit, offs_n, offs_d, qk_scale_log2, True)
    dq = dq * softmax_scale
    tl.store(DQ + batch64 * stride_dqb + head_q * stride_dqh + rows[:, None] * stride_dqs + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _dq_block_range(k_base, v_base, q, do, lse, delta, dq, stride_ks, stride_vs, lo, hi, seqlen_k,
                    row_limit, offs_n, offs_d, qk_scale_log2, MASKED: tl.constexpr):
    for start_n in range(lo, hi, offs_n.shape[0]):
        start_n = tl.multiple_of(start_n, offs_n.shape[0])
        cols = start_n + offs_n
        if MASKED:
            col_ok = cols < seqlen_k
            k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        else:
            k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :])
            v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k))
        p = tl.math.exp2(qk * qk_scale_log2 - lse[:, None])
        if MASKED:
            visible = col_ok[None, :] & (cols[None, :] <= row_limit[:, None])
            p = tl.where(visible, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq

"""FlashAttention forward, written for ahead-of-time compilation.

Layout: q [batch, seqlen_q, heads_q, head_dim], k/v [batch, seqlen_k, heads_kv, head_dim], out like q,
lse [batch, heads_q, seqlen_q] fp32 (natural log). The last dimension is contiguous, so its stride is
not an argument; every other stride is.

Causal masking is a run-time argument, aligned bottom-right: query row i sees key j when
j <= i + seqlen_k - seqlen_q. Making it run-time halves the variant count at no measured cost: the
key range of each program is split into blocks every row sees in full (no mask computed at all) and the
few blocks on the diagonal or past seqlen_k (masked), and causal only moves the split point.

Integer arguments: batch strides are i64 (a batch can exceed 2^31 elements); the other strides and the
lengths are i32, and the host checks that one batch entry's span fits (so tile offsets stay 32-bit,
which keeps the inner loop's address arithmetic cheap).

The kernel module is free of torch and of driver calls: it is imported on a machine with no GPU.
"""

import triton
import triton.language as tl


@triton.jit
def _attn_fwd_block_range(q_ptrs, k_base, v_base, stride_ks, stride_vs, q, acc, m_i, l_i,
                          lo, hi, seqlen_k, row_limit, qk_scale_log2, offs_n, offs_d,
                          HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    # One pass of online softmax over key blocks [lo, hi). MASKED blocks check key bounds and each
    # row's last visible key (row_limit); unmasked blocks are known to be fully visible to every row.
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_ks + offs_d[None, :]
        v_ptrs = v_base + cols[:, None] * stride_vs + offs_d[None, :]
        if MASKED:
            col_ok = cols < seqlen_k
            k = tl.load(k_ptrs, mask=col_ok[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs)
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            visible = col_ok[None, :] & (cols[None, :] <= row_limit[:, None])
            qk = tl.where(visible, qk * qk_scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # A row that has seen no visible key yet keeps m = -inf; subtract 0 instead so that
            # exp2 gives 0 rather than NaN.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_safe[:, None])
            alpha = tl.math.exp2(m_i - m_safe)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale_log2)
            p = tl.math.exp2(qk * qk_scale_log2 - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASKED:
            v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def attn_fwd(Q, K, V, Out, Lse,
             stride_qb, stride_qs, stride_qh,
             stride_kb, stride_ks, stride_kh,
             stride_vb, stride_vs, stride_vh,
             stride_ob, stride_os, stride_oh,
             stride_lb, stride_lh,
             seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks,
             qk_scale_log2, causal, write_lse,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Grid: one program per (query block, batch, query head), flattened to 1-d with the query block
    # fastest, so the programs in flight share one head's K and V in L2. Causal programs run the
    # heaviest (last) query blocks first, which shortens the tail.
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    if causal:
        m_block = num_m_blocks - 1 - m_block
    batch = bh // heads_q
    head_q = bh % heads_q
    head_kv = head_q // group_size

    start_m = m_block * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    batch64 = batch.to(tl.int64)
    q_base = Q + batch64 * stride_qb + head_q * stride_qh
    k_base = K + batch64 * stride_kb + head_kv * stride_kh
    v_base = V + batch64 * stride_vb + head_kv * stride_vh
    q_ptrs = q_base + offs_m[:, None] * stride_qs + offs_d[None, :]
    row_ok = offs_m < seqlen_q
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Key range. Bottom-right causal: row i sees keys j <= i + causal_offset.
    causal_offset = seqlen_k - seqlen_q
    if causal:
        hi = tl.minimum(seqlen_k, start_m + BLOCK_M + causal_offset)
        # Keys every row of this block sees: j <= start_m + causal_offset.
        full_hi = tl.minimum(seqlen_k, start_m + causal_offset + 1)
    else:
        hi = seqlen_k
        full_hi = seqlen_k
    hi = tl.maximum(hi, 0)
    # The last key each row sees; without causal masking, every key (the bound check does the rest).
    row_limit = tl.where(causal != 0, offs_m + causal_offset, seqlen_k)
    full_hi = tl.maximum(full_hi, 0)
    full_hi = (full_hi // BLOCK_N) * BLOCK_N

    acc, m_i, l_i = _attn_fwd_block_range(q_ptrs, k_base, v_base, stride_ks, stride_vs, q, acc, m_i, l_i,
                                          0, full_hi, seqlen_k, row_limit, qk_scale_log2, offs_n, offs_d,
                                          HEAD_DIM, BLOCK_N, False)
    acc, m_i, l_i = _attn_fwd_block_range(q_ptrs, k_base, v_base, stride_ks, stride_vs, q, acc, m_i, l_i,
                                          full_hi, hi, seqlen_k, row_limit, qk_scale_log2, offs_n, offs_d,
                                          HEAD_DIM, BLOCK_N, True)

    # A row with no visible key has l = 0: its output is 0 and its lse is -inf.
    has_keys = l_i > 0.0
    l_safe = tl.where(has_keys, l_i, 1.0)
    out = acc / l_safe[:, None]
    o_ptrs = Out + batch64 * stride_ob + head_q * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None])
    if write_lse:
        # m is in log2 units (scores were multiplied by log2(e)); lse is natural log.
        lse = tl.where(has_keys, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))
        tl.store(Lse + batch64 * stride_lb + head_q * stride_lh + offs_m, lse, mask=row_ok)

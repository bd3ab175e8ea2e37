"""The sm_90 backward's dQ pass, written in Gluon: the deterministic backward's third kernel where the
Gluon dK/dV pass (kernels/attn_bwd_hopper.py) runs beside it and the head dims are 256 or (192, 128).

It replaces attn_bwd_dq (kernels/attn_bwd.py) there: the same arguments, one owner per dq row, so the
backward stays bitwise deterministic. One program per (query block of BLOCK_M rows, batch, query
head), query block fastest, the heaviest blocks first under causal-like masks (FLAG_REVERSE) within groups
of heads (program_tile, kernels/attn_hopper_common.py), as in the Triton pass. Warp-specialized:
- a producer warp (24 registers) loads the program's Q and dO once by TMA, then streams the K and V
  blocks of BLOCK_N = 64 keys that some row of the block sees (the window rule) through a ring of
  STAGES shared-memory stages, K and V with "ready" mbarriers of their own and one "empty" per stage;
- one consumer partition of two warpgroups computes per key block, as asynchronous wgmma:
      S = Q K^T, dP = dO V^T           [BLOCK_M, BLOCK_N] fp32
      P = exp2(S * scale * log2(e) - lse)   (staged lse; masked only on blocks a window's edge or the
                                             key length crosses)
      dS = P * (dP - delta)                 (times 1 - tanh^2 under softcap)
      dQ += dS K                            [BLOCK_M, HEAD_DIM] fp32
  At d=256 (64-row blocks) the warpgroups split S and dP along the keys and dQ along d, so dS goes through
  shared memory (two buffers): each warpgroup computed half of its columns and the product needs all of
  them. At (192, 128) (WIDE: 128-row blocks) each warpgroup owns 64 rows whole and dS stays in registers
  as the A operand of dQ's three [64, 64] chunks (one per 64-column box of Q and K). dQ times
  softmax_scale is written once, through Q's shared-memory buffers and coalesced masked stores
  (store_rows_staged).

What it covers: what the Gluon dK/dV pass covers but its dropout forms (every backward but dropout:
windows and causal masks of both alignments, softcap and ALiBi in the EXTRAS rows, sinks through lse,
dense or varlen, GQA, any lengths), at the head dims the catalog compiles it for. Its arguments are attn_bwd_dq's, then
descriptors of Q, K, V and dO over [batch, seqlen, heads * d] (varlen: [1, total, heads * d], each
sequence's rows offset by cu_seqlens; key blocks reaching past a sequence's end read the next sequence's
rows, which the mask drops; query rows past it have lse = +inf and are not stored).

Free of torch and driver calls: imported on a machine with no GPU.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, warpgroup_mma, \
    warpgroup_mma_wait

from attn_hopper_common import (FLAG_ALIBI, FLAG_REVERSE, FLAG_SOFTCAP, FLAG_TOP_LEFT, LOG2E, program_tile,
                                sequence, store_rows_staged, tanh_approx, thread_barrier, tma_load, window_bounds)


@gluon.jit
def _producer(desc_q, desc_do, desc_k, desc_v, q_smem, do_smem, k_bufs, v_bufs, bars, rows, n_iters,
              HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # rows: the view's batch coordinate, the program's first query row, its first key row (the
    # sequence's start plus the first key block's), the query head and the kv head.
    # Q and K come in QK_CHUNKS boxes side by side along d (three of 64 columns at head dim 192, which
    # is not a power of two; else one): Q's buffers c, K's s * QK_CHUNKS + c of stage s.
    QK_BOX: gl.constexpr = desc_q.block_type.shape[2]
    QK_CHUNKS: gl.constexpr = HEAD_DIM // QK_BOX
    HEAD_DIM_V: gl.constexpr = desc_v.block_type.shape[2]
    qdo_bar, k_ready, v_ready, kv_empty = bars
    bc, q_row, k_row, hq, hkv = rows
    mbarrier.expect(qdo_bar, QK_CHUNKS * desc_q.block_type.nbytes + desc_do.block_type.nbytes)
    for c in gl.static_range(QK_CHUNKS):
        tma_load(desc_q, [bc, q_row, hq * HEAD_DIM + c * QK_BOX], qdo_bar, q_smem.index(c))
    tma_load(desc_do, [bc, q_row, hq * HEAD_DIM_V], qdo_bar, do_smem)
    for it in range(n_iters):
        s = it % STAGES
        n0 = k_row + it * BLOCK_N
        # A fresh mbarrier counts as having completed the phase before phase 0: parity 1 passes at once.
        mbarrier.wait(kv_empty.index(s), ((it // STAGES) & 1) ^ 1)
        mbarrier.expect(k_ready.index(s), QK_CHUNKS * desc_k.block_type.nbytes)
        for c in gl.static_range(QK_CHUNKS):
            tma_load(desc_k, [bc, n0, hkv * HEAD_DIM + c * QK_BOX], k_ready.index(s), k_bufs.index(s * QK_CHUNKS + c))
        mbarrier.expect(v_ready.index(s), desc_v.block_type.nbytes)
        tma_load(desc_v, [bc, n0, hkv * HEAD_DIM_V], v_ready.index(s), v_bufs.index(s))


@gluon.jit
def _probabilities(st, n0, lse, bounds, scores, s_layout: gl.constexpr, BLOCK_N: gl.constexpr,
                   SOFTCAP: gl.constexpr, ALIBI: gl.constexpr):
    """P for S = Q K^T (row i a query, column j a key): the forward's scores (attn_common.modified_scores:
    softcap when SOFTCAP, then ALiBi when ALIBI), exp2 against the staged lse, masked where the block
    crosses the key length or a window's bounds; and the chain rule's factor for dS (1 - tanh^2 under
    softcap, else 1)."""
    first_key, last_key, full_lo, full_hi, row_alibi = bounds
    qk_scale_log2, softcap_scale, softcap_log2, slope_log2 = scores
    cols = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if SOFTCAP:
        t = tanh_approx(st * softcap_scale)
        s_mod = t * softcap_log2
    else:
        s_mod = st * qk_scale_log2
    if ALIBI:
        distance = gl.abs(gl.expand_dims(row_alibi, 1) - gl.expand_dims(cols, 0)).to(gl.float32)
        s_mod = s_mod - slope_log2 * distance
    p = gl.exp2(s_mod - gl.expand_dims(lse, 1))
    # Keys past seqlen_k read zeros (or the next sequence's rows): masked with the blocks that cross a
    # window's bounds (the causal diagonal among them). Rows past seqlen_q have lse = +inf.
    need_mask = (n0 < full_lo) | (n0 + BLOCK_N - 1 > full_hi)
    if need_mask:
        c = gl.expand_dims(cols, 0)
        ok = (c >= gl.expand_dims(first_key, 1)) & (c <= gl.expand_dims(last_key, 1))
        p = gl.where(ok, p, 0.0)
    if SOFTCAP:
        p_ds = p * (1.0 - t * t)
    else:
        p_ds = p
    return p_ds


@gluon.jit
def _consumer(q_smem, do_smem, k_bufs, v_bufs, ds_bufs, bars, coords, n_iters, LseLog2, Delta, dq_base, stride_dqs,
              window, heads_q, stats_stride, softmax_scale, qk_scale_log2, extras, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, EXTRAS: gl.constexpr,
              WIDE: gl.constexpr):
    qdo_bar, k_ready, v_ready, kv_empty = bars
    b, m0, hq, n_lo, seqlen_q, seqlen_k, diag = coords
    lo_rel, hi_rel = window
    flags, AlibiSlopes, stride_ab, softcap_scale, softcap_log2 = extras
    dtype: gl.constexpr = q_smem.dtype
    QK_BOX: gl.constexpr = q_smem.shape[3]
    QK_CHUNKS: gl.constexpr = HEAD_DIM // QK_BOX
    HEAD_DIM_V: gl.constexpr = do_smem.shape[2]
    gl.static_assert(QK_CHUNKS == 1 or (QK_CHUNKS == 3 and WIDE), "head dims 256 (one box) or 192 (three, WIDE)")
    if WIDE:
        # (192, 128), 128-row blocks: each warpgroup owns 64 query rows whole, so dS stays in registers
        # as the A operand of dQ's three [64, 64] chunks.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                            instr_shape=[16, QK_BOX, 16])
    else:
        # The two warpgroups split S and dP along the keys and dQ along d (chunk by chunk at 192).
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                           instr_shape=[16, BLOCK_N // 2, 16])
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                            instr_shape=[16, QK_BOX // 2, 16])
    ds_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2)
    do2 = do_smem.reshape([BLOCK_M, HEAD_DIM_V])
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    dq0 = gl.zeros([BLOCK_M, QK_BOX], gl.float32, dq_layout)
    if WIDE:
        dq1 = gl.zeros([BLOCK_M, QK_BOX], gl.float32, dq_layout)
        dq2 = gl.zeros([BLOCK_M, QK_BOX], gl.float32, dq_layout)

    # Each row's statistics (staged in rows of stats_stride floats, padded with neutral values: no
    # mask), its visible keys first_key <= j <= last_key, and the keys every row of the block sees
    # (rows past seqlen_q count too: they are computed and never stored, which only masks more).
    rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    stats_row = (b * heads_q + hq).to(gl.int64) * stats_stride
    lse = gl.load(LseLog2 + stats_row + rows)
    delta = gl.load(Delta + stats_row + rows)
    first_key = gl.minimum(gl.maximum(rows + diag + lo_rel, 0), seqlen_k)
    last_key = gl.maximum(gl.minimum(rows + diag + hi_rel, seqlen_k - 1), -1)
    full_lo = gl.minimum(gl.maximum(m0 + BLOCK_M - 1 + diag + lo_rel, 0), seqlen_k)
    full_hi = gl.maximum(gl.minimum(m0 + diag + hi_rel, seqlen_k - 1), -1)
    bounds = (first_key, last_key, full_lo, full_hi, rows + diag)
    slope_log2 = qk_scale_log2 * 0.0
    if EXTRAS:
        if (flags & FLAG_ALIBI) != 0:
            slope_log2 = gl.load(AlibiSlopes + b.to(gl.int64) * stride_ab + hq) * LOG2E
    scores = (qk_scale_log2, softcap_scale, softcap_log2, slope_log2)

    # Even a program with no key block waits for Q and dO: its shared memory must not be left while the
    # copies are in flight.
    mbarrier.wait(qdo_bar, 0)
    for it in range(n_iters):
        s = it % STAGES
        phase = (it // STAGES) & 1
        n0 = n_lo + it * BLOCK_N
        k_first = s * QK_CHUNKS
        v2 = v_bufs.index(s).reshape([BLOCK_N, HEAD_DIM_V])
        mbarrier.wait(k_ready.index(s), phase)
        # S = Q K^T, one product per head-dim chunk, accumulated in order.
        st_token = warpgroup_mma(q_smem.index(0).reshape([BLOCK_M, QK_BOX]),
                                 k_bufs.index(k_first).reshape([BLOCK_N, QK_BOX]).permute((1, 0)), zero_s,
                                 use_acc=False, is_async=True)
        for c in gl.static_range(1, QK_CHUNKS):
            st_token = warpgroup_mma(q_smem.index(c).reshape([BLOCK_M, QK_BOX]),
                                     k_bufs.index(k_first + c).reshape([BLOCK_N, QK_BOX]).permute((1, 0)), st_token,
                                     is_async=True)
        mbarrier.wait(v_ready.index(s), phase)
        dpt_token = warpgroup_mma(do2, v2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(1, deps=(st_token, ))
        if EXTRAS:
            # Each branch computes P whole (a tanh carried across the join would spill).
            if (flags & FLAG_SOFTCAP) != 0:
                p = _probabilities(st, n0, lse, bounds, scores, s_layout, BLOCK_N, True, True)
            else:
                p = _probabilities(st, n0, lse, bounds, scores, s_layout, BLOCK_N, False, True)
        else:
            p = _probabilities(st, n0, lse, bounds, scores, s_layout, BLOCK_N, False, False)
        dpt = warpgroup_mma_wait(0, deps=(dpt_token, ))
        # dS = P * (dP - delta), P carrying the softcap's 1 - tanh^2.
        ds = p * (dpt - gl.expand_dims(delta, 1))
        if WIDE:
            ds_op = gl.convert_layout(ds.to(dtype), ds_layout)
            dq0_token = warpgroup_mma(ds_op, k_bufs.index(k_first).reshape([BLOCK_N, QK_BOX]), dq0, is_async=True)
            dq1_token = warpgroup_mma(ds_op, k_bufs.index(k_first + 1).reshape([BLOCK_N, QK_BOX]), dq1, is_async=True)
            dq2_token = warpgroup_mma(ds_op, k_bufs.index(k_first + 2).reshape([BLOCK_N, QK_BOX]), dq2, is_async=True)
            dq0, dq1, dq2, ds_op = warpgroup_mma_wait(0, deps=(dq0_token, dq1_token, dq2_token, ds_op))
        else:
            # Two buffers: the barrier after this step's store also tells every thread that both warpgroups
            # have waited for step it - 1's product, the last reader of the buffer step it + 1 writes.
            ds_buf = ds_bufs.index(it % 2)
            ds_buf.store(ds.to(dtype))
            fence_async_shared()
            thread_barrier()
            dq0_token = warpgroup_mma(ds_buf, k_bufs.index(k_first).reshape([BLOCK_N, QK_BOX]), dq0, is_async=True)
            dq0 = warpgroup_mma_wait(0, deps=(dq0_token, ))
        mbarrier.arrive(kv_empty.index(s))

    # dQ, written once, chunk by chunk (rows past seqlen_q are not), through Q's buffers once every warp's
    # last products have read them (the barrier).
    thread_barrier()
    store_rows_staged(dq_base, stride_dqs, m0, seqlen_q, 0, (dq0 * softmax_scale).to(dtype),
                      q_smem.index(0).reshape([BLOCK_M, QK_BOX]), BLOCK_M, QK_BOX, 8)
    if WIDE:
        store_rows_staged(dq_base, stride_dqs, m0, seqlen_q, QK_BOX, (dq1 * softmax_scale).to(dtype),
                          q_smem.index(1).reshape([BLOCK_M, QK_BOX]), BLOCK_M, QK_BOX, 8)
        store_rows_staged(dq_base, stride_dqs, m0, seqlen_q, 2 * QK_BOX, (dq2 * softmax_scale).to(dtype),
                          q_smem.index(2).reshape([BLOCK_M, QK_BOX]), BLOCK_M, QK_BOX, 8)


@gluon.jit
def attn_bwd_dq_hopper(Q, K, V, DOut, LseLog2, Delta, DQ, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
                       stride_qb, stride_qs, stride_qh,
                       stride_kb, stride_ks, stride_kh,
                       stride_vb, stride_vs, stride_vh,
                       stride_dob, stride_dos, stride_doh,
                       stride_dqb, stride_dqs, stride_dqh,
                       stride_ab,
                       seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, stats_stride,
                       head_dim_qk8, head_dim_v8, window_left, window_right, flags,
                       softmax_scale, qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                       DescQ, DescK, DescV, DescDO,
                       HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                       EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    # Query block fastest; under causal-like masks the last query blocks first, in groups of heads
    # (program_tile).
    m_block, bh = program_tile(gl.program_id(0), num_m_blocks, flags)
    if (flags & FLAG_REVERSE) != 0:
        m_block = num_m_blocks - 1 - m_block
    b = bh // heads_q
    hq = bh % heads_q
    hkv = hq // group_size
    m0 = m_block * BLOCK_M
    # Sequence b: dense, rows from 0 of batch entry b; varlen, the tensors are [1, total, heads * d] and
    # its rows start at cu_seqlens[b] (a sequence longer than max_seqlen is cut to it, as in the Triton
    # kernels; the grid covers max_seqlen_q, so a shorter sequence's last query blocks have no rows).
    bc, q_start, k_start, sq, sk = sequence(b, CuSeqlensQ, CuSeqlensK, seqlen_q, seqlen_k, flags)
    # The window rule (kernels/attn_common.py): row i sees key j when
    # i + diag + lo_rel <= j <= i + diag + hi_rel; the block's rows see keys [lo, hi).
    lo_rel, hi_rel = window_bounds(window_left, window_right)
    diag = sk - sq
    if (flags & FLAG_TOP_LEFT) != 0:
        diag = sk * 0
    last_row = gl.minimum(m0 + BLOCK_M, sq) - 1
    lo = gl.minimum(gl.maximum(m0 + diag + lo_rel, 0), sk)
    hi = gl.maximum(gl.minimum(last_row + diag + hi_rel + 1, sk), 0)
    n_lo = lo // BLOCK_N * BLOCK_N
    n_iters = gl.maximum(gl.cdiv(hi - n_lo, BLOCK_N), 0)
    if m0 >= sq:
        n_iters = n_iters * 0

    dtype: gl.constexpr = DescQ.dtype
    # Q and K in QK_CHUNKS boxes along d (three of 64 columns at head dim 192; else one).
    QK_CHUNKS: gl.constexpr = HEAD_DIM // DescQ.block_type.shape[2]
    q_smem = gl.allocate_shared_memory(dtype, [QK_CHUNKS] + DescQ.block_type.shape, DescQ.layout)
    do_smem = gl.allocate_shared_memory(dtype, DescDO.block_type.shape, DescDO.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES * QK_CHUNKS] + DescK.block_type.shape, DescK.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES] + DescV.block_type.shape, DescV.layout)
    # (192, 128): 128-row blocks whose warpgroups own 64 rows each, dS in registers (measured faster there
    # than the split form, which shares dS through shared memory).
    WIDE: gl.constexpr = HEAD_DIM == 192
    gl.static_assert(not WIDE or BLOCK_M == 128, "(192, 128) runs 128-row blocks")
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)
    if WIDE:
        ds_bufs = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())  # unused
    else:
        ds_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N], ds_layout)
    qdo_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(qdo_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        # Released once by the consumer partition (an arrive is one arrival per partition).
        mbarrier.init(kv_empty.index(i), count=1)

    bars = (qdo_bar, k_ready, v_ready, kv_empty)
    coords = (b, m0, hq, n_lo, sq, sk, diag)
    rows = (bc, q_start + m0, k_start + n_lo, hq, hkv)
    dq_base = DQ + b.to(gl.int64) * stride_dqb + q_start.to(gl.int64) * stride_dqs + hq.to(gl.int64) * stride_dqh
    gl.warp_specialize([
        (_consumer, (q_smem, do_smem, k_bufs, v_bufs, ds_bufs, bars, coords, n_iters, LseLog2, Delta, dq_base,
                     stride_dqs, (lo_rel, hi_rel), heads_q, stats_stride, softmax_scale, qk_scale_log2,
                     (flags, AlibiSlopes, stride_ab, softcap_scale, softcap_log2), BLOCK_M, BLOCK_N, HEAD_DIM, STAGES,
                     EXTRAS, WIDE)),
        (_producer, (DescQ, DescDO, DescK, DescV, q_smem, do_smem, k_bufs, v_bufs, bars, rows, n_iters, HEAD_DIM,
                     BLOCK_N, STAGES)),
    ], [1], [PRODUCER_REGS])

"""The sm_90 forward with FlashAttention-3's schedule, written in Gluon (Triton's explicit-layout dialect).

One program per (query tile of BLOCK_M rows, batch, query head), warp-specialized:
- a producer warp issues the TMA loads: Q once, then K and V blocks into a ring of STAGES shared-memory
  stages, each stage with a "ready" mbarrier (the TMA's transaction count) and an "empty" one (both
  consumers released it);
- two consumer warpgroups own 64 query rows each. Each runs S = Q K^T and O += P V as asynchronous
  wgmma (P from registers), with FA3's intra-warpgroup pipelining: the QK^T of block j and the PV of
  block j-1 are issued together, and the softmax of block j runs while the PV finishes. The two
  warpgroups take turns issuing their matrix products ("ping-pong", two mbarriers passing the turn),
  so one warpgroup's softmax (exp2 on the MUFU) overlaps the other's tensor-core work.
The producer keeps 24 registers and the consumers take 240 (setmaxnreg), which holds a 64 x 128 fp32
S tile, the 64 x head_dim accumulator and P without spilling.

What it covers: the plain forward (no softcap, ALiBi, dropout or sinks: the host sends those to the
Triton kernels), dense layouts only, head dims with kernels in the catalog, both causal alignments or
no mask (a window other than causal is not taken here), GQA, any lengths, lse optional. Its arguments
are attn_fwd_tma's (kernels/attn_fwd.py), so the C launcher packs both the same way; the ones it does
not need are ignored. Q, K and V come through host-side descriptors over [batch, seqlen, heads * d]:
blocks past a sequence's end read zeros. O and lse are written with masked stores (rows past seqlen_q
are never written).

Measured through the JIT on the H100 (bench/explore_hopper/gluon_attn_fwd_check.py, bf16, batch 16384 /
seqlen, heads 2048 / d, TFLOP/s, with cuDNN in the same run): d=128 non-causal 574 / 562 at 4k / 8k
(cuDNN 617 / 638), causal 507 / 519 (560 / 555); d=64 non-causal 443 / 448 (484 / 463), causal 371 /
415 (427 / 439). The Triton kernel with TMA reached 490-505 at d=128 in the same kind of run.

Free of torch and driver calls: imported on a machine with no GPU.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

# Bits of `flags` (kernels/attn_common.py; src/aotk_attn.c sets them).
FLAG_WRITE_LSE: gl.constexpr = gl.constexpr(1)
FLAG_TOP_LEFT: gl.constexpr = gl.constexpr(4)
FLAG_REVERSE: gl.constexpr = gl.constexpr(128)


@gluon.jit
def _key_blocks(m0, seqlen_k, diag, causal, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    # Keys [0, hi) are visible to some row of the tile. At least one block is walked, so the pipeline's
    # prologue and epilogue always run; a tile whose rows see no key masks everything.
    hi = seqlen_k
    if causal:
        hi = gl.minimum(seqlen_k, m0 + BLOCK_M + diag)
    return gl.maximum(gl.cdiv(hi, BLOCK_N), 1)


@gluon.jit
def _producer(desc_q, desc_k, desc_v, q_smem, k_bufs, v_bufs, bars, coords, n_blocks,
              HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    q_bar, k_ready, k_empty, v_ready, v_empty, turn = bars
    b, m0, hq, hkv = coords
    mbarrier.expect(q_bar, desc_q.block_type.nbytes)
    tma.async_copy_global_to_shared(desc_q, [b, m0, hq * HEAD_DIM], q_bar, q_smem)
    for j in range(n_blocks):
        s = j % STAGES
        phase = (j // STAGES) & 1
        n0 = j * BLOCK_N
        # A fresh mbarrier counts as having completed the phase before phase 0, so waiting on parity 1
        # passes at once: the first STAGES loads do not wait.
        mbarrier.wait(k_empty.index(s), phase ^ 1)
        mbarrier.expect(k_ready.index(s), desc_k.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_k, [b, n0, hkv * HEAD_DIM], k_ready.index(s), k_bufs.index(s))
        mbarrier.wait(v_empty.index(s), phase ^ 1)
        mbarrier.expect(v_ready.index(s), desc_v.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_v, [b, n0, hkv * HEAD_DIM], v_ready.index(s), v_bufs.index(s))


@gluon.jit
def _softmax_step(qk, m_i, l_i, n0, rows, first_row, seqlen_k, mask_diag, qk_scale_log2,
                  s_layout: gl.constexpr, BLOCK_N: gl.constexpr):
    # Row i sees keys j < seqlen_k with j <= i + mask_diag (mask_diag = seqlen_k without a causal
    # mask, which bounds nothing). Only blocks that reach past seqlen_k or past the first row's last key
    # are masked.
    need_mask = (n0 + BLOCK_N > seqlen_k) | (n0 + BLOCK_N - 1 > first_row + mask_diag)
    if need_mask:
        cols = gl.expand_dims(n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout)), 0)
        ok = (cols < seqlen_k) & (cols <= gl.expand_dims(rows + mask_diag, 1))
        qk = gl.where(ok, qk, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(qk, 1) * qk_scale_log2)
    # A row that has seen no visible key keeps m = -inf; subtract 0 instead (exp2 gives 0, not NaN).
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(qk * qk_scale_log2 - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _consumer(q_smem, k_bufs, v_bufs, bars, coords, n_blocks, Out, Lse,
              stride_ob, stride_os, stride_oh, stride_lb, stride_lh, seqlen_q, seqlen_k, mask_diag, flags,
              qk_scale_log2, WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, STAGES: gl.constexpr):
    # This warpgroup owns query rows [WG * ROWS, WG * ROWS + ROWS) of the tile.
    ROWS: gl.constexpr = BLOCK_M // 2
    q_bar, k_ready, k_empty, v_ready, v_empty, turn = bars
    b, m0, hq, hkv = coords
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    row0 = m0 + WG * ROWS
    rows = row0 + gl.arange(0, ROWS, layout=row_s)
    q2 = q_smem.reshape([BLOCK_M, HEAD_DIM]).slice(WG * ROWS, ROWS, dim=0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([ROWS], gl.float32, row_s)
    turn_phase = 0

    mbarrier.wait(q_bar, 0)

    # Prologue: S_0. Warpgroup 0 takes the first turn (its barrier's parity-1 wait passes at once).
    mbarrier.wait(k_ready.index(0), 0)
    mbarrier.wait(turn.index(WG), turn_phase ^ (1 - WG))
    k_t = k_bufs.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s_token = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
    mbarrier.arrive(turn.index(1 - WG))
    turn_phase ^= 1
    qk = warpgroup_mma_wait(0, deps=(s_token, ))
    mbarrier.arrive(k_empty.index(0))
    p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, 0, rows, row0, seqlen_k, mask_diag, qk_scale_log2, s_layout,
                                       BLOCK_N)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_blocks):
        s = j % STAGES
        phase = (j // STAGES) & 1
        s_prev = (j - 1) % STAGES
        phase_prev = ((j - 1) // STAGES) & 1
        mbarrier.wait(k_ready.index(s), phase)
        mbarrier.wait(v_ready.index(s_prev), phase_prev)
        mbarrier.wait(turn.index(WG), turn_phase ^ (1 - WG))
        k_t = k_bufs.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
        s_token = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
        v2 = v_bufs.index(s_prev).reshape([BLOCK_N, HEAD_DIM])
        o_token = warpgroup_mma(p_op, v2, acc, is_async=True)
        mbarrier.arrive(turn.index(1 - WG))
        turn_phase ^= 1
        # wgmma groups retire in order: with one left outstanding, S_j (issued first) is done.
        qk = warpgroup_mma_wait(1, deps=(s_token, ))
        mbarrier.arrive(k_empty.index(s))
        p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, j * BLOCK_N, rows, row0, seqlen_k, mask_diag,
                                           qk_scale_log2, s_layout, BLOCK_N)
        acc, p_done = warpgroup_mma_wait(0, deps=(o_token, p_op))
        mbarrier.arrive(v_empty.index(s_prev))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

    # Epilogue: O += P_last V_last.
    last = n_blocks - 1
    s_last = last % STAGES
    mbarrier.wait(v_ready.index(s_last), (last // STAGES) & 1)
    mbarrier.wait(turn.index(WG), turn_phase ^ (1 - WG))
    v2 = v_bufs.index(s_last).reshape([BLOCK_N, HEAD_DIM])
    o_token = warpgroup_mma(p_op, v2, acc, is_async=True)
    mbarrier.arrive(turn.index(1 - WG))
    acc, p_done = warpgroup_mma_wait(0, deps=(o_token, p_op))
    mbarrier.arrive(v_empty.index(s_last))

    # A row with no visible key has l = 0: its output is 0 and its lse -inf. Rows past seqlen_q are
    # never written.
    has_keys = l_i > 0.0
    l_safe = gl.where(has_keys, l_i, 1.0)
    out = acc / gl.expand_dims(gl.convert_layout(l_safe, row_o), 1)
    rows_o = row0 + gl.arange(0, ROWS, layout=row_o)
    cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    o_base = Out + b.to(gl.int64) * stride_ob + hq * stride_oh
    o_ptrs = o_base + gl.expand_dims(rows_o.to(gl.int64) * stride_os, 1) + gl.expand_dims(cols_o, 0)
    o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
    gl.store(o_ptrs, out.to(dtype), mask=o_mask)
    if (flags & FLAG_WRITE_LSE) != 0:
        lse = gl.where(has_keys, (m_i + gl.log2(l_i)) * 0.6931471805599453, float("-inf"))
        lse_ptrs = Lse + b.to(gl.int64) * stride_lb + hq * stride_lh + rows
        gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


@gluon.jit
def attn_fwd_hopper(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                    stride_qb, stride_qs, stride_qh,
                    stride_kb, stride_ks, stride_kh,
                    stride_vb, stride_vs, stride_vh,
                    stride_ob, stride_os, stride_oh,
                    stride_lb, stride_lh, stride_ab,
                    seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                    window_left, window_right, flags,
                    qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                    DescQ, DescK, DescV,
                    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                    PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # Grid: one program per (query tile, batch, query head), the query tile fastest, so the programs in
    # flight share one head's K and V in L2; with FLAG_REVERSE (causal) the heaviest tiles run first.
    pid = gl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    if (flags & FLAG_REVERSE) != 0:
        m_block = num_m_blocks - 1 - m_block
    b = bh // heads_q
    hq = bh % heads_q
    hkv = hq // group_size
    m0 = m_block * BLOCK_M
    # The host sends only unmasked or causal problems here: causal is a right window bound of 0.
    causal = window_right == 0
    diag = seqlen_k - seqlen_q
    if (flags & FLAG_TOP_LEFT) != 0:
        diag = 0
    n_blocks = _key_blocks(m0, seqlen_k, diag, causal, BLOCK_M, BLOCK_N)
    mask_diag = seqlen_k
    if causal:
        mask_diag = diag

    dtype: gl.constexpr = DescQ.dtype
    q_smem = gl.allocate_shared_memory(dtype, DescQ.block_type.shape, DescQ.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES] + DescK.block_type.shape, DescK.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES] + DescV.block_type.shape, DescV.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        # Released once by each consumer warpgroup (an arrive is one arrival per partition).
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)

    bars = (q_bar, k_ready, k_empty, v_ready, v_empty, turn)
    coords = (b, m0, hq, hkv)
    gl.warp_specialize([
        (_consumer, (q_smem, k_bufs, v_bufs, bars, coords, n_blocks, Out, Lse, stride_ob, stride_os, stride_oh,
                     stride_lb, stride_lh, seqlen_q, seqlen_k, mask_diag, flags, qk_scale_log2,
                     0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES)),
        (_consumer, (q_smem, k_bufs, v_bufs, bars, coords, n_blocks, Out, Lse, stride_ob, stride_os, stride_oh,
                     stride_lb, stride_lh, seqlen_q, seqlen_k, mask_diag, flags, qk_scale_log2,
                     1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES)),
        (_producer, (DescQ, DescK, DescV, q_smem, k_bufs, v_bufs, bars, coords, n_blocks, HEAD_DIM, BLOCK_N,
                     STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])

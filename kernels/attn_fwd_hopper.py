"""The sm_90 forward with FlashAttention-3's schedule, written in Gluon (Triton's explicit-layout dialect).

Persistent and warp-specialized. The grid is at most one program per SM (the host picks it, see
src/aotk_attn.c); each program walks query tiles of BLOCK_M rows, tile = (batch, query head, query
block), in rounds: round r gives program p tile r * nprog + p on even rounds and r * nprog + nprog - 1
- p on odd ones (boustrophedon), so that under a causal mask, where FLAG_REVERSE puts a head's longest
tiles first, long and short tiles pair up. A grid of one program per tile is the same kernel with one
round. Inside a program:
- a producer warp issues the TMA loads: each tile's Q (one 64-row box per consumer warpgroup, into
  one of Q_BUFS buffers, so that the next tile's Q loads while this one runs), then K and V blocks into
  a ring of STAGES shared-memory stages, each with a "ready" mbarrier (the TMA's transaction count) and
  an "empty" one (both consumers released it). The ring's counters run across tiles: the producer runs
  ahead into the next tile while the consumers finish this one, which is what persistence buys;
- two consumer warpgroups own 64 query rows each (attn_fwd_hopper_wg3: three, 192-row tiles, FA3's
  d=64 tile; the host takes it without a causal mask from 2048 query rows on). Each runs S = Q K^T and
  O += P V as asynchronous
  wgmma (P from registers), with FA3's intra-warpgroup pipelining: the QK^T of block j and the PV of
  block j-1 are issued together, and the softmax of block j runs while the PV finishes. The two
  warpgroups take turns issuing their matrix products ("ping-pong", one mbarrier per warpgroup passing
  the turn round-robin),
  so one warpgroup's softmax (exp2 on the MUFU) overlaps the other's tensor-core work.
The producer keeps 24 registers and the consumers take 240 (setmaxnreg; 160 with three), which holds a
64 x BLOCK_N fp32 S tile, the 64 x head_dim accumulator and P without spilling.

What it covers: the plain forward with or without sinks (an epilogue term, as in the Triton kernels; no
softcap, ALiBi or dropout: the host sends those to the Triton kernels), dense or varlen layouts, head
dims with kernels in the catalog, both causal alignments or no mask (a window other than causal is not
taken here), GQA, any lengths, lse optional. Its
arguments are attn_fwd_tma's (kernels/attn_fwd.py) plus num_tiles, so the C launcher packs both the
same way; the ones it does not need are ignored. Q, K and V come through host-side descriptors over
[batch, seqlen, heads * d] (varlen: [1, total, heads * d], rows offset by cu_seqlens): dense blocks
past a sequence's end read zeros, varlen ones the next sequence's rows, which are masked (keys) or not
stored (queries). O and lse are written with masked stores (rows past seqlen_q are never written).

Measured through the JIT on the H100 (bench/explore_hopper/gluon_attn_fwd.py, the same schedule with
4-d descriptors; bf16, batch 16384 / seqlen, heads 2048 / d; ratio to cuDNN in the same run): d=64
non-causal 0.94 / 0.93 at 4k / 8k, causal 0.92 / 0.99; d=128 non-causal 0.96 / 0.88, causal 0.98 /
0.99; d=256 with BLOCK_N 64 and one Q buffer 0.94 / 0.84 non-causal, 0.98 / 0.97 causal. The same
schedule with one program per tile measured 0.86-0.96 at d=64/128. In the library's benchmark (H100,
bf16, d=64 non-causal, 2026-11-25) three warpgroups reach 0.97-1.12x cuDNN from 2048 rows on, two
0.92-0.98x (2026-11-24).

Free of torch and driver calls: imported on a machine with no GPU.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

# The TMA load: Triton 3.6 calls it async_copy_global_to_shared, newer releases async_load (the old
# name raises there), so the kernels compile under either while the pin is evaluated.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

# Bits of `flags` (kernels/attn_common.py; src/aotk_attn.c sets them).
FLAG_WRITE_LSE: gl.constexpr = gl.constexpr(1)
FLAG_VARLEN: gl.constexpr = gl.constexpr(2)
FLAG_TOP_LEFT: gl.constexpr = gl.constexpr(4)
FLAG_SINKS: gl.constexpr = gl.constexpr(32)
FLAG_REVERSE: gl.constexpr = gl.constexpr(128)
LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)

# Query rows per consumer warpgroup (one wgmma M of 64); a program runs BLOCK_M // ROWS consumer
# warpgroups (2, or 3 for the 192-row tiles of attn_fwd_hopper_wg3 at d=64).
ROWS: gl.constexpr = gl.constexpr(64)


@gluon.jit
def _tile_id(r, pid, nprog):
    # Boustrophedon rounds: even rounds in program order, odd rounds reversed.
    p = pid
    if r % 2 == 1:
        p = nprog - 1 - pid
    return r * nprog + p


@gluon.jit
def _tile(tile, sched, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """A tile's coordinates, its sequence (first query and key row in the tensors, lengths, diagonal),
    whether it has rows at all, and its number of key blocks. Dense: sequence b starts at row 0 of
    batch entry b. Varlen: the tensors are [1, total, heads * d] and sequence b's rows start at
    cu_seqlens[b]; the grid covers max_seqlen_q, so a shorter sequence's last tiles have no rows and are
    skipped (by every partition alike). Keys [0, hi) are visible to some row of the tile. At least one
    block is walked, so the pipeline's prologue and epilogue always run; a tile whose rows see no key
    masks everything."""
    num_m_blocks, heads_q, group_size, seqlen_q, seqlen_k, top_left, causal, reverse, varlen, CuQ, CuK = sched
    bh = tile // num_m_blocks
    m_block = tile % num_m_blocks
    if reverse:
        m_block = num_m_blocks - 1 - m_block
    b = bh // heads_q
    hq = bh % heads_q
    m0 = m_block * BLOCK_M
    q_start = b * 0
    k_start = b * 0
    sq = seqlen_q
    sk = seqlen_k
    if varlen:
        q_start = gl.load(CuQ + b)
        k_start = gl.load(CuK + b)
        # A sequence longer than max_seqlen is cut to it, as in the Triton kernels.
        sq = gl.minimum(gl.load(CuQ + b + 1) - q_start, seqlen_q)
        sk = gl.minimum(gl.load(CuK + b + 1) - k_start, seqlen_k)
    diag = sk - sq
    if top_left:
        diag = sk * 0
    hi = sk
    if causal:
        hi = gl.minimum(sk, m0 + BLOCK_M + diag)
    n_blocks = gl.maximum(gl.cdiv(hi, BLOCK_N), 1)
    return b, m0, hq, hq // group_size, n_blocks, q_start, k_start, sq, sk, diag, m0 < sq


@gluon.jit
def _load(desc, bufs, ready, empty, it, coord0, coord1, coord2, STAGES: gl.constexpr):
    # A fresh mbarrier counts as having completed the phase before phase 0, so waiting on parity 1 passes
    # at once: the first STAGES loads do not wait.
    s = it % STAGES
    mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(s), desc.block_type.nbytes)
    _tma_load(desc, [coord0, coord1, coord2], ready.index(s), bufs.index(s))


@gluon.jit
def _producer(desc_q, desc_k, desc_v, q_bufs, k_bufs, v_bufs, bars, sched, num_tiles,
              HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              Q_BUFS: gl.constexpr):
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn = bars
    NUM_WG: gl.constexpr = BLOCK_M // ROWS
    varlen_i = sched[8].to(gl.int32)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    kit = 0
    vit = 0
    t = 0
    for r in range(gl.cdiv(num_tiles, nprog)):
        tile = _tile_id(r, pid, nprog)
        b, m0, hq, hkv, n_blocks, q_start, k_start, sq, sk, diag, active = _tile(gl.minimum(tile, num_tiles - 1),
                                                                                sched, BLOCK_M, BLOCK_N)
        if (tile < num_tiles) & active:
            # The view's batch coordinate: the batch entry, or 0 for varlen (starts are in the rows).
            bc = b - b * varlen_i
            # K(0) first: the first product needs it and Q; then Q, then K(j+1) before V(j), the order
            # in which the consumers use them.
            _load(desc_k, k_bufs, k_ready, k_empty, kit, bc, k_start, hkv * HEAD_DIM, STAGES)
            kit += 1
            qs = t % Q_BUFS
            mbarrier.wait(q_empty.index(qs), ((t // Q_BUFS) & 1) ^ 1)
            mbarrier.expect(q_ready.index(qs), NUM_WG * desc_q.block_type.nbytes)
            for w in gl.static_range(NUM_WG):
                _tma_load(desc_q, [bc, q_start + m0 + ROWS * w, hq * HEAD_DIM], q_ready.index(qs),
                                                q_bufs.index(qs * NUM_WG + w))
            for j in range(n_blocks):
                if j + 1 < n_blocks:
                    _load(desc_k, k_bufs, k_ready, k_empty, kit, bc, k_start + (j + 1) * BLOCK_N, hkv * HEAD_DIM,
                          STAGES)
                    kit += 1
                _load(desc_v, v_bufs, v_ready, v_empty, vit, bc, k_start + j * BLOCK_N, hkv * HEAD_DIM, STAGES)
                vit += 1
            t += 1


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
def _consumer(q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, Out, Lse, Sinks, stride_ob, stride_os, stride_oh,
              stride_lb, stride_lh, flags, qk_scale_log2, WG: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, Q_BUFS: gl.constexpr):
    # This warpgroup owns query rows [WG * ROWS, WG * ROWS + ROWS) of each tile.
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn = bars
    NUM_WG: gl.constexpr = BLOCK_M // ROWS
    causal = sched[6]
    FIRST: gl.constexpr = 1 if WG == 0 else 0  # warpgroup 0 takes the first turn
    OTHER: gl.constexpr = (WG + 1) % NUM_WG  # the turn passes round-robin
    dtype: gl.constexpr = q_bufs.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    # Ring position of this tile's first K and V block: both rings advance by n_blocks per tile.
    it = 0
    t = 0
    turn_phase = 0
    for r in range(gl.cdiv(num_tiles, nprog)):
        tile = _tile_id(r, pid, nprog)
        b, m0, hq, hkv, n_blocks, q_start, k_start, seqlen_q, seqlen_k, diag, active = _tile(
            gl.minimum(tile, num_tiles - 1), sched, BLOCK_M, BLOCK_N)
        if (tile < num_tiles) & active:
            # Row i sees keys j <= i + mask_diag; without a causal mask, seqlen_k bounds nothing.
            mask_diag = seqlen_k
            if causal:
                mask_diag = diag
            row0 = m0 + WG * ROWS
            rows = row0 + gl.arange(0, ROWS, layout=row_s)
            qs = t % Q_BUFS
            q2 = q_bufs.index(qs * NUM_WG + WG).reshape([ROWS, HEAD_DIM])
            acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
            m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
            l_i = gl.zeros([ROWS], gl.float32, row_s)

            # Prologue: S_0.
            s = it % STAGES
            mbarrier.wait(k_ready.index(s), (it // STAGES) & 1)
            mbarrier.wait(q_ready.index(qs), (t // Q_BUFS) & 1)
            mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
            k_t = k_bufs.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_token = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
            mbarrier.arrive(turn.index(OTHER))
            turn_phase ^= 1
            qk = warpgroup_mma_wait(0, deps=(s_token, ))
            mbarrier.arrive(k_empty.index(s))
            p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, 0, rows, row0, seqlen_k, mask_diag, qk_scale_log2,
                                               s_layout, BLOCK_N)
            p_op = gl.convert_layout(p.to(dtype), p_layout)

            for j in range(1, n_blocks):
                kj = it + j  # K(j) and V(j - 1)
                s = kj % STAGES
                sv = (kj - 1) % STAGES
                mbarrier.wait(k_ready.index(s), (kj // STAGES) & 1)
                mbarrier.wait(v_ready.index(sv), ((kj - 1) // STAGES) & 1)
                mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
                k_t = k_bufs.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
                s_token = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
                v2 = v_bufs.index(sv).reshape([BLOCK_N, HEAD_DIM])
                o_token = warpgroup_mma(p_op, v2, acc, is_async=True)
                mbarrier.arrive(turn.index(OTHER))
                turn_phase ^= 1
                # wgmma groups retire in order: with one left outstanding, S_j (issued first) is done.
                qk = warpgroup_mma_wait(1, deps=(s_token, ))
                mbarrier.arrive(k_empty.index(s))
                p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, j * BLOCK_N, rows, row0, seqlen_k, mask_diag,
                                                   qk_scale_log2, s_layout, BLOCK_N)
                acc, p_done = warpgroup_mma_wait(0, deps=(o_token, p_op))
                mbarrier.arrive(v_empty.index(sv))
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
                p_op = gl.convert_layout(p.to(dtype), p_layout)

            # Every QK^T of this tile is done: its Q buffer may take the tile after next.
            mbarrier.arrive(q_empty.index(qs))
            # Epilogue: O += P_last V_last.
            it += n_blocks
            sv = (it - 1) % STAGES
            mbarrier.wait(v_ready.index(sv), ((it - 1) // STAGES) & 1)
            mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
            v2 = v_bufs.index(sv).reshape([BLOCK_N, HEAD_DIM])
            o_token = warpgroup_mma(p_op, v2, acc, is_async=True)
            mbarrier.arrive(turn.index(OTHER))
            turn_phase ^= 1
            acc, p_done = warpgroup_mma_wait(0, deps=(o_token, p_op))
            mbarrier.arrive(v_empty.index(sv))

            if (flags & FLAG_SINKS) != 0:
                # The sink joins the denominator as one more score (log2 units) with no value, as in the
                # Triton kernels: a row that saw no key then has output 0 and lse = the sink.
                sink = gl.load(Sinks + hq) * LOG2E
                m_fin = gl.maximum(m_i, sink)
                rescale = gl.exp2(m_i - m_fin)
                l_i = l_i * rescale + gl.exp2(sink - m_fin)
                acc = acc * gl.expand_dims(gl.convert_layout(rescale, row_o), 1)
                m_i = m_fin
            # A row with no visible key (and no sink) has l = 0: its output is 0 and its lse -inf. Rows
            # past seqlen_q are never written.
            has_keys = l_i > 0.0
            l_safe = gl.where(has_keys, l_i, 1.0)
            out = acc / gl.expand_dims(gl.convert_layout(l_safe, row_o), 1)
            rows_o = row0 + gl.arange(0, ROWS, layout=row_o)
            cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
            o_base = Out + b.to(gl.int64) * stride_ob + q_start.to(gl.int64) * stride_os + hq.to(gl.int64) * stride_oh
            o_ptrs = o_base + gl.expand_dims(rows_o.to(gl.int64) * stride_os, 1) + gl.expand_dims(cols_o, 0)
            o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
            gl.store(o_ptrs, out.to(dtype), mask=o_mask)
            if (flags & FLAG_WRITE_LSE) != 0:
                lse = gl.where(has_keys, (m_i + gl.log2(l_i)) * 0.6931471805599453, float("-inf"))
                lse_ptrs = Lse + b.to(gl.int64) * stride_lb + hq.to(gl.int64) * stride_lh + q_start.to(gl.int64) + rows
                gl.store(lse_ptrs, lse, mask=rows < seqlen_q)
            t += 1


@gluon.jit
def _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, Sinks, stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
             seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_right, flags, qk_scale_log2,
             DescQ, DescK, DescV, num_tiles,
             HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # The program of both entry points: BLOCK_M // ROWS consumer warpgroups.
    NUM_WG: gl.constexpr = BLOCK_M // ROWS
    gl.static_assert(BLOCK_M == NUM_WG * ROWS, "one 64-row slice of the tile per consumer warpgroup")
    gl.static_assert((NUM_WG == 2) | (NUM_WG == 3), "two or three consumer warpgroups")
    # Two Q buffers let the next tile's Q load during this one; at d=256 they do not fit beside the ring.
    Q_BUFS: gl.constexpr = 2 if HEAD_DIM <= 128 else 1
    # The host sends only unmasked or causal problems here: causal is a right window bound of 0.
    causal = window_right == 0
    top_left = (flags & FLAG_TOP_LEFT) != 0
    reverse = (flags & FLAG_REVERSE) != 0
    varlen = (flags & FLAG_VARLEN) != 0

    dtype: gl.constexpr = DescQ.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [Q_BUFS * NUM_WG] + DescQ.block_type.shape, DescQ.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES] + DescK.block_type.shape, DescK.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES] + DescV.block_type.shape, DescV.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
    # The "empty" barriers are released once by each consumer warpgroup (an arrive is one arrival per
    # partition).
    for i in gl.static_range(Q_BUFS):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=NUM_WG)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_WG)
        mbarrier.init(v_empty.index(i), count=NUM_WG)
    for i in gl.static_range(NUM_WG):
        mbarrier.init(turn.index(i), count=1)

    bars = (q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn)
    sched = (num_m_blocks, heads_q, group_size, seqlen_q, seqlen_k, top_left, causal, reverse, varlen, CuSeqlensQ,
             CuSeqlensK)
    # (The argument tuples are written out in each call: a tuple held in a variable loses its constexprs.)
    if NUM_WG == 3:
        gl.warp_specialize([
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, Out, Lse, Sinks, stride_ob, stride_os,
                         stride_oh, stride_lb, stride_lh, flags, qk_scale_log2,
                         0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, Q_BUFS)),
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, Out, Lse, Sinks, stride_ob, stride_os,
                         stride_oh, stride_lb, stride_lh, flags, qk_scale_log2,
                         1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, Q_BUFS)),
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, Out, Lse, Sinks, stride_ob, stride_os,
                         stride_oh, stride_lb, stride_lh, flags, qk_scale_log2,
                         2, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, Q_BUFS)),
            (_producer, (DescQ, DescK, DescV, q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, HEAD_DIM, BLOCK_M,
                         BLOCK_N, STAGES, Q_BUFS)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, Out, Lse, Sinks, stride_ob, stride_os,
                         stride_oh, stride_lb, stride_lh, flags, qk_scale_log2,
                         0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, Q_BUFS)),
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, Out, Lse, Sinks, stride_ob, stride_os,
                         stride_oh, stride_lb, stride_lh, flags, qk_scale_log2,
                         1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, Q_BUFS)),
            (_producer, (DescQ, DescK, DescV, q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, HEAD_DIM, BLOCK_M,
                         BLOCK_N, STAGES, Q_BUFS)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


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
                    DescQ, DescK, DescV, num_tiles,
                    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                    PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # Two consumer warpgroups, 128-row tiles.
    _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, Sinks, stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
             seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_right, flags, qk_scale_log2,
             DescQ, DescK, DescV, num_tiles, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, PRODUCER_REGS, CONSUMER_REGS)


@gluon.jit
def attn_fwd_hopper_wg3(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                        stride_qb, stride_qs, stride_qh,
                        stride_kb, stride_ks, stride_kh,
                        stride_vb, stride_vs, stride_vh,
                        stride_ob, stride_os, stride_oh,
                        stride_lb, stride_lh, stride_ab,
                        seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                        window_left, window_right, flags,
                        qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                        DescQ, DescK, DescV, num_tiles,
                        HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                        PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # Three consumer warpgroups, 192-row tiles (d=64; the host takes it without a causal mask).
    _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, Sinks, stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
             seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_right, flags, qk_scale_log2,
             DescQ, DescK, DescV, num_tiles, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, PRODUCER_REGS, CONSUMER_REGS)

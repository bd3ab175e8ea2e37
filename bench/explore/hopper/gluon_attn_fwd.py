"""Experimental FlashAttention-3-style forward for the H100 (sm_90a), written in Gluon (Triton 3.6.0).

Layouts (aotk's): q [batch, seqlen_q, heads_q, d], k/v [batch, seqlen_k, heads_kv, d], out like q, bf16 or
fp16, last dim contiguous, other strides arbitrary but 16-byte aligned (TMA). lse fp32 [batch, heads_q,
seqlen_q], natural log. GQA: head_kv = head_q // (heads_q // heads_kv). Causal is bottom-right: row i sees
key j iff j <= i + seqlen_k - seqlen_q. A row with no visible key gets out = 0, lse = -inf.

Q, K and V are read through host-side 4-D TMA descriptors over [batch, seqlen, heads, d] (block
[1, BLOCK, 1, d]); TMA zero-fills rows past seqlen (per batch, since seqlen is its own dimension) and still
counts the full box in the mbarrier's transaction bytes. O and lse are written with plain masked stores
(rows >= seqlen_q are never written).

Schedules (one CTA per (query tile, batch, head_q); warp specialization):
- "ws" (fallback, simplest): a 1-warp producer partition (TMA loads of Q once, then K and V blocks into a
  ring of STAGES shared-memory stages, with ready/empty mbarriers per stage and separate barriers for K and
  V) and ONE consumer partition of 8 warps (2 warpgroups, 64 query rows each, BLOCK_M = 128), which does
  S = Q K^T and O += P V with async warpgroup_mma, P fed from registers (wgmma's A operand), and the
  intra-warpgroup pipelining of FA3: QK^T of block j and PV of block j-1 are in flight while nothing
  waits, then the softmax of block j runs while PV of block j-1 finishes.
- "pp" (ping-pong): the two consumer warpgroups are separate partitions (the default partition and a
  4-warp worker), each owning 64 rows of the 128-row tile, and they take turns issuing their GEMMs
  (a pair of mbarriers as FA3's named "warp scheduler" barriers): warpgroup 0's softmax overlaps
  warpgroup 1's GEMMs and vice versa. Same intra-warpgroup pipelining inside each.

Host: gluon_attn_fwd(q, k, v, causal, softmax_scale, config) (JIT path, torch tensors) and
compile_aot(arch=90, ...) which compiles with no GPU and prints the metadata.

No torch / driver calls at import time.
"""

import functools
import math

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

# Triton 3.6 calls the TMA load async_copy_global_to_shared; 3.9 renamed it async_load (the old name raises).
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

# Tile configs. BLOCK_M is the CTA's query tile (2 warpgroups x 64 rows).
CONFIGS = {
    # name: dict(schedule, BLOCK_M, BLOCK_N, STAGES, producer_regs, maxnreg)
    "ws_bn128_s2": dict(schedule="ws", BLOCK_M=128, BLOCK_N=128, STAGES=2, producer_regs=24, maxnreg=168),
    "ws_bn64_s3": dict(schedule="ws", BLOCK_M=128, BLOCK_N=64, STAGES=3, producer_regs=24, maxnreg=168),
    "pp_bn128_s2": dict(schedule="pp", BLOCK_M=128, BLOCK_N=128, STAGES=2, producer_regs=24, maxnreg=168),
    "pp_bn64_s3": dict(schedule="pp", BLOCK_M=128, BLOCK_N=64, STAGES=3, producer_regs=24, maxnreg=168),
    # Persistent ping-pong (grid = SMs), NUM_WG consumer warpgroups of 64 rows, Q_BUFS query buffers.
    "ppp_bn128_s2": dict(schedule="ppp", BLOCK_M=128, BLOCK_N=128, STAGES=2, NUM_WG=2, Q_BUFS=2,
                         producer_regs=24, consumer_regs=240, maxnreg=168),
    "ppp_bn128_s3": dict(schedule="ppp", BLOCK_M=128, BLOCK_N=128, STAGES=3, NUM_WG=2, Q_BUFS=2,
                         producer_regs=24, consumer_regs=240, maxnreg=168, dims=(64, )),
    # d=64: a 192-row query tile, 3 consumer warpgroups in round-robin (FA3's hdim-64 tile).
    "ppp3_bn128_s2": dict(schedule="ppp", BLOCK_M=192, BLOCK_N=128, STAGES=2, NUM_WG=3, Q_BUFS=2,
                          producer_regs=24, consumer_regs=160, maxnreg=128, dims=(64, )),
    "ppp3_bn128_s3": dict(schedule="ppp", BLOCK_M=192, BLOCK_N=128, STAGES=3, NUM_WG=3, Q_BUFS=2,
                          producer_regs=24, consumer_regs=160, maxnreg=128, dims=(64, )),
    # d=256 (and d=128 for comparison): one Q buffer, 64-key blocks.
    "ppp_bn64_s2": dict(schedule="ppp", BLOCK_M=128, BLOCK_N=64, STAGES=2, NUM_WG=2, Q_BUFS=1,
                        producer_regs=24, consumer_regs=240, maxnreg=168, dims=(128, 256)),
    "ppp3_bn128_s2_np": dict(schedule="ppp", BLOCK_M=192, BLOCK_N=128, STAGES=2, NUM_WG=3, Q_BUFS=2,
                             producer_regs=24, consumer_regs=160, maxnreg=128, dims=(64, ), persistent=False),
    # ppp_bn128_s2 with the producer's plain K(j), V(j) order.
    "ppp_bn128_s2_kv": dict(schedule="ppp", BLOCK_M=128, BLOCK_N=128, STAGES=2, NUM_WG=2, Q_BUFS=2,
                            producer_regs=24, consumer_regs=240, maxnreg=168, kv_fa3_order=False, dims=(64, 128)),
}
DEFAULT_CONFIG = "ws_bn128_s2"


def config_ok(cfg, head_dim):
    """Shared memory: Q tile + STAGES x (K + V) blocks, 2-byte elements, must fit in 227 KiB."""
    if head_dim not in cfg.get("dims", (64, 128, 256)):
        return False
    smem = 2 * head_dim * (cfg.get("Q_BUFS", 1) * cfg["BLOCK_M"] + 2 * cfg["STAGES"] * cfg["BLOCK_N"]) + 1024
    return smem <= 232448 - 1024


# ----------------------------------------------------------------------------------------------------
# Device code
# ----------------------------------------------------------------------------------------------------


@gluon.jit
def _num_kv_blocks(m0, seqlen_q, seqlen_k, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    # Keys [0, hi) are visible to some row of the tile; at least one block is walked so that the
    # pipeline's prologue/epilogue always run (a tile whose rows see no key masks everything).
    hi = seqlen_k
    if CAUSAL:
        hi = gl.minimum(seqlen_k, m0 + BLOCK_M + seqlen_k - seqlen_q)
    n = gl.cdiv(hi, BLOCK_N)
    return gl.maximum(n, 1)


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, bars, coords, n_blocks,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    q_bar, k_ready, k_empty, v_ready, v_empty, turn = bars
    b, m0, hq, hkv = coords
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    _tma_load(q_desc, [b, m0, hq, 0], q_bar, q_smem)
    for j in range(n_blocks):
        s = j % STAGES
        ph = (j // STAGES) & 1
        n0 = j * BLOCK_N
        # A fresh mbarrier counts as having completed the phase before phase 0: waiting on parity 1
        # passes at once, so the first STAGES loads do not wait.
        mbarrier.wait(k_empty.index(s), ph ^ 1)
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        _tma_load(k_desc, [b, n0, hkv, 0], k_ready.index(s), k_bufs.index(s))
        mbarrier.wait(v_empty.index(s), ph ^ 1)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        _tma_load(v_desc, [b, n0, hkv, 0], v_ready.index(s), v_bufs.index(s))


@gluon.jit
def _softmax_step(qk, m_i, l_i, n0, rows, first_row, seqlen_k, diag, qk_scale_log2, s_layout: gl.constexpr,
                  CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    # rows: this warpgroup's (or partition's) query rows, SliceLayout(1, s_layout).
    # A block needs masking if it reaches past seqlen_k or (causal) past the first row's last key.
    need_mask = n0 + BLOCK_N > seqlen_k
    if CAUSAL:
        need_mask = need_mask | (n0 + BLOCK_N - 1 > first_row + diag)
    if need_mask:
        cols = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        ok = gl.expand_dims(cols, 0) < seqlen_k
        if CAUSAL:
            ok = ok & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + diag, 1))
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
              stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
              seqlen_q, seqlen_k, qk_scale_log2,
              WG: gl.constexpr, NUM_WARPS: gl.constexpr, ROWS: gl.constexpr, PINGPONG: gl.constexpr,
              CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
              STAGES: gl.constexpr):
    # This partition owns query rows [WG * ROWS, WG * ROWS + ROWS) of the tile, with NUM_WARPS warps
    # (ROWS = 16 * NUM_WARPS: one m16 slice per warp).
    q_bar, k_ready, k_empty, v_ready, v_empty, turn = bars
    b, m0, hq, hkv = coords
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    diag = seqlen_k - seqlen_q
    row0 = m0 + WG * ROWS
    rows = row0 + gl.arange(0, ROWS, layout=row_s)

    q2 = q_smem.reshape([BLOCK_M, HEAD_DIM])
    if ROWS != BLOCK_M:
        q2 = q2.slice(WG * ROWS, ROWS, dim=0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([ROWS], gl.float32, row_s)
    turn_ph = 0

    mbarrier.wait(q_bar, 0)

    # Prologue: S_0.
    mbarrier.wait(k_ready.index(0), 0)
    if PINGPONG:
        mbarrier.wait(turn.index(WG), turn_ph ^ (1 - WG))
    k_t = k_bufs.index(0).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    s_tok = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG))
        turn_ph ^= 1
    qk = warpgroup_mma_wait(0, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(0))
    p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, 0, rows, row0, seqlen_k, diag, qk_scale_log2, s_layout, CAUSAL,
                                       BLOCK_M, BLOCK_N)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_blocks):
        s = j % STAGES
        ph = (j // STAGES) & 1
        sp = (j - 1) % STAGES
        php = ((j - 1) // STAGES) & 1
        mbarrier.wait(k_ready.index(s), ph)
        mbarrier.wait(v_ready.index(sp), php)
        if PINGPONG:
            mbarrier.wait(turn.index(WG), turn_ph ^ (1 - WG))
        k_t = k_bufs.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
        s_tok = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
        v2 = v_bufs.index(sp).reshape([BLOCK_N, HEAD_DIM])
        o_tok = warpgroup_mma(p_op, v2, acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - WG))
            turn_ph ^= 1
        # wgmma groups retire in order: with one left outstanding, S_j (issued first) is done.
        qk = warpgroup_mma_wait(1, deps=(s_tok, ))
        mbarrier.arrive(k_empty.index(s))
        p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, j * BLOCK_N, rows, row0, seqlen_k, diag, qk_scale_log2,
                                           s_layout, CAUSAL, BLOCK_M, BLOCK_N)
        acc, p_old = warpgroup_mma_wait(0, deps=(o_tok, p_op))
        mbarrier.arrive(v_empty.index(sp))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

    # Epilogue: O += P_last V_last.
    jl = n_blocks - 1
    sl = jl % STAGES
    mbarrier.wait(v_ready.index(sl), (jl // STAGES) & 1)
    if PINGPONG:
        mbarrier.wait(turn.index(WG), turn_ph ^ (1 - WG))
    v2 = v_bufs.index(sl).reshape([BLOCK_N, HEAD_DIM])
    o_tok = warpgroup_mma(p_op, v2, acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG))
    acc, p_old = warpgroup_mma_wait(0, deps=(o_tok, p_op))
    mbarrier.arrive(v_empty.index(sl))

    # Normalize and store (rows >= seqlen_q are never written).
    has_keys = l_i > 0.0
    l_safe = gl.where(has_keys, l_i, 1.0)
    out = acc / gl.expand_dims(gl.convert_layout(l_safe, row_o), 1)
    rows_o = m0 + WG * ROWS + gl.arange(0, ROWS, layout=row_o)
    cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    o_base = Out + b.to(gl.int64) * stride_ob + hq.to(gl.int64) * stride_oh
    o_ptrs = o_base + gl.expand_dims(rows_o.to(gl.int64) * stride_os, 1) + gl.expand_dims(cols_o, 0)
    o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
    gl.store(o_ptrs, out.to(dtype), mask=o_mask)
    lse = gl.where(has_keys, (m_i + gl.log2(l_i)) * 0.6931471805599453, float("-inf"))
    lse_ptrs = Lse + b.to(gl.int64) * stride_lb + hq.to(gl.int64) * stride_lh + rows
    gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


# JIT: no value specialization of lengths / head counts / lse strides (each distinct 1 or %16 pattern would
# otherwise compile a new variant); the O strides stay specialized (multiples of 16 -> 4-byte stores).
@gluon.jit(do_not_specialize=["stride_lb", "stride_lh", "seqlen_q", "seqlen_k", "heads_q", "group_size",
                              "num_m_blocks"])
def gluon_attn_fwd_kernel(q_desc, k_desc, v_desc, Out, Lse,
                          stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
                          seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, qk_scale_log2,
                          CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                          HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                          PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # Grid: one program per (query tile, batch, head_q), query tile fastest (programs in flight share
    # one head's K/V in L2); causal runs the heaviest (last) query tiles first.
    pid = gl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    if CAUSAL:
        m_block = num_m_blocks - 1 - m_block
    b = bh // heads_q
    hq = bh % heads_q
    hkv = hq // group_size
    m0 = m_block * BLOCK_M
    n_blocks = _num_kv_blocks(m0, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N)

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, q_desc.block_type.shape, q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    # Consumers release a stage once per consumer partition (mbarrier.arrive is one arrival per
    # partition).
    NUM_CONSUMERS: gl.constexpr = 2 if PINGPONG else 1
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(i), count=NUM_CONSUMERS)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)

    bars = (q_bar, k_ready, k_empty, v_ready, v_empty, turn)
    coords = (b, m0, hq, hkv)
    if PINGPONG:
        ROWS: gl.constexpr = BLOCK_M // 2
        gl.warp_specialize([
            (_consumer, (q_smem, k_bufs, v_bufs, bars, coords, n_blocks, Out, Lse,
                         stride_ob, stride_os, stride_oh, stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale_log2,
                         0, 4, ROWS, True, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES)),
            (_consumer, (q_smem, k_bufs, v_bufs, bars, coords, n_blocks, Out, Lse,
                         stride_ob, stride_os, stride_oh, stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale_log2,
                         1, 4, ROWS, True, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, bars, coords, n_blocks, BLOCK_N, STAGES)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_smem, k_bufs, v_bufs, bars, coords, n_blocks, Out, Lse,
                         stride_ob, stride_os, stride_oh, stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale_log2,
                         0, 8, BLOCK_M, False, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, bars, coords, n_blocks, BLOCK_N, STAGES)),
        ], [1], [PRODUCER_REGS])


# ----------------------------------------------------------------------------------------------------
# Persistent ping-pong ("ppp"): grid = min(tiles, SMs); each CTA walks tiles pid, pid + grid, ...
# (query tile fastest inside one (batch, head): the CTAs in flight share a few heads' K/V in L2; causal
# runs each head's heaviest tiles first, and the static round-robin spreads tile lengths evenly).
# NUM_WG consumer warpgroups (64 rows each, BLOCK_M = 64 * NUM_WG) take turns issuing GEMMs in a
# round-robin (FA3's scheduler barrier: WG i waits turn[i], then arrives turn[(i + 1) % NUM_WG]).
# The producer runs ahead across tiles: the next tile's K_0 and Q (Q_BUFS buffers) load while the
# consumers finish the current one; K/V ring counters run over all tiles of the CTA. K(j+1) is issued
# before V(j) (the consumer needs them in that order).
# ----------------------------------------------------------------------------------------------------


@gluon.jit
def _tile_coords(tile, num_m_blocks, heads_q, group_size, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr):
    bh = tile // num_m_blocks
    m_block = tile % num_m_blocks
    if CAUSAL:
        m_block = num_m_blocks - 1 - m_block
    b = bh // heads_q
    hq = bh % heads_q
    hkv = hq // group_size
    return b, m_block * BLOCK_M, hq, hkv


@gluon.jit
def _tile_id(r, pid, nprog):
    # Boustrophedon rounds: round r takes tiles [r * nprog, (r + 1) * nprog), CTA pid the pid-th one on
    # even rounds and the (nprog - 1 - pid)-th on odd rounds (heavy and light causal tiles pair up).
    p_eff = pid
    if r % 2 == 1:
        p_eff = nprog - 1 - pid
    return r * nprog + p_eff


@gluon.jit
def _load_kv(desc, bufs, ready, empty, it, b, n0, hkv, STAGES: gl.constexpr):
    s = it % STAGES
    ph = (it // STAGES) & 1
    mbarrier.wait(empty.index(s), ph ^ 1)
    mbarrier.expect(ready.index(s), desc.block_type.nbytes)
    _tma_load(desc, [b, n0, hkv, 0], ready.index(s), bufs.index(s))


@gluon.jit
def _producer_p(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, sched, seqlen_q, seqlen_k,
                CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                Q_BUFS: gl.constexpr, NUM_WG: gl.constexpr, KV_FA3_ORDER: gl.constexpr):
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn = bars
    num_tiles, num_m_blocks, heads_q, group_size = sched
    Q_BYTES: gl.constexpr = NUM_WG * q_desc.block_type.nbytes
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    kit = 0
    vit = 0
    t = 0
    for r in range(gl.cdiv(num_tiles, nprog)):
        tile = _tile_id(r, pid, nprog)
        if tile < num_tiles:
            b, m0, hq, hkv = _tile_coords(tile, num_m_blocks, heads_q, group_size, CAUSAL, BLOCK_M)
            n_blocks = _num_kv_blocks(m0, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N)
            _load_kv(k_desc, k_bufs, k_ready, k_empty, kit, b, 0, hkv, STAGES)
            kit += 1
            qs = t % Q_BUFS
            mbarrier.wait(q_empty.index(qs), ((t // Q_BUFS) & 1) ^ 1)
            # Q comes as NUM_WG boxes of 64 rows (one per consumer warpgroup; TMA boxes are powers of 2).
            mbarrier.expect(q_ready.index(qs), Q_BYTES)
            for w in gl.static_range(NUM_WG):
                _tma_load(q_desc, [b, m0 + 64 * w, hq, 0], q_ready.index(qs), q_bufs.index(qs * NUM_WG + w))
            if KV_FA3_ORDER:
                # K(j+1) before V(j): the consumer's iteration j+1 needs K(j+1) first.
                for j in range(n_blocks):
                    if j + 1 < n_blocks:
                        _load_kv(k_desc, k_bufs, k_ready, k_empty, kit, b, (j + 1) * BLOCK_N, hkv, STAGES)
                        kit += 1
                    _load_kv(v_desc, v_bufs, v_ready, v_empty, vit, b, j * BLOCK_N, hkv, STAGES)
                    vit += 1
            else:
                _load_kv(v_desc, v_bufs, v_ready, v_empty, vit, b, 0, hkv, STAGES)
                vit += 1
                for j in range(1, n_blocks):
                    _load_kv(k_desc, k_bufs, k_ready, k_empty, kit, b, j * BLOCK_N, hkv, STAGES)
                    kit += 1
                    _load_kv(v_desc, v_bufs, v_ready, v_empty, vit, b, j * BLOCK_N, hkv, STAGES)
                    vit += 1
            t += 1


@gluon.jit
def _consumer_p(q_bufs, k_bufs, v_bufs, bars, sched, Out, Lse,
                stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
                seqlen_q, seqlen_k, qk_scale_log2,
                WG: gl.constexpr, NUM_WG: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, Q_BUFS: gl.constexpr):
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn = bars
    num_tiles, num_m_blocks, heads_q, group_size = sched
    ROWS: gl.constexpr = 64
    NUM_WARPS: gl.constexpr = 4
    FIRST: gl.constexpr = 1 if WG == 0 else 0
    NEXT: gl.constexpr = (WG + 1) % NUM_WG
    dtype: gl.constexpr = q_bufs.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    diag = seqlen_k - seqlen_q
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    kit = 0
    vit = 0
    t = 0
    turn_ph = 0
    for r in range(gl.cdiv(num_tiles, nprog)):
        tile = _tile_id(r, pid, nprog)
        if tile < num_tiles:
            b, m0, hq, hkv = _tile_coords(tile, num_m_blocks, heads_q, group_size, CAUSAL, BLOCK_M)
            n_blocks = _num_kv_blocks(m0, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N)
            row0 = m0 + WG * ROWS
            rows = row0 + gl.arange(0, ROWS, layout=row_s)
            qs = t % Q_BUFS
            q2 = q_bufs.index(qs * NUM_WG + WG).reshape([ROWS, HEAD_DIM])
            acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
            m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
            l_i = gl.zeros([ROWS], gl.float32, row_s)

            # Prologue: S_0.
            s = kit % STAGES
            mbarrier.wait(k_ready.index(s), (kit // STAGES) & 1)
            mbarrier.wait(q_ready.index(qs), (t // Q_BUFS) & 1)
            mbarrier.wait(turn.index(WG), turn_ph ^ FIRST)
            k_t = k_bufs.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
            s_tok = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
            mbarrier.arrive(turn.index(NEXT))
            turn_ph ^= 1
            qk = warpgroup_mma_wait(0, deps=(s_tok, ))
            mbarrier.arrive(k_empty.index(s))
            kit += 1
            p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, 0, rows, row0, seqlen_k, diag, qk_scale_log2, s_layout,
                                               CAUSAL, BLOCK_M, BLOCK_N)
            p_op = gl.convert_layout(p.to(dtype), p_layout)

            for j in range(1, n_blocks):
                s = kit % STAGES
                sp = vit % STAGES
                mbarrier.wait(k_ready.index(s), (kit // STAGES) & 1)
                mbarrier.wait(v_ready.index(sp), (vit // STAGES) & 1)
                mbarrier.wait(turn.index(WG), turn_ph ^ FIRST)
                k_t = k_bufs.index(s).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
                s_tok = warpgroup_mma(q2, k_t, zero_s, use_acc=False, is_async=True)
                v2 = v_bufs.index(sp).reshape([BLOCK_N, HEAD_DIM])
                o_tok = warpgroup_mma(p_op, v2, acc, is_async=True)
                mbarrier.arrive(turn.index(NEXT))
                turn_ph ^= 1
                qk = warpgroup_mma_wait(1, deps=(s_tok, ))
                mbarrier.arrive(k_empty.index(s))
                kit += 1
                p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, j * BLOCK_N, rows, row0, seqlen_k, diag,
                                                   qk_scale_log2, s_layout, CAUSAL, BLOCK_M, BLOCK_N)
                acc, p_old = warpgroup_mma_wait(0, deps=(o_tok, p_op))
                mbarrier.arrive(v_empty.index(sp))
                vit += 1
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
                p_op = gl.convert_layout(p.to(dtype), p_layout)

            # All QK^T of this tile are done: Q's buffer may be refilled.
            mbarrier.arrive(q_empty.index(qs))
            # Epilogue: O += P_last V_last.
            sl = vit % STAGES
            mbarrier.wait(v_ready.index(sl), (vit // STAGES) & 1)
            mbarrier.wait(turn.index(WG), turn_ph ^ FIRST)
            v2 = v_bufs.index(sl).reshape([BLOCK_N, HEAD_DIM])
            o_tok = warpgroup_mma(p_op, v2, acc, is_async=True)
            mbarrier.arrive(turn.index(NEXT))
            turn_ph ^= 1
            acc, p_old = warpgroup_mma_wait(0, deps=(o_tok, p_op))
            mbarrier.arrive(v_empty.index(sl))
            vit += 1

            has_keys = l_i > 0.0
            l_safe = gl.where(has_keys, l_i, 1.0)
            out = acc / gl.expand_dims(gl.convert_layout(l_safe, row_o), 1)
            rows_o = row0 + gl.arange(0, ROWS, layout=row_o)
            cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
            o_base = Out + b.to(gl.int64) * stride_ob + hq.to(gl.int64) * stride_oh
            o_ptrs = o_base + gl.expand_dims(rows_o.to(gl.int64) * stride_os, 1) + gl.expand_dims(cols_o, 0)
            o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
            gl.store(o_ptrs, out.to(dtype), mask=o_mask)
            lse = gl.where(has_keys, (m_i + gl.log2(l_i)) * 0.6931471805599453, float("-inf"))
            lse_ptrs = Lse + b.to(gl.int64) * stride_lb + hq.to(gl.int64) * stride_lh + rows
            gl.store(lse_ptrs, lse, mask=rows < seqlen_q)
            t += 1


@gluon.jit(do_not_specialize=["stride_lb", "stride_lh", "seqlen_q", "seqlen_k", "heads_q", "group_size",
                              "num_m_blocks", "num_tiles"])
def gluon_attn_fwd_persistent_kernel(q_desc, k_desc, v_desc, Out, Lse,
                                     stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
                                     seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, num_tiles, qk_scale_log2,
                                     CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                                     HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, NUM_WG: gl.constexpr,
                                     Q_BUFS: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                     KV_FA3_ORDER: gl.constexpr):
    dtype: gl.constexpr = q_desc.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [Q_BUFS * NUM_WG] + q_desc.block_type.shape, q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [NUM_WG, 1], mbarrier.MBarrierLayout())
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
    sched = (num_tiles, num_m_blocks, heads_q, group_size)
    if NUM_WG == 2:
        gl.warp_specialize([
            (_consumer_p, (q_bufs, k_bufs, v_bufs, bars, sched, Out, Lse, stride_ob, stride_os, stride_oh, stride_lb,
                           stride_lh, seqlen_q, seqlen_k, qk_scale_log2, 0, 2, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                           STAGES, Q_BUFS)),
            (_consumer_p, (q_bufs, k_bufs, v_bufs, bars, sched, Out, Lse, stride_ob, stride_os, stride_oh, stride_lb,
                           stride_lh, seqlen_q, seqlen_k, qk_scale_log2, 1, 2, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                           STAGES, Q_BUFS)),
            (_producer_p, (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, sched, seqlen_q, seqlen_k, CAUSAL,
                           BLOCK_M, BLOCK_N, STAGES, Q_BUFS, NUM_WG, KV_FA3_ORDER)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer_p, (q_bufs, k_bufs, v_bufs, bars, sched, Out, Lse, stride_ob, stride_os, stride_oh, stride_lb,
                           stride_lh, seqlen_q, seqlen_k, qk_scale_log2, 0, 3, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                           STAGES, Q_BUFS)),
            (_consumer_p, (q_bufs, k_bufs, v_bufs, bars, sched, Out, Lse, stride_ob, stride_os, stride_oh, stride_lb,
                           stride_lh, seqlen_q, seqlen_k, qk_scale_log2, 1, 3, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                           STAGES, Q_BUFS)),
            (_consumer_p, (q_bufs, k_bufs, v_bufs, bars, sched, Out, Lse, stride_ob, stride_os, stride_oh, stride_lb,
                           stride_lh, seqlen_q, seqlen_k, qk_scale_log2, 2, 3, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM,
                           STAGES, Q_BUFS)),
            (_producer_p, (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, bars, sched, seqlen_q, seqlen_k, CAUSAL,
                           BLOCK_M, BLOCK_N, STAGES, Q_BUFS, NUM_WG, KV_FA3_ORDER)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])


# ----------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------


def _gl_dtype(name):
    return {"bf16": gl.bfloat16, "fp16": gl.float16}[name]


def _smem_layout(block, dtype_name):
    return gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(dtype_name))


def _kernel_params(cfg, head_dim, causal):
    if cfg["schedule"] == "ppp":
        return dict(CAUSAL=bool(causal), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=head_dim,
                    STAGES=cfg["STAGES"], NUM_WG=cfg["NUM_WG"], Q_BUFS=cfg["Q_BUFS"],
                    PRODUCER_REGS=cfg["producer_regs"], CONSUMER_REGS=cfg["consumer_regs"],
                    KV_FA3_ORDER=cfg.get("kv_fa3_order", True)), \
            dict(num_warps=4, maxnreg=cfg["maxnreg"])
    pingpong = cfg["schedule"] == "pp"
    return dict(CAUSAL=bool(causal), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=head_dim,
                STAGES=cfg["STAGES"], PINGPONG=pingpong, PRODUCER_REGS=cfg["producer_regs"],
                CONSUMER_REGS=240), dict(num_warps=4 if pingpong else 8, maxnreg=cfg["maxnreg"])


_SMS = {}


@functools.lru_cache(maxsize=4096)
def persistent_grid(num_tiles, num_m_blocks, sq, sk, BM, BN, causal, sms, max_imbalance=1.08):
    """CTAs for the persistent kernel: sms, unless (causal) the static boustrophedon assignment of tiles of
    unequal length would leave the busiest CTA more than max_imbalance x the mean; then one CTA per tile
    (the hardware's dynamic block scheduler balances, the kernel runs each CTA's single tile)."""
    if num_tiles <= sms or not causal:
        return min(num_tiles, sms)
    diag = sk - sq

    def work(t):
        mb = num_m_blocks - 1 - t % num_m_blocks
        hi = max(0, min(sk, mb * BM + BM + diag))
        return max(1, -(-hi // BN)) + 1.0  # + ~one block's worth of per-tile overhead

    loads = [0.0] * sms
    for r in range(-(-num_tiles // sms)):
        for p in range(sms):
            t = r * sms + (p if r % 2 == 0 else sms - 1 - p)
            if t < num_tiles:
                loads[p] += work(t)
    return sms if max(loads) <= max_imbalance * sum(loads) / sms else num_tiles


def _num_sms(device):
    import torch
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SMS:
        _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SMS[idx]


def gluon_attn_fwd(q, k, v, causal=False, softmax_scale=None, config=DEFAULT_CONFIG):
    """q [b, sq, hq, d], k/v [b, sk, hkv, d] (bf16/fp16 CUDA tensors). Returns (out, lse)."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    cfg = CONFIGS[config] if isinstance(config, str) else config
    batch, sq, hq, d = q.shape
    _, sk, hkv, _ = k.shape
    assert k.shape == v.shape and k.shape[0] == batch and k.shape[3] == d
    assert hq % hkv == 0 and d in (64, 128, 256)
    assert q.dtype in (torch.bfloat16, torch.float16) and k.dtype == q.dtype and v.dtype == q.dtype
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(d)
    dname = "bf16" if q.dtype == torch.bfloat16 else "fp16"
    BM, BN = cfg["BLOCK_M"], cfg["BLOCK_N"]
    out = torch.empty_like(q)
    lse = torch.empty((batch, hq, sq), device=q.device, dtype=torch.float32)
    q_blk, kv_blk = [1, 64 if cfg["schedule"] == "ppp" else BM, 1, d], [1, BN, 1, d]
    q_desc = TensorDescriptor(q, list(q.shape), list(q.stride()), q_blk, _smem_layout(q_blk, dname))
    k_desc = TensorDescriptor(k, list(k.shape), list(k.stride()), kv_blk, _smem_layout(kv_blk, dname))
    v_desc = TensorDescriptor(v, list(v.shape), list(v.stride()), kv_blk, _smem_layout(kv_blk, dname))
    num_m_blocks = triton.cdiv(sq, BM)
    cx, opts = _kernel_params(cfg, d, causal)
    if cfg["schedule"] == "ppp":
        num_tiles = num_m_blocks * batch * hq
        if cfg.get("persistent", True):
            grid = (persistent_grid(num_tiles, num_m_blocks, sq, sk, BM, BN, causal, _num_sms(q.device)), )
        else:  # one CTA per tile (the same kernel, hardware block scheduling)
            grid = (num_tiles, )
        gluon_attn_fwd_persistent_kernel[grid](q_desc, k_desc, v_desc, out, lse,
                                               out.stride(0), out.stride(1), out.stride(2), lse.stride(0),
                                               lse.stride(1), sq, sk, hq, hq // hkv, num_m_blocks, num_tiles,
                                               softmax_scale * LOG2E, **cx, **opts)
        return out, lse
    grid = (num_m_blocks * batch * hq, )
    gluon_attn_fwd_kernel[grid](q_desc, k_desc, v_desc, out, lse,
                                out.stride(0), out.stride(1), out.stride(2), lse.stride(0), lse.stride(1),
                                sq, sk, hq, hq // hkv, num_m_blocks, softmax_scale * LOG2E,
                                **cx, **opts)
    return out, lse


def _signature(cfg, head_dim, dname):
    BM, BN = cfg["BLOCK_M"], cfg["BLOCK_N"]
    q_blk, kv_blk = [1, 64 if cfg["schedule"] == "ppp" else BM, 1, head_dim], [1, BN, 1, head_dim]

    def td(blk):
        return f"tensordesc<{dname}[{', '.join(map(str, blk))}],{_smem_layout(blk, dname)!r}>"

    sig = {"q_desc": td(q_blk), "k_desc": td(kv_blk), "v_desc": td(kv_blk), "Out": f"*{dname}", "Lse": "*fp32"}
    ppp = cfg["schedule"] == "ppp"
    for name in ("stride_ob", "stride_os", "stride_oh", "stride_lb", "stride_lh", "seqlen_q", "seqlen_k",
                 "heads_q", "group_size", "num_m_blocks") + (("num_tiles", ) if ppp else ()):
        sig[name] = "i32"
    sig["qk_scale_log2"] = "fp32"
    cnames = (("CAUSAL", "BLOCK_M", "BLOCK_N", "HEAD_DIM", "STAGES", "NUM_WG", "Q_BUFS", "PRODUCER_REGS",
               "CONSUMER_REGS", "KV_FA3_ORDER") if ppp else ("CAUSAL", "BLOCK_M", "BLOCK_N", "HEAD_DIM", "STAGES", "PINGPONG",
                                             "PRODUCER_REGS", "CONSUMER_REGS"))
    for name in cnames:
        sig[name] = "constexpr"
    return sig


def compile_aot(arch=90, head_dim=128, causal=False, config=DEFAULT_CONFIG, dtype="bf16", verbose=True,
                dump_dir=None):
    """Compile for GPUTarget("cuda", arch, 32) with no GPU; print and return (compiled, info)."""
    import re
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = CONFIGS[config] if isinstance(config, str) else config
    cx, opts = _kernel_params(cfg, head_dim, causal)
    kern = gluon_attn_fwd_persistent_kernel if cfg["schedule"] == "ppp" else gluon_attn_fwd_kernel
    src = GluonASTSource(fn=kern, signature=_signature(cfg, head_dim, dtype), constexprs=cx,
                         attrs={(i, ): [["tt.divisibility", 16]] for i in range(3, 8)})
    ck = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=opts)
    md = ck.metadata
    ptx = ck.asm["ptx"]
    entry = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)", ptx, re.S)
    params = [p.strip() for p in entry.group(2).split(",")] if entry else []
    regs = None
    if "cubin" in ck.asm:
        regs = getattr(ck, "n_regs", None)
    counts = {k: len(re.findall(k, ptx)) for k in ("wgmma.mma_async", "wgmma.wait_group", "setmaxnreg",
                                                   "cp.async.bulk.tensor", "mbarrier.try_wait",
                                                   "mbarrier.arrive", "bar.sync", "ld.shared", "st.shared")}
    info = dict(name=md.name, num_warps=md.num_warps, shared=md.shared, tensordesc_meta=md.tensordesc_meta,
                n_params=len(params), params=params, ptx_counts=counts,
                setmaxnreg=sorted(set(re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", ptx))),
                ptx_target=re.search(r"\.target\s+(\S+)", ptx).group(1))
    if verbose:
        print(f"== {config} d={head_dim} causal={causal} {dtype} -> sm_{arch}: triton {triton.__version__}")
        for key in ("name", "num_warps", "shared", "ptx_target", "n_params", "setmaxnreg", "ptx_counts"):
            print(f"  {key}: {info[key]}")
        print("  tensordesc_meta:")
        for m in md.tensordesc_meta or []:
            print(f"    {m}")
        print("  .entry params:")
        for p in params:
            print(f"    {p}")
    if dump_dir:
        import os
        os.makedirs(dump_dir, exist_ok=True)
        stem = f"{config}_d{head_dim}_{'causal' if causal else 'full'}"
        for ext in ("ttgir", "ptx"):
            with open(os.path.join(dump_dir, f"{stem}.{ext}"), "w") as f:
                f.write(ck.asm[ext])
    return ck, info


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--dump", default=None)
    a = ap.parse_args()
    for name in a.configs.split(","):
        for d in map(int, a.dims.split(",")):
            if not config_ok(CONFIGS[name], d):
                print(f"== {name} d={d}: skipped (shared memory or config dims)")
                continue
            for causal in (False, True):
                try:
                    compile_aot(90, d, causal, name, dump_dir=a.dump)
                except Exception as e:  # keep going
                    print(f"== {name} d={d} causal={causal}: FAILED {type(e).__name__}: {str(e)[:2000]}")

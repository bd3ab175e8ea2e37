"""The sm_90 backward's dK/dV pass with FlashAttention-3's schedule, written in Gluon, and its form
with dQ fused in.

It replaces attn_bwd_dkdv (kernels/attn_bwd.py) on sm_90 for the plain backward; the pre-pass and the
dQ pass stay the Triton kernels, so the backward keeps its one owner per output and stays bitwise
deterministic. One program per (key block of BLOCK_N = 128 keys, batch, kv head), key block fastest
(programs in flight share a head's Q and dO in L2); under a causal mask, where the first key blocks see
the most query blocks, heaviest first within groups of heads (program_tile, kernels/attn_hopper_common.py).
Warp-specialized:
- a producer warp (24 registers) loads the program's K and V once by TMA, then streams the Q and dO
  tiles of BLOCK_M = 64 query rows through a ring of STAGES shared-memory stages, over every query
  head of the GQA group and every query block that sees the key block; Q and dO have "ready"
  mbarriers of their own (S^T can start before dO lands) and share one "empty" per stage;
- two consumer warpgroups (64 key rows each: the key block is the M side of every product, FA3's
  swapped form; 240 registers through setmaxnreg) compute per query block, as asynchronous wgmma:
      S^T = K Q^T, dP^T = V dO^T                  [BLOCK_N, BLOCK_M], fp32 in registers
      P^T = exp2(S^T * scale * log2(e) - lse)      (staged lse: +inf past seqlen_q and for rows with
                                                    no key; masked only on edge and diagonal blocks)
      dV += P^T dO                                 (P^T from registers, issued before dS is computed)
      dS^T = P^T * (dP^T - delta)
      dK += dS^T Q                                 (dS^T from registers)
  and writes dK (times softmax_scale) and dV once: into K's and V's shared-memory buffers (free once the
  last products have read them), read back 16 bytes a thread and stored coalesced, masked by row
  (store_rows_staged; stored straight from the accumulators' layout, 4-byte pieces in 8 rows per warp
  instruction, they cost 85 us of the d=128 fused pass's 813 at 1k tokens, 5.5 us a program:
  bench/explore/hopper/bwd_breakdown.py, H100). At head dims 64 and 128 the two are partitions of
  their own in ping-pong (_consumer_pp: they take turns issuing S^T and dP^T, so that one's exp2 and
  dS^T work overlaps the other's products); fused at 128 they are one 8-warp partition (_consumer).

At head dim 256 (SPLIT_D) two warpgroups cannot each hold dK and dV of 64 keys: a program takes 64 keys,
the warpgroups split S^T and dP^T along the query columns and dK, dV along d, and exchange P^T and dS^T
through shared memory (dV and dK take them as shared-memory operands). At (192, 128) (WIDE) a program
takes 128 keys, each warpgroup 64 of them whole, with 32 query rows a step (so that dK, three [64, 64]
accumulators, dV and the scores fit the registers), P^T and dS^T staying in registers; Q and K come in
three 64-column boxes (Gluon's shapes are powers of two). The deterministic dQ pass beside both is
attn_bwd_dq_hopper (kernels/attn_bwd_dq_hopper.py).

attn_bwd_fused_hopper is the same program with dQ fused in (FUSED_DQ, head dims 64 and 128), for callers
that allow a non-deterministic backward (aotk_attn_params.deterministic = 0): per query block it also
stores dS^T to shared memory (two buffers), computes dQ = dS K (dS^T read transposed; the two warpgroups
split dQ along d), stages dQ times softmax_scale in shared memory and adds it into an fp32 accumulator
with one TMA reduce-add, FlashAttention-3's dQ path (at 128, dQ's product is issued before dK's so
that dQ is staged while dK's runs: 1.5-3.5% on the d=128 rows). The additions from different key
blocks land in a varying order, so dq is not bitwise reproducible; dK and dV are the same
instructions as the deterministic pass's. The host zeroes the accumulator first and
attn_bwd_dq_convert (kernels/attn_bwd.py) casts it into dq, in place of the Triton dQ pass: 5 matrix
products per block instead of 7. At head dim 64 the consumers do not compute dQ: they store their
halves of dS^T and go on, and a third warpgroup (_dq_worker, 88 registers; the consumers 200)
computes dQ = dS K, stages it and issues the reduce-add, so the dQ path leaves the consumers' critical
path (bench_attn.py, H100: the d=64 fused backward 381 -> 475 TFLOP/s at 16k non-causal). At 128 the
consumers' dK and dV (64 registers each) leave no registers for that warpgroup (32-row sub-steps made
room and measured no faster).

What it covers: every backward but dropout (which has entries of its own, below): masks and windows of
both alignments (the query blocks a key block walks come from the window rule; only blocks crossing a
window's edge or the key length are masked), and, compiled in with EXTRAS, softcap (dS times 1 - tanh^2) and ALiBi; layouts TMA can read,
dense or varlen, head dims 64, 128 and (the deterministic pass only) 256 and (192, 128), GQA, sinks
(they enter through lse only), any lengths. Its arguments are attn_bwd_dkdv's, then descriptors of Q, K,
V and dO over [batch, seqlen, heads * d] (varlen: [1, total, heads * d], each sequence's rows offset by
cu_seqlens; blocks reaching past a sequence's end read the next sequence's rows, which are masked as
keys, have lse = +inf as queries, and are not stored), so the C launcher packs both the same way.
Spills (cuobjdump STACK, bytes per thread, bf16): none at d=64 but the fused EXTRAS rows' 104; at d=128
the ping-pong deterministic pass 104 (loop-invariant scalars reloaded once a step), 288 in its EXTRAS
rows, the fused pass none, 256 in its EXTRAS rows (see _probabilities for why the score modifiers sit in
uniform branches); d=256 8 and (192, 128) 48 in their EXTRAS rows only.

Dropout (attn_bwd_dkdv_hopper_dropout, attn_bwd_fused_hopper_dropout; DROPOUT, head dims 64 and 128, no
softcap or ALiBi): the consumers draw the keep rule of attn_common.dropout_keep for their S^T tile in
registers (_dropout_words_t: 4 Philox4x32-7 calls a thread a 64-query step, once P^T is computed and
before dV's product; then _dropout_keep_t spreads the bytes over the S^T layout), dV takes the kept P^T (scaled by 1 / (1 - p) once,
at the store) and dS^T = P^T * (dP^T * keep / (1 - p) - delta), delta being the pre-pass's rowsum(dO * O)
of the dropped output. The deterministic form runs beside the Triton dQ pass's EXTRAS rows, which draw
the same mask. Stacks (bf16): d=64 none, fused 64; d=128 248, fused 80. On the H200 (bench_attn.py
--features, 4096 tokens, p 0.1, the deterministic form): 198 / 269 TFLOP/s at d64 / d128, 0.60 / 0.65 of
the plain backward, against 144 / 188 on the Triton kernels.

Measured through the JIT on the H100 (bench/explore/hopper/gluon_attn_bwd.py, "split _rs": this
kernel with aotk's pre-pass and dQ pass, against the three Triton kernels, bf16, 16k tokens): the
whole backward 0.76x cuDNN (geomean over the d64/d128 grid) against 0.71x; the dK/dV kernel alone at
d=128 16k 7.62 ms against 8.68.
In the library's benchmark (bench/bench_attn.py, H100, bf16 d64/d128 grid, 2026-11-25): the fused
backward 0.89x cuDNN, the deterministic one 0.80x (geomeans over 24 rows).

Free of torch and driver calls: imported on a machine with no GPU.
"""

from triton._C.libtriton import ir as _ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin as _gluon_builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from attn_hopper_common import (FLAG_ALIBI, FLAG_SOFTCAP, FLAG_TOP_LEFT, LOG2E, philox7, program_tile, rng_key,
                                sequence, store_rows_staged, tanh_approx, thread_barrier, tma_load, window_bounds)


@_gluon_builtin
def _tma_reduce_add_36(tensor_desc, coord, src, _semantic=None):
    # TMA reduce-add from shared memory into global memory (cp.reduce.async.bulk.tensor.add.f32): Gluon
    # 3.6's builder has the op (ttng.async_tma_reduce), its hopper.tma module does not export it (newer
    # releases do, as async_atomic_add).
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


_tma_reduce_add = getattr(tma, "async_atomic_add", None) or _tma_reduce_add_36


@gluon.jit
def _producer(desc_q, desc_do, desc_k, desc_v, q_bufs, do_bufs, k_smem, v_smem, bars, rows, n_iters,
              HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr):
    # rows: the view's batch coordinate, the program's first key row, its first query row (the
    # sequence's start plus m_lo), the kv head, the group size and the query blocks per head: as few
    # values as the loop needs, within the producer's 24 registers.
    # Q and K come in QK_CHUNKS boxes side by side along d (three of 64 columns at head dim 192, which
    # is not a power of two; else one), buffers c, and s * QK_CHUNKS + c of stage s.
    QK_BOX: gl.constexpr = desc_q.block_type.shape[2]
    QK_CHUNKS: gl.constexpr = HEAD_DIM // QK_BOX
    HEAD_DIM_V: gl.constexpr = desc_v.block_type.shape[2]
    kv_bar, q_ready, do_ready, qdo_empty = bars
    bc, k_row, q_row, hkv, group_size, n_m = rows
    mbarrier.expect(kv_bar, QK_CHUNKS * desc_k.block_type.nbytes + desc_v.block_type.nbytes)
    for c in gl.static_range(QK_CHUNKS):
        tma_load(desc_k, [bc, k_row, hkv * HEAD_DIM + c * QK_BOX], kv_bar, k_smem.index(c))
    tma_load(desc_v, [bc, k_row, hkv * HEAD_DIM_V], kv_bar, v_smem)
    for it in range(n_iters):
        s = it % STAGES
        hq = hkv * group_size + it // n_m
        m0 = q_row + (it % n_m) * BLOCK_M
        # A fresh mbarrier counts as having completed the phase before phase 0: parity 1 passes at once.
        mbarrier.wait(qdo_empty.index(s), ((it // STAGES) & 1) ^ 1)
        mbarrier.expect(q_ready.index(s), QK_CHUNKS * desc_q.block_type.nbytes)
        for c in gl.static_range(QK_CHUNKS):
            tma_load(desc_q, [bc, m0, hq * HEAD_DIM + c * QK_BOX], q_ready.index(s), q_bufs.index(s * QK_CHUNKS + c))
        mbarrier.expect(do_ready.index(s), desc_do.block_type.nbytes)
        tma_load(desc_do, [bc, m0, hq * HEAD_DIM_V], do_ready.index(s), do_bufs.index(s))


@gluon.jit
def _probabilities(st, tile, qk_scale_log2, softcap_scale, softcap_log2, slope_log2, dtype: gl.constexpr,
                   p_layout: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SOFTCAP: gl.constexpr,
                   ALIBI: gl.constexpr, SPLIT_D: gl.constexpr):
    """P^T for S^T = K Q^T (key j the row, query i the column): the forward's scores
    (attn_common.modified_scores: softcap when SOFTCAP, then ALiBi when ALIBI with a nonzero slope),
    exp2 against the staged lse, masked where the block crosses the key length or a window's bounds.
    Returns P^T in fp32 for dS^T (times 1 - tanh^2 under softcap: the chain rule's factor, the scale
    being applied to dK and dQ) and P^T as dV's operand: in registers, or under SPLIT_D in the score
    layout, for the shared-memory copy both warpgroups read."""
    keys, cols, lse, seqlen_k, n0, m0, diag, lo_rel, hi_rel = tile
    if SOFTCAP:
        t = tanh_approx(st * softcap_scale)
        s_mod = t * softcap_log2
    else:
        s_mod = st * qk_scale_log2
    if ALIBI:
        # Converted before the absolute value, which folds into the FFMA (as in the forward).
        distance = gl.abs((gl.expand_dims(cols + diag, 0) - gl.expand_dims(keys, 1)).to(gl.float32))
        s_mod = s_mod - slope_log2 * distance
    pt = gl.exp2(s_mod - gl.expand_dims(lse, 0))
    # Keys past seqlen_k read zeros (TMA), so exp2(0 - lse) would not be 0: mask them, and the blocks that
    # reach past a window's bounds (the causal diagonal among them). Rows past seqlen_q have lse = +inf.
    need_mask = (n0 + BLOCK_N > seqlen_k) | (n0 + BLOCK_N - 1 > m0 + diag + hi_rel) | \
                (n0 < m0 + BLOCK_M - 1 + diag + lo_rel)
    if need_mask:
        # Key j of row i: j < seqlen_k and i + diag + lo_rel <= j <= i + diag + hi_rel.
        key_col = gl.expand_dims(keys, 1)
        ok = (key_col < seqlen_k) & (key_col <= gl.expand_dims(cols + diag + hi_rel, 0)) & \
             (key_col >= gl.expand_dims(cols + diag + lo_rel, 0))
        pt = gl.where(ok, pt, 0.0)
    if SPLIT_D:
        pt_op = pt.to(dtype)
    else:
        pt_op = gl.convert_layout(pt.to(dtype), p_layout)
    if SOFTCAP:
        pt = pt * (1.0 - t * t)
    return pt, pt_op


@gluon.jit
def _step_probabilities(st, tile, b, hq, extras, qk_scale_log2, dtype: gl.constexpr, p_layout: gl.constexpr,
                        BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, EXTRAS: gl.constexpr, SPLIT_D: gl.constexpr):
    """_probabilities for one step, the score modifiers chosen by `flags` in the EXTRAS rows: each
    branch computes P^T whole (the softcap's tanh stays inside its branch: a value carried across the
    join spilled 344 bytes at d=128)."""
    flags, AlibiSlopes, stride_ab, softcap_scale, softcap_log2 = extras
    slope_log2 = qk_scale_log2 * 0.0
    if EXTRAS:
        if (flags & FLAG_ALIBI) != 0:
            slope_log2 = gl.load(AlibiSlopes + b.to(gl.int64) * stride_ab + hq) * LOG2E
        if (flags & FLAG_SOFTCAP) != 0:
            pt, pt_op = _probabilities(st, tile, qk_scale_log2, softcap_scale, softcap_log2, slope_log2, dtype,
                                       p_layout, BLOCK_N, BLOCK_M, True, True, SPLIT_D)
        else:
            pt, pt_op = _probabilities(st, tile, qk_scale_log2, softcap_scale, softcap_log2, slope_log2, dtype,
                                       p_layout, BLOCK_N, BLOCK_M, False, True, SPLIT_D)
    else:
        pt, pt_op = _probabilities(st, tile, qk_scale_log2, softcap_scale, softcap_log2, slope_log2, dtype,
                                   p_layout, BLOCK_N, BLOCK_M, False, False, SPLIT_D)
    return pt, pt_op


@gluon.jit
def _step_statistics(LseLog2, Delta, b, heads_q, hq, stats_stride, m0, cols0):
    # A step's query rows and their staged lse * log2(e) and delta: rows of stats_stride floats, padded
    # with neutral values, so the loads need no mask.
    stats_row = (b * heads_q + hq).to(gl.int64) * stats_stride
    cols = m0 + cols0
    return cols, gl.load(LseLog2 + stats_row + cols), gl.load(Delta + stats_row + cols)


@gluon.jit
def _dropout_key(dropout, DROPOUT: gl.constexpr):
    # A program's RNG key and offset (kernels/attn_hopper_common.rng_key) and the byte threshold, once.
    RngState, dropout_threshold, dropout_scale = dropout
    if DROPOUT:
        k0, k1, offset_lo = rng_key(RngState)
    else:
        k0 = dropout_threshold.to(gl.uint32, bitcast=True)
        k1 = k0
        offset_lo = k0
    return k0, k1, offset_lo, dropout_threshold.to(gl.uint32, bitcast=True)


@gluon.jit
def _dropout_step(rng, stream, dropout):
    # A step's dropout arguments for _step_gradients: the key, offset and threshold, the stream (batch *
    # heads_q + query head) and the scale 1 / (1 - p).
    return rng[0], rng[1], rng[2], rng[3], stream.to(gl.uint32, bitcast=True), dropout[2]


@gluon.jit
def _dropout_words_t(n0, m0, drop, ROWS: gl.constexpr):
    # The Philox half of the keep rule (attn_common.dropout_keep; docs/design.md, "Dropout") for S^T's keys
    # n0 .. n0 + ROWS - 1 (rows; n0 a multiple of 16) and queries m0 .. m0 + 63 (columns; m0 a multiple of 16):
    # 4 calls a thread, in a [ROWS, 8] layout of the 16 x 8 wgmma accumulator shape, element (r, k) with
    # r = 16 w + 8 a' + m (warp w, m = lane / 4) and k = 2 p + c' (p = lane % 4) standing for the counter of
    # key group 4 J + q (J = (n0 + r) / 16, q = m / 2) and query group 4 I + p (I = m0 / 16 + 2 a' + c'). The
    # key's bit c = m & 1 picks the words: c (the query's e = 0) and 2 + c (e = 1).
    k0, k1, offset_lo, threshold, stream = drop
    L8: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[ROWS // 16, 1],
                                                 instr_shape=[16, 8, 16])
    r = gl.expand_dims(gl.arange(0, ROWS, layout=gl.SliceLayout(1, L8)), 1)
    k = gl.expand_dims(gl.arange(0, 8, layout=gl.SliceLayout(0, L8)), 0)
    zero = gl.zeros([ROWS, 8], gl.int32, L8)
    key_counter = (zero + 4 * ((n0 + r) >> 4) + ((r & 7) >> 1)).to(gl.uint32, bitcast=True)
    query_counter = (zero + 4 * ((m0 >> 4) + 2 * ((r >> 3) & 1) + (k & 1)) + (k >> 1)).to(gl.uint32, bitcast=True)
    w0, w1, w2, w3 = philox7(k0, k1, key_counter, query_counter, stream, offset_lo)
    c = ((zero + r) & 1) != 0
    return gl.where(c, w1, w0), gl.where(c, w3, w2)


@gluon.jit
def _dropout_keep_t(words, threshold, s_layout: gl.constexpr, ROWS: gl.constexpr):
    # The keep mask of S^T [ROWS keys, 64 queries] from _dropout_words_t's words: each call's 8 elements a
    # thread are bytes 2 a + b of its two words (e), key 16 J + 8 b + 2 q + c and query 16 I + 8 a + 2 p + e,
    # spread by join, reshape and permute in registers.
    x = gl.join(words[0], words[1])
    # Bytes 0 .. 3 as (b, a): join adds a last dimension, so byte 2 a + b lands at [..., b, a].
    x = gl.join(gl.join(x & 255, (x >> 8) & 255), gl.join((x >> 16) & 255, x >> 24))
    # [w, a', m, p, c', e, b, a] -> rows (w, b, m), columns (a', c', a, p, e).
    x = gl.permute(x.reshape([ROWS // 16, 2, 8, 4, 2, 2, 2, 2]), [0, 6, 2, 1, 4, 7, 3, 5]).reshape([ROWS, 64])
    return gl.convert_layout(x >= threshold, s_layout)


@gluon.jit
def _step_gradients(st_token, dpt_token, do2, dv, statistics, tile_rows, extras, qk_scale_log2, drop,
                    dtype: gl.constexpr, s_layout: gl.constexpr, p_layout: gl.constexpr, ROWS: gl.constexpr,
                    BLOCK_M: gl.constexpr, EXTRAS: gl.constexpr, DROPOUT: gl.constexpr):
    """The rest of a step of the head-dim 64 and 128 consumers once S^T (st_token) and dP^T (dpt_token) are
    issued: the rows' statistics while the products run, P^T, dV += P^T dO issued, dS^T. Returns dV's
    token, dS^T in fp32, and P^T's and dS^T's register operands (P^T's to be waited for with dV's token;
    dS^T's is dK += dS^T Q's A operand, which the caller issues where its schedule needs it).
    DROPOUT (drop: the RNG key, the threshold, the stream and the scale): dV takes the kept P^T (the
    scale 1 / (1 - p) is applied to dV once, at the end) and dS^T = P^T * (dP^T * keep * scale - delta)."""
    LseLog2, Delta, b, heads_q, hq, stats_stride = statistics
    keys, cols0, seqlen_k, n0, m0, diag, lo_rel, hi_rel = tile_rows
    cols, lse, delta = _step_statistics(LseLog2, Delta, b, heads_q, hq, stats_stride, m0, cols0)

    st = warpgroup_mma_wait(1, deps=(st_token, ))
    tile = (keys, cols, lse, seqlen_k, n0, m0, diag, lo_rel, hi_rel)
    pt, pt_op = _step_probabilities(st, tile, b, hq, extras, qk_scale_log2, dtype, p_layout, ROWS, BLOCK_M,
                                    EXTRAS, False)
    if DROPOUT:
        gl.static_assert(BLOCK_M == 64, "the backward's dropout spreading is written for 64-query steps")
        words = _dropout_words_t(n0, m0, (drop[0], drop[1], drop[2], drop[3], drop[4]), ROWS)
        keep = _dropout_keep_t(words, drop[3], s_layout, ROWS)
        pt_op = gl.convert_layout(gl.where(keep, pt, 0.0).to(dtype), p_layout)
    dpt = warpgroup_mma_wait(0, deps=(dpt_token, ))
    dv_token = warpgroup_mma(pt_op, do2, dv, is_async=True)
    if DROPOUT:
        dpt = gl.where(keep, dpt * drop[5], 0.0)
    dst = pt * (dpt - gl.expand_dims(delta, 0))
    ds_op = gl.convert_layout(dst.to(dtype), p_layout)
    return dv_token, dst, pt_op, ds_op


@gluon.jit
def _consumer(q_bufs, do_bufs, k_smem, v_smem, bars, dq_handoff, coords, n_iters, LseLog2, Delta, dk_base, dv_base,
              stride_dks, stride_dvs, seqlen_k, window, diag, heads_q, stats_stride, softmax_scale, qk_scale_log2,
              extras, dropout, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
              STAGES: gl.constexpr, EXTRAS: gl.constexpr, DROPOUT: gl.constexpr):
    """The fused pass's consumers at head dim 128: one partition of two warpgroups (64 key rows each),
    which also compute dQ (their dK and dV take 128 registers a thread, leaving none for a dQ
    warpgroup; see _dq_worker)."""
    kv_bar, q_ready, do_ready, qdo_empty = bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    lo_rel, hi_rel = window
    dtype: gl.constexpr = q_bufs.dtype
    # Key rows are the M side: [BLOCK_N, BLOCK_M] scores and [BLOCK_N, HEAD_DIM] dK, dV over 8 warps.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    # dQ [BLOCK_M = 64, HEAD_DIM]: the two warpgroups split it along d.
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                        instr_shape=[16, HEAD_DIM // 2, 16])
    keys = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    k2 = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM])
    v2 = v_smem.reshape([BLOCK_N, HEAD_DIM])
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
    ds_bufs, dq_smem, desc_dq = dq_handoff

    rng = _dropout_key(dropout, DROPOUT)
    # Even a program with no query block waits for K and V: its shared memory must not be left while
    # the copies are in flight.
    mbarrier.wait(kv_bar, 0)
    for it in range(n_iters):
        s = it % STAGES
        phase = (it // STAGES) & 1
        hq = hkv * group_size + it // n_m
        m0 = m_lo + (it % n_m) * BLOCK_M
        drop = _dropout_step(rng, b * heads_q + hq, dropout)
        q2 = q_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
        do2 = do_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
        mbarrier.wait(q_ready.index(s), phase)
        st_token = warpgroup_mma(k2, q2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        mbarrier.wait(do_ready.index(s), phase)
        dpt_token = warpgroup_mma(v2, do2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dv_token, dst, pt_op, ds_op = _step_gradients(
            st_token, dpt_token, do2, dv, (LseLog2, Delta, b, heads_q, hq, stats_stride),
            (keys, cols0, seqlen_k, n0, m0, diag, lo_rel, hi_rel), extras, qk_scale_log2, drop, dtype, s_layout,
            p_layout, BLOCK_N, BLOCK_M, EXTRAS, DROPOUT)
        # dQ = dS K needs dS (not dS^T) as the A operand: dS^T goes to shared memory and is read
        # transposed. Two buffers: this step's barrier orders the readers of buffer it % 2 in step
        # it - 2 (their wgmma waited) before the store. The previous step's reduce-add has read
        # dq_smem once the issuing thread's wait passes; the barrier tells every thread.
        tma.store_wait(0)
        ds = ds_bufs.index(it % 2)
        ds.store(dst.to(dtype))
        fence_async_shared()
        thread_barrier()
        # dQ's product before dK's, so that dQ is staged while dK's runs (wgmma completes in order: one
        # group outstanding means dV's and dQ's are done).
        dq_token = warpgroup_mma(ds.permute((1, 0)), k2, zero_dq, use_acc=False, is_async=True)
        dk_token = warpgroup_mma(ds_op, q2, dk, is_async=True)
        dv, dq = warpgroup_mma_wait(1, deps=(dv_token, dq_token))
        # FlashAttention-3's dQ path: the block to shared memory, then one bulk reduce-add into the
        # fp32 accumulator [batch * heads_q, stats_stride, HEAD_DIM] (waited for at the next step's
        # dS^T store). Releasing the stage (a barrier of the consumer warps, then one arrival) once dK's
        # product has read Q also orders every thread's dQ stores before the reduce is issued.
        dq_smem.reshape([BLOCK_M, HEAD_DIM]).store(dq * softmax_scale)
        fence_async_shared()
        dk, pt_op, ds_op = warpgroup_mma_wait(0, deps=(dk_token, pt_op, ds_op))
        mbarrier.arrive(qdo_empty.index(s))
        _tma_reduce_add(desc_dq, [b * heads_q + hq, m0, 0], dq_smem)
    tma.store_wait(0)  # the last reduce-add has read shared memory before the program exits

    # dK and dV, written once (rows past seqlen_k are not), through K's and V's buffers: the barrier
    # tells every warp that both warpgroups' last products have read them.
    thread_barrier()
    store_rows_staged(dk_base, stride_dks, n0, seqlen_k, 0, (dk * softmax_scale).to(dtype), k2, BLOCK_N, HEAD_DIM, 8)
    if DROPOUT:
        dv = dv * dropout[2]
    store_rows_staged(dv_base, stride_dvs, n0, seqlen_k, 0, dv.to(dtype), v2, BLOCK_N, HEAD_DIM, 8)


@gluon.jit
def _consumer_pp(q_bufs, do_bufs, k_smem, v_smem, bars, pp_bars, dq_handoff, coords, n_iters, LseLog2, Delta,
                 dk_base, dv_base, stride_dks, stride_dvs, seqlen_k, window, diag, heads_q, stats_stride,
                 softmax_scale, qk_scale_log2, extras, dropout, WG: gl.constexpr, FUSED_DQ: gl.constexpr,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                 EXTRAS: gl.constexpr, DROPOUT: gl.constexpr):
    """One of the two consumer warpgroups at head dims 64 and 128, in ping-pong: warpgroup WG owns key
    rows [WG * 64, WG * 64 + 64) of the program's BLOCK_N = 128 and the two take turns issuing S^T and
    dP^T, so that one's exp2 and dS^T work runs while the other's products occupy the tensor cores.
    Fused (head dim 64): each stores its half of dS^T to shared memory for the dQ warpgroup."""
    kv_bar, q_ready, do_ready, qdo_empty = bars
    turn, ds_ready, ds_free = pp_bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    lo_rel, hi_rel = window
    dtype: gl.constexpr = q_bufs.dtype
    ROWS: gl.constexpr = BLOCK_N // 2
    FIRST: gl.constexpr = 1 if WG == 0 else 0  # warpgroup 0 takes the first turn
    OTHER: gl.constexpr = 1 - WG
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    n0w = n0 + WG * ROWS
    keys = n0w + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    k_all = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM])
    k2 = k_all.slice(WG * ROWS, ROWS)
    v2 = v_smem.reshape([BLOCK_N, HEAD_DIM]).slice(WG * ROWS, ROWS)
    zero_s = gl.zeros([ROWS, BLOCK_M], gl.float32, s_layout)
    dk = gl.zeros([ROWS, HEAD_DIM], gl.float32, kv_layout)
    dv = gl.zeros([ROWS, HEAD_DIM], gl.float32, kv_layout)
    ds_bufs, dq_bufs, desc_dq = dq_handoff
    turn_phase = 0

    rng = _dropout_key(dropout, DROPOUT)
    mbarrier.wait(kv_bar, 0)
    for it in range(n_iters):
        s = it % STAGES
        phase = (it // STAGES) & 1
        hq = hkv * group_size + it // n_m
        m0 = m_lo + (it % n_m) * BLOCK_M
        drop = _dropout_step(rng, b * heads_q + hq, dropout)
        q2 = q_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
        do2 = do_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
        # Both tiles before the turn: a warpgroup holding the turn must not wait on a load.
        mbarrier.wait(q_ready.index(s), phase)
        mbarrier.wait(do_ready.index(s), phase)
        mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
        st_token = warpgroup_mma(k2, q2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        dpt_token = warpgroup_mma(v2, do2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        mbarrier.arrive(turn.index(OTHER))
        turn_phase ^= 1
        dv_token, dst, pt_op, ds_op = _step_gradients(
            st_token, dpt_token, do2, dv, (LseLog2, Delta, b, heads_q, hq, stats_stride),
            (keys, cols0, seqlen_k, n0w, m0, diag, lo_rel, hi_rel), extras, qk_scale_log2, drop, dtype, s_layout,
            p_layout, ROWS, BLOCK_M, EXTRAS, DROPOUT)
        dk_token = warpgroup_mma(ds_op, q2, dk, is_async=True)
        if FUSED_DQ:
            # dQ = dS K over both warpgroups' keys is the dQ warpgroup's (_dq_worker): each consumer stores
            # its half of dS^T into buffer it % 2, once step it - 2's dQ product has read it (ds_free),
            # and arrives on ds_ready.
            half = it % 2
            ds = ds_bufs.index(half)
            mbarrier.wait(ds_free.index(half), ((it // 2) & 1) ^ 1)
            ds.slice(WG * ROWS, ROWS).store(dst.to(dtype))
            fence_async_shared()
            mbarrier.arrive(ds_ready.index(half))
        dv, dk, pt_op, ds_op = warpgroup_mma_wait(0, deps=(dv_token, dk_token, pt_op, ds_op))
        mbarrier.arrive(qdo_empty.index(s))
    # dK and dV through this warpgroup's rows of K and V, which only its own products read (the barrier:
    # every warp's have) but for K the dQ warpgroup's too: its last dQ product released the last dS^T
    # buffer (ds_free) after reading K.
    thread_barrier()
    if DROPOUT:
        dv = dv * dropout[2]
    store_rows_staged(dv_base, stride_dvs, n0w, seqlen_k, 0, dv.to(dtype), v2, ROWS, HEAD_DIM, 4)
    if FUSED_DQ:
        if n_iters > 0:
            last = n_iters - 1
            mbarrier.wait(ds_free.index(last % 2), (last // 2) & 1)
    store_rows_staged(dk_base, stride_dks, n0w, seqlen_k, 0, (dk * softmax_scale).to(dtype), k2, ROWS, HEAD_DIM, 4)


@gluon.jit
def _dq_worker(ds_bufs, dq_bufs, k_smem, kv_bar, pp_bars, coords, n_iters, desc_dq, heads_q, softmax_scale,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr):
    """The fused pass's dQ warpgroup (head dim 64): per step, once both consumers have stored their
    halves of dS^T (ds_ready), dQ = dS K over the program's BLOCK_N keys (dS^T read transposed), the
    buffer handed back (ds_free), dQ times softmax_scale staged in buffer it % 2 and reduce-added into
    the fp32 accumulator. The consumers never wait for dQ."""
    turn, ds_ready, ds_free = pp_bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    gl.static_assert(HEAD_DIM == 64, "the dQ warpgroup is built for head dim 64")
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    k_all = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM])
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
    mbarrier.wait(kv_bar, 0)
    for it in range(n_iters):
        half = it % 2
        hq = hkv * group_size + it // n_m
        m0 = m_lo + (it % n_m) * BLOCK_M
        ds = ds_bufs.index(half)
        mbarrier.wait(ds_ready.index(half), (it // 2) & 1)
        dq_token = warpgroup_mma(ds.permute((1, 0)), k_all, zero_dq, use_acc=False, is_async=True)
        dq = warpgroup_mma_wait(0, deps=(dq_token, ))
        mbarrier.arrive(ds_free.index(half))
        # Buffer it % 2 was last read by step it - 2's reduce-add: with at most the previous step's one
        # outstanding, it has (the issuing thread's wait; the barrier tells every thread).
        dq_buf = dq_bufs.index(half)
        tma.store_wait(1)
        thread_barrier()
        dq_buf.reshape([BLOCK_M, HEAD_DIM]).store(dq * softmax_scale)
        fence_async_shared()
        thread_barrier()
        _tma_reduce_add(desc_dq, [b * heads_q + hq, m0, 0], dq_buf)
    tma.store_wait(0)  # the last reduce-adds have read shared memory before the program exits


@gluon.jit
def _scores_t(k_smem, q_bufs, q_first, zero_s, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, CHUNKS: gl.constexpr):
    # S^T = K Q^T as asynchronous wgmma, one per head-dim chunk (three at head dim 192), accumulated in
    # order.
    BOX: gl.constexpr = q_bufs.shape[3]
    k = k_smem.index(0).reshape([BLOCK_N, BOX])
    q_t = q_bufs.index(q_first).reshape([BLOCK_M, BOX]).permute((1, 0))
    token = warpgroup_mma(k, q_t, zero_s, use_acc=False, is_async=True)
    for c in gl.static_range(1, CHUNKS):
        k = k_smem.index(c).reshape([BLOCK_N, BOX])
        q_t = q_bufs.index(q_first + c).reshape([BLOCK_M, BOX]).permute((1, 0))
        token = warpgroup_mma(k, q_t, token, is_async=True)
    return token


@gluon.jit
def _step_scores(it, q_bufs, do_bufs, k_smem, v2, ready, coords, zero_s, keys, cols0, LseLog2, Delta, heads_q,
                 stats_stride, bounds, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 QK_CHUNKS: gl.constexpr):
    """The start of a step of the d=256 and (192, 128) consumers: its stage and query block, S^T and dP^T
    issued as soon as Q and dO land, the rows' staged statistics while they run, S^T waited for.
    Returns the stage, the query head, dO's tile, dP^T's token, S^T, the tile for _probabilities and
    delta."""
    q_ready, do_ready = ready
    b, n0, hkv, group_size, m_lo, n_m = coords
    seqlen_k, diag, lo_rel, hi_rel = bounds
    HEAD_DIM_V: gl.constexpr = v2.shape[1]
    s = it % STAGES
    phase = (it // STAGES) & 1
    hq = hkv * group_size + it // n_m
    m0 = m_lo + (it % n_m) * BLOCK_M
    do2 = do_bufs.index(s).reshape([BLOCK_M, HEAD_DIM_V])
    mbarrier.wait(q_ready.index(s), phase)
    st_token = _scores_t(k_smem, q_bufs, s * QK_CHUNKS, zero_s, BLOCK_N, BLOCK_M, QK_CHUNKS)
    mbarrier.wait(do_ready.index(s), phase)
    dpt_token = warpgroup_mma(v2, do2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    cols, lse, delta = _step_statistics(LseLog2, Delta, b, heads_q, hq, stats_stride, m0, cols0)
    st = warpgroup_mma_wait(1, deps=(st_token, ))
    tile = (keys, cols, lse, seqlen_k, n0, m0, diag, lo_rel, hi_rel)
    return s, hq, do2, dpt_token, st, tile, delta


@gluon.jit
def _consumer_split(q_bufs, do_bufs, k_smem, v_smem, bars, ds_bufs, p_bufs, coords, n_iters, LseLog2, Delta, dk_base,
                    dv_base, stride_dks, stride_dvs, seqlen_k, window, diag, heads_q, stats_stride, softmax_scale,
                    qk_scale_log2, extras, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                    STAGES: gl.constexpr, EXTRAS: gl.constexpr):
    """The consumers at head dim 256 (SPLIT_D): BLOCK_N = 64 key rows, one warpgroup's M side. The two
    warpgroups split S^T and dP^T along the query columns and dK, dV along d; each holds half of P^T's
    and dS^T's columns and needs all of them (the contraction of dV and dK), so both go through shared
    memory (two buffers each) and dV and dK take them as shared-memory operands. (This form ran (192,
    128) too, at 0.68-0.82x cuDNN causal; _consumer_wide measured faster there.)"""
    kv_bar, q_ready, do_ready, qdo_empty = bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    lo_rel, hi_rel = window
    dtype: gl.constexpr = q_bufs.dtype
    QK_BOX: gl.constexpr = q_bufs.shape[3]
    QK_CHUNKS: gl.constexpr = HEAD_DIM // QK_BOX
    HEAD_DIM_V: gl.constexpr = v_smem.shape[2]
    gl.static_assert(QK_CHUNKS == 1, "head dim 256: Q and K in one box")
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, BLOCK_M // 2, 16])
    dk_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                        instr_shape=[16, QK_BOX // 2, 16])
    dv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                        instr_shape=[16, HEAD_DIM_V // 2, 16])
    keys = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    v2 = v_smem.reshape([BLOCK_N, HEAD_DIM_V])
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    dk0 = gl.zeros([BLOCK_N, QK_BOX], gl.float32, dk_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM_V], gl.float32, dv_layout)

    # Even a program with no query block waits for K and V: its shared memory must not be left while
    # the copies are in flight.
    mbarrier.wait(kv_bar, 0)
    for it in range(n_iters):
        s, hq, do2, dpt_token, st, tile, delta = _step_scores(
            it, q_bufs, do_bufs, k_smem, v2, (q_ready, do_ready), coords, zero_s, keys, cols0, LseLog2, Delta,
            heads_q, stats_stride, (seqlen_k, diag, lo_rel, hi_rel), BLOCK_M, BLOCK_N, STAGES, QK_CHUNKS)
        pt, pt_op = _step_probabilities(st, tile, b, hq, extras, qk_scale_log2, dtype, s_layout, BLOCK_N, BLOCK_M,
                                        EXTRAS, True)
        # The barrier after a store also tells every thread that both warpgroups have waited for step
        # it - 1's products, the last readers of the buffers step it + 1 will write.
        p_buf = p_bufs.index(it % 2)
        p_buf.store(pt_op)
        fence_async_shared()
        thread_barrier()
        dv_token = warpgroup_mma(p_buf, do2, dv, is_async=True)
        dpt = warpgroup_mma_wait(1, deps=(dpt_token, ))
        dst = pt * (dpt - gl.expand_dims(delta, 0))
        ds = ds_bufs.index(it % 2)
        ds.store(dst.to(dtype))
        fence_async_shared()
        thread_barrier()
        q_first = s * QK_CHUNKS
        dk0_token = warpgroup_mma(ds, q_bufs.index(q_first).reshape([BLOCK_M, QK_BOX]), dk0, is_async=True)
        dv, dk0 = warpgroup_mma_wait(0, deps=(dv_token, dk0_token))
        mbarrier.arrive(qdo_empty.index(s))

    # dK (times softmax_scale) and dV, written once (rows past seqlen_k are not), through K's and V's
    # buffers once both warpgroups' last products have read them (the barrier).
    thread_barrier()
    store_rows_staged(dk_base, stride_dks, n0, seqlen_k, 0, (dk0 * softmax_scale).to(dtype),
                      k_smem.index(0).reshape([BLOCK_N, QK_BOX]), BLOCK_N, QK_BOX, 8)
    store_rows_staged(dv_base, stride_dvs, n0, seqlen_k, 0, dv.to(dtype), v2, BLOCK_N, HEAD_DIM_V, 8)


@gluon.jit
def _consumer_wide(q_bufs, do_bufs, k_smem, v_smem, bars, coords, n_iters, LseLog2, Delta, dk_base, dv_base,
                   stride_dks, stride_dvs, seqlen_k, window, diag, heads_q, stats_stride, softmax_scale,
                   qk_scale_log2, extras, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                   STAGES: gl.constexpr, EXTRAS: gl.constexpr):
    """(192, 128) with 128-key programs: each warpgroup owns 64 key rows whole (P^T and dS^T stay in
    registers as wgmma A operands), dK in three [BLOCK_N, 64] accumulators and dV [BLOCK_N, 128];
    BLOCK_M = 32 query rows per step keep the scores small enough for the registers."""
    kv_bar, q_ready, do_ready, qdo_empty = bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    lo_rel, hi_rel = window
    dtype: gl.constexpr = q_bufs.dtype
    QK_BOX: gl.constexpr = q_bufs.shape[3]
    QK_CHUNKS: gl.constexpr = HEAD_DIM // QK_BOX
    HEAD_DIM_V: gl.constexpr = v_smem.shape[2]
    gl.static_assert(QK_CHUNKS == 3, "(192, 128) only")
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    dk_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                        instr_shape=[16, QK_BOX, 16])
    dv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                        instr_shape=[16, HEAD_DIM_V, 16])
    pv_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dv_layout, k_width=2)
    pk_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk_layout, k_width=2)
    keys = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    v2 = v_smem.reshape([BLOCK_N, HEAD_DIM_V])
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    dk0 = gl.zeros([BLOCK_N, QK_BOX], gl.float32, dk_layout)
    dk1 = gl.zeros([BLOCK_N, QK_BOX], gl.float32, dk_layout)
    dk2 = gl.zeros([BLOCK_N, QK_BOX], gl.float32, dk_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM_V], gl.float32, dv_layout)
    mbarrier.wait(kv_bar, 0)
    for it in range(n_iters):
        s, hq, do2, dpt_token, st, tile, delta = _step_scores(
            it, q_bufs, do_bufs, k_smem, v2, (q_ready, do_ready), coords, zero_s, keys, cols0, LseLog2, Delta,
            heads_q, stats_stride, (seqlen_k, diag, lo_rel, hi_rel), BLOCK_M, BLOCK_N, STAGES, QK_CHUNKS)
        pt, pt_op = _step_probabilities(st, tile, b, hq, extras, qk_scale_log2, dtype, pv_layout, BLOCK_N, BLOCK_M,
                                        EXTRAS, False)
        dpt = warpgroup_mma_wait(0, deps=(dpt_token, ))
        dv_token = warpgroup_mma(pt_op, do2, dv, is_async=True)
        dst = pt * (dpt - gl.expand_dims(delta, 0))
        ds_op = gl.convert_layout(dst.to(dtype), pk_layout)
        q_first = s * QK_CHUNKS
        dk0_token = warpgroup_mma(ds_op, q_bufs.index(q_first).reshape([BLOCK_M, QK_BOX]), dk0, is_async=True)
        dk1_token = warpgroup_mma(ds_op, q_bufs.index(q_first + 1).reshape([BLOCK_M, QK_BOX]), dk1, is_async=True)
        dk2_token = warpgroup_mma(ds_op, q_bufs.index(q_first + 2).reshape([BLOCK_M, QK_BOX]), dk2, is_async=True)
        dv, dk0, dk1, dk2, pt_op, ds_op = warpgroup_mma_wait(0, deps=(dv_token, dk0_token, dk1_token, dk2_token,
                                                                         pt_op, ds_op))
        mbarrier.arrive(qdo_empty.index(s))
    # dK's three column boxes and dV through K's and V's buffers, once every warp's last products have
    # read them (the barrier).
    thread_barrier()
    store_rows_staged(dk_base, stride_dks, n0, seqlen_k, 0, (dk0 * softmax_scale).to(dtype),
                      k_smem.index(0).reshape([BLOCK_N, QK_BOX]), BLOCK_N, QK_BOX, 8)
    store_rows_staged(dk_base, stride_dks, n0, seqlen_k, QK_BOX, (dk1 * softmax_scale).to(dtype),
                      k_smem.index(1).reshape([BLOCK_N, QK_BOX]), BLOCK_N, QK_BOX, 8)
    store_rows_staged(dk_base, stride_dks, n0, seqlen_k, 2 * QK_BOX, (dk2 * softmax_scale).to(dtype),
                      k_smem.index(2).reshape([BLOCK_N, QK_BOX]), BLOCK_N, QK_BOX, 8)
    store_rows_staged(dv_base, stride_dvs, n0, seqlen_k, 0, dv.to(dtype), v2, BLOCK_N, HEAD_DIM_V, 8)


@gluon.jit
def _program(CuSeqlensQ, CuSeqlensK, LseLog2, Delta, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs,
             stride_dvh,
             seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride, window_left,
             window_right, flags, softmax_scale, qk_scale_log2, AlibiSlopes, stride_ab, softcap_scale, softcap_log2,
             DescQ, DescK, DescV, DescDO, DescDQ, RngState, dropout_threshold, dropout_scale,
             FUSED_DQ: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             STAGES: gl.constexpr, EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr, DROPOUT: gl.constexpr):
    # One program of either entry point (DescDQ: the fused one's accumulator descriptor, else DescQ).
    # Key block fastest; under causal-like masks heaviest first in groups of heads (program_tile).
    n_block, bh = program_tile(gl.program_id(0), num_n_blocks, flags)
    b = bh // heads_kv
    hkv = bh % heads_kv
    n0 = n_block * BLOCK_N
    # Sequence b: dense, rows from 0 of batch entry b; varlen, the tensors are [1, total, heads * d] and
    # its rows start at cu_seqlens[b] (the grid covers max_seqlen_k keys: a shorter sequence's last key
    # blocks have no keys and no work; blocks reaching past a sequence's end read the next sequence's
    # rows, which are masked as keys, have lse = +inf as queries, and are not stored).
    bc, q_start, k_start, sq, sk = sequence(b, CuSeqlensQ, CuSeqlensK, seqlen_q, seqlen_k, flags)
    # The window rule (kernels/attn_common.py): row i sees key j when
    # i + diag + lo_rel <= j <= i + diag + hi_rel (causal: hi_rel = 0), so the rows from
    # n0 - diag - hi_rel to (the block's last key) - diag - lo_rel see some key of this block: the query
    # blocks from the one holding the first of them on (query_ranges in the Triton kernels).
    lo_rel, hi_rel = window_bounds(window_left, window_right)
    diag = sk - sq
    if (flags & FLAG_TOP_LEFT) != 0:
        diag = sk * 0
    last_key = gl.minimum(n0 + BLOCK_N, sk) - 1
    m_lo = gl.minimum(gl.maximum(n0 - diag - hi_rel, 0), sq) // BLOCK_M * BLOCK_M
    m_hi = gl.minimum(gl.maximum(last_key - diag - lo_rel + 1, 0), sq)
    n_m = gl.maximum(gl.cdiv(m_hi - m_lo, BLOCK_M), 0)
    if n0 >= sk:
        n_m = n_m * 0
    n_iters = n_m * group_size

    dtype: gl.constexpr = DescQ.dtype
    # Q and K in QK_CHUNKS boxes along d (three of 64 columns at head dim 192; else one).
    QK_CHUNKS: gl.constexpr = HEAD_DIM // DescQ.block_type.shape[2]
    q_bufs = gl.allocate_shared_memory(dtype, [STAGES * QK_CHUNKS] + DescQ.block_type.shape, DescQ.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [STAGES] + DescDO.block_type.shape, DescDO.layout)
    k_smem = gl.allocate_shared_memory(dtype, [QK_CHUNKS] + DescK.block_type.shape, DescK.layout)
    v_smem = gl.allocate_shared_memory(dtype, DescV.block_type.shape, DescV.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qdo_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    # Head dims 64 and 128: two consumer partitions of one warpgroup each, in ping-pong (_consumer_pp);
    # fused at head dim 64, with a third warpgroup for dQ (_dq_worker). Fused at 128 the consumers'
    # registers leave none for a dQ warpgroup: one 8-warp consumer partition (_consumer).
    PINGPONG: gl.constexpr = HEAD_DIM == 64 or (HEAD_DIM == 128 and not FUSED_DQ)
    for i in gl.static_range(STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        # Released once by each consumer partition (an arrive is one arrival per partition).
        mbarrier.init(qdo_empty.index(i), count=2 if PINGPONG else 1)
    # d = 256: the two warpgroups split dK and dV along d, and exchange P^T and dS^T through shared memory
    # (_consumer_split). (192, 128): 128-key programs whose warpgroups own 64 keys each, 32 query rows a
    # step (_consumer_wide). Only the deterministic pass: fused with dQ at d = 256 (one Q/dO stage beside
    # 64 KiB of dQ staging) it measured slower than this pass with the Gluon dQ pass
    # (kernels/attn_bwd_dq_hopper.py).
    WIDE: gl.constexpr = HEAD_DIM == 192
    SPLIT_D: gl.constexpr = HEAD_DIM > 128 and not WIDE
    gl.static_assert(not WIDE or BLOCK_N == 128, "(192, 128) runs 128-key programs")
    gl.static_assert(not (SPLIT_D and FUSED_DQ), "the fused pass is compiled for head dims up to 128")
    gl.static_assert(not DROPOUT or (HEAD_DIM <= 128 and not EXTRAS),
                     "dropout's form is compiled at head dims 64 and 128, without softcap or ALiBi")
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    if FUSED_DQ or SPLIT_D:
        ds_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    else:
        ds_bufs = kv_bar  # unused
    if FUSED_DQ and PINGPONG:
        # Two staging buffers: the dQ warpgroup's reduce-add of one step runs while it computes the next.
        dq_handoff = (ds_bufs, gl.allocate_shared_memory(gl.float32, [2] + DescDQ.block_type.shape, DescDQ.layout),
                      DescDQ)
    elif FUSED_DQ:
        dq_handoff = (ds_bufs, gl.allocate_shared_memory(gl.float32, DescDQ.block_type.shape, DescDQ.layout), DescDQ)
    else:
        dq_handoff = (ds_bufs, kv_bar, kv_bar)  # only ds_bufs is used (SPLIT_D)
    if SPLIT_D:
        p_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    else:
        p_bufs = kv_bar  # unused

    bars = (kv_bar, q_ready, do_ready, qdo_empty)
    coords = (b, n0, hkv, group_size, m_lo, n_m)
    rows = (bc, k_start + n0, q_start + m_lo, hkv, group_size, n_m)
    # The program's dK and dV rows, computed here so that the consumers keep two pointers, not the
    # coordinates and strides (varlen: the batch stride is 0 and the sequence starts at row k_start).
    dk_base = DK + b.to(gl.int64) * stride_dkb + k_start.to(gl.int64) * stride_dks + hkv.to(gl.int64) * stride_dkh
    dv_base = DV + b.to(gl.int64) * stride_dvb + k_start.to(gl.int64) * stride_dvs + hkv.to(gl.int64) * stride_dvh
    window = (lo_rel, hi_rel)
    extras = (flags, AlibiSlopes, stride_ab, softcap_scale, softcap_log2)
    dropout = (RngState, dropout_threshold, dropout_scale)
    if PINGPONG:
        # turn: whose turn it is to issue S^T and dP^T. Fused: ds_ready, both halves of dS^T stored (count
        # 2); ds_free, the step's dQ product has read its dS^T buffer. (Barriers allocated and never used
        # let the allocator give their bytes to later buffers, which racecheck reports against the init.)
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        if FUSED_DQ:
            ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(2):
                mbarrier.init(ds_ready.index(i), count=2)
                mbarrier.init(ds_free.index(i), count=1)
            pp_bars = (turn, ds_ready, ds_free)
        else:
            pp_bars = (turn, turn, turn)  # only turn is used
    if WIDE:
        gl.warp_specialize([
            (_consumer_wide, (q_bufs, do_bufs, k_smem, v_smem, bars, coords, n_iters, LseLog2, Delta, dk_base,
                              dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q, stats_stride, softmax_scale,
                              qk_scale_log2, extras, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, EXTRAS)),
            (_producer, (DescQ, DescDO, DescK, DescV, q_bufs, do_bufs, k_smem, v_smem, bars, rows, n_iters, HEAD_DIM,
                         BLOCK_M, STAGES)),
        ], [1], [PRODUCER_REGS])
    elif SPLIT_D:
        gl.warp_specialize([
            (_consumer_split, (q_bufs, do_bufs, k_smem, v_smem, bars, ds_bufs, p_bufs, coords, n_iters, LseLog2,
                               Delta, dk_base, dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q,
                               stats_stride, softmax_scale, qk_scale_log2, extras, BLOCK_M, BLOCK_N, HEAD_DIM,
                               STAGES, EXTRAS)),
            (_producer, (DescQ, DescDO, DescK, DescV, q_bufs, do_bufs, k_smem, v_smem, bars, rows, n_iters, HEAD_DIM,
                         BLOCK_M, STAGES)),
        ], [1], [PRODUCER_REGS])
    elif PINGPONG and FUSED_DQ:
        gl.warp_specialize([
            (_consumer_pp, (q_bufs, do_bufs, k_smem, v_smem, bars, pp_bars, dq_handoff, coords, n_iters, LseLog2,
                            Delta, dk_base, dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q, stats_stride,
                            softmax_scale, qk_scale_log2, extras, dropout, 0, FUSED_DQ, BLOCK_M, BLOCK_N, HEAD_DIM,
                            STAGES, EXTRAS, DROPOUT)),
            (_consumer_pp, (q_bufs, do_bufs, k_smem, v_smem, bars, pp_bars, dq_handoff, coords, n_iters, LseLog2,
                            Delta, dk_base, dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q, stats_stride,
                            softmax_scale, qk_scale_log2, extras, dropout, 1, FUSED_DQ, BLOCK_M, BLOCK_N, HEAD_DIM,
                            STAGES, EXTRAS, DROPOUT)),
            (_dq_worker, (ds_bufs, dq_handoff[1], k_smem, kv_bar, pp_bars, coords, n_iters, DescDQ, heads_q,
                          softmax_scale, BLOCK_M, BLOCK_N, HEAD_DIM)),
            (_producer, (DescQ, DescDO, DescK, DescV, q_bufs, do_bufs, k_smem, v_smem, bars, rows, n_iters, HEAD_DIM,
                         BLOCK_M, STAGES)),
        ], [4, 4, 1], [200, 88, PRODUCER_REGS])
    elif PINGPONG:
        gl.warp_specialize([
            (_consumer_pp, (q_bufs, do_bufs, k_smem, v_smem, bars, pp_bars, dq_handoff, coords, n_iters, LseLog2,
                            Delta, dk_base, dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q, stats_stride,
                            softmax_scale, qk_scale_log2, extras, dropout, 0, FUSED_DQ, BLOCK_M, BLOCK_N, HEAD_DIM,
                            STAGES, EXTRAS, DROPOUT)),
            (_consumer_pp, (q_bufs, do_bufs, k_smem, v_smem, bars, pp_bars, dq_handoff, coords, n_iters, LseLog2,
                            Delta, dk_base, dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q, stats_stride,
                            softmax_scale, qk_scale_log2, extras, dropout, 1, FUSED_DQ, BLOCK_M, BLOCK_N, HEAD_DIM,
                            STAGES, EXTRAS, DROPOUT)),
            (_producer, (DescQ, DescDO, DescK, DescV, q_bufs, do_bufs, k_smem, v_smem, bars, rows, n_iters, HEAD_DIM,
                         BLOCK_M, STAGES)),
        ], [4, 1], [240, PRODUCER_REGS])
    else:
        gl.static_assert(FUSED_DQ and HEAD_DIM == 128, "the 8-warp consumer runs the fused pass at head dim 128")
        gl.warp_specialize([
            (_consumer, (q_bufs, do_bufs, k_smem, v_smem, bars, dq_handoff, coords, n_iters, LseLog2, Delta, dk_base,
                         dv_base, stride_dks, stride_dvs, sk, window, diag, heads_q, stats_stride, softmax_scale,
                         qk_scale_log2, extras, dropout, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, EXTRAS, DROPOUT)),
            (_producer, (DescQ, DescDO, DescK, DescV, q_bufs, do_bufs, k_smem, v_smem, bars, rows, n_iters, HEAD_DIM,
                         BLOCK_M, STAGES)),
        ], [1], [PRODUCER_REGS])


@gluon.jit
def attn_bwd_dkdv_hopper(Q, K, V, DOut, LseLog2, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
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
                         DescQ, DescK, DescV, DescDO,
                         HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                         EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    _program(CuSeqlensQ, CuSeqlensK, LseLog2, Delta, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb,
             stride_dvs, stride_dvh,
             seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride, window_left,
             window_right, flags, softmax_scale, qk_scale_log2, AlibiSlopes, stride_ab, softcap_scale, softcap_log2,
             DescQ, DescK, DescV, DescDO, DescQ, RngState, dropout_threshold, dropout_scale,
             False, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, False)


@gluon.jit
def attn_bwd_fused_hopper(Q, K, V, DOut, LseLog2, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
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
                          DescQ, DescK, DescV, DescDO, DescDQ,
                          HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                          EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    # The non-deterministic backward's one pass: dK and dV as attn_bwd_dkdv_hopper, and dQ reduce-added
    # into the fp32 accumulator DescDQ ([batch * heads_q, stats_stride, HEAD_DIM], zeroed by the host;
    # attn_bwd_dq_convert casts it into dq).
    _program(CuSeqlensQ, CuSeqlensK, LseLog2, Delta, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb,
             stride_dvs, stride_dvh,
             seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride, window_left,
             window_right, flags, softmax_scale, qk_scale_log2, AlibiSlopes, stride_ab, softcap_scale, softcap_log2,
             DescQ, DescK, DescV, DescDO, DescDQ, RngState, dropout_threshold, dropout_scale,
             True, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, False)


@gluon.jit
def attn_bwd_dkdv_hopper_dropout(Q, K, V, DOut, LseLog2, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
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
                         DescQ, DescK, DescV, DescDO,
                         HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                         EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    # The deterministic pass drawing dropout in its consumers (head dims 64 and 128; no softcap or ALiBi:
    # EXTRAS stays off), beside the Triton dQ pass's EXTRAS rows (the catalog's attn_bwd_dkdv_hopper_dropout).
    _program(CuSeqlensQ, CuSeqlensK, LseLog2, Delta, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb,
             stride_dvs, stride_dvh,
             seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride, window_left,
             window_right, flags, softmax_scale, qk_scale_log2, AlibiSlopes, stride_ab, softcap_scale, softcap_log2,
             DescQ, DescK, DescV, DescDO, DescQ, RngState, dropout_threshold, dropout_scale,
             False, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, True)


@gluon.jit
def attn_bwd_fused_hopper_dropout(Q, K, V, DOut, LseLog2, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, AlibiSlopes, RngState,
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
                          DescQ, DescK, DescV, DescDO, DescDQ,
                          HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                          EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    # attn_bwd_fused_hopper drawing dropout in its consumers (head dims 64 and 128, no softcap or ALiBi;
    # the catalog's attn_bwd_fused_hopper_dropout).
    _program(CuSeqlensQ, CuSeqlensK, LseLog2, Delta, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb,
             stride_dvs, stride_dvh,
             seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride, window_left,
             window_right, flags, softmax_scale, qk_scale_log2, AlibiSlopes, stride_ab, softcap_scale, softcap_log2,
             DescQ, DescK, DescV, DescDO, DescDQ, RngState, dropout_threshold, dropout_scale,
             True, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, True)

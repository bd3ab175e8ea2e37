"""Selection attention (the selected-blocks branch of Native Sparse Attention), forward and backward.

Each query token t attends to the key blocks block_idx[t, h, :] lists for its kv head h (the contract
and the math: include/aotk.h, aotk_sel_params, and ../shared/notes/selection-attention.md). Layout is
packed variable length: q [total_q, heads_q, dqk], k [total_k, heads_kv, dqk], v [total_k, heads_kv, dv],
out like q with dv, lse fp32 [total_q, heads_q], block_idx int32 [total_q, heads_kv, slots], block_cnt
int32 [total_q, heads_kv]. Token strides are int64 (a packed tensor can exceed 2^31 elements); head
strides are int32; the last dimension is contiguous.

Design:
- Forward and dQ are group-centric: one program takes the G query heads of one (token, kv head) as the
  M side of the dots (BLOCK_G rows, padded; a larger group runs in several programs) and walks the
  selected blocks with an online softmax. K and V are read in place, never gathered into copies.
  The grid runs kv head outermost, so the programs in flight read one head's K and V (32 MB at 64k
  tokens, d=128), which stays in the L2 cache across the random block choices of nearby tokens.
- dK/dV is the transpose of the selection. Five small kernels build an inverse index on the device
  (per kv head and key block: the tokens that selected it, in token order): zero, count, prefix sum,
  scatter, order. Counting and scattering use integer atomics, whose results are exact; the order
  pass sorts each list, so the index comes out the same on every run. One program then owns each key
  block (BLOCK_N keys of it) and walks its token list, BLOCK_R (token, query head) pairs at a time,
  with no atomics: the gradients are bitwise deterministic.
- Index slots are numbered n * ceil(max_seqlen_k / block_size) + b per kv head, so the index's size
  and every write into it follow from the host's sizes, not from cu_seqlens' values.
- The index costs work linear in the index entries (total_q * slots per kv head), except for lists
  longer than the order pass's sort tile, which are rewritten by scanning the tokens that could have
  selected them (see sel_index_order).
- head_dim_qk 192 runs as 128 + 64 (two dots), not padded to 256.

The kernel module is free of torch and of driver calls: it is imported on a machine with no GPU.
"""

import triton
import triton.language as tl

from attn_common import FLAG_VARLEN, FLAG_WRITE_LSE, LN2, LOG2E, sequence

# Bits of the kernels' `flags` argument (src/sel/aotk_sel.c sets them): attn_common's FLAG_WRITE_LSE and
# FLAG_VARLEN (so its `sequence` serves: a sequence's keys are cut to max_seqlen_k, which is total_k
# without cu_seqlens), and one of selection's own.
SEL_FLAG_BLOCK_CNT = tl.constexpr(256)
# sel_bwd_dkdv's second launch: add the split lists' partial sums (see there).
SEL_FLAG_DKDV_REDUCE = tl.constexpr(512)
# The forward and dQ read a token's slots SLOT_TILE at a time and loop over the valid ones.
SLOT_TILE = tl.constexpr(16)


@triton.jit
def _token_sequence(CuSeqlensQ, token, num_seqs, flags):
    """The sequence holding query row `token` (binary search on cu_seqlens_q), or -1 for a row past the
    last sequence. Empty sequences are skipped: the search ends at the n with cu[n] <= token < cu[n+1]."""
    n = token * 0
    if (flags & FLAG_VARLEN) != 0:
        lo = token * 0
        hi = num_seqs
        if token >= tl.load(CuSeqlensQ + num_seqs):
            n = n - 1
        else:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if tl.load(CuSeqlensQ + mid) <= token:
                    lo = mid
                else:
                    hi = mid
            n = lo
    return n


@triton.jit
def _row_slots(BlockCnt, token64, head_kv, stride_cs, stride_ch, num_slots, flags):
    count = num_slots
    if (flags & SEL_FLAG_BLOCK_CNT) != 0:
        count = tl.minimum(tl.maximum(tl.load(BlockCnt + token64 * stride_cs + head_kv * stride_ch), 0), num_slots)
    return count


@triton.jit
def _load_rows(base, rows_off, row_ok, DIM: tl.constexpr, OFFSET: tl.constexpr):
    cols = OFFSET + tl.arange(0, DIM)
    return tl.load(base + rows_off[:, None] + cols[None, :], mask=row_ok[:, None], other=0.0)


@triton.jit
def _token_program(CuSeqlensQ, CuSeqlensK, num_seqs, total_q, max_seqlen_k, group_size, group_chunks, flags,
                   BLOCK_G: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """The forward's and dQ's program: one (kv head, token, chunk of BLOCK_G query heads of the group),
    kv head outermost in the 1-d grid (see the module docstring). Returns the token, its kv head, the
    query heads (and which exist), the token's sequence (-1: a row past the last sequence, which the
    program leaves alone), its key position, the sequence's keys and its number of key blocks."""
    pid = tl.program_id(0)
    chunk = pid % group_chunks
    token = (pid // group_chunks) % total_q
    head_kv = pid // (group_chunks * total_q)
    n = _token_sequence(CuSeqlensQ, token, num_seqs, flags)
    q_start, len_q = sequence(CuSeqlensQ, tl.maximum(n, 0), total_q, flags)
    k_start, len_k = sequence(CuSeqlensK, tl.maximum(n, 0), max_seqlen_k, flags)
    g = chunk * BLOCK_G + tl.arange(0, BLOCK_G)
    return (token, head_kv, g < group_size, head_kv * group_size + g, n, token - q_start + len_k - len_q, k_start,
            len_k, tl.cdiv(len_k, BLOCK_SIZE))


@triton.jit
def _valid_block(b, position, num_blocks, BLOCK_SIZE: tl.constexpr):
    # B(t, h)'s test for a listed id: in range and at or before the token's position (the diagonal).
    return (b >= 0) & (b < num_blocks) & (b * BLOCK_SIZE <= position)


@triton.jit
def _compact_slots(idx_row, start, count, position, num_blocks, scratch, BLOCK_SIZE: tl.constexpr,
                   SLOT_TILE: tl.constexpr):
    """Slots start .. start+SLOT_TILE-1 of a token's row: where to read its valid block ids (B(t, h): listed
    before `count`, in range, at or before the diagonal) in slot order, and how many there are. When every
    slot of the tile is valid that is the row itself; otherwise the valid ids are written to `scratch`
    (SLOT_TILE int32 the program owns) first. The loops then run over the valid slots only, so that a
    row's time follows its selected keys, not its slot count."""
    slot = start + tl.arange(0, SLOT_TILE)
    b = tl.load(idx_row + slot, mask=slot < count, other=-1)
    ok = _valid_block(b, position, num_blocks, BLOCK_SIZE)
    valid = tl.sum(ok.to(tl.int32), 0)
    ids = idx_row + start
    tl.debug_barrier()  # the previous tile's ids in the scratch have been read
    if valid < tl.minimum(count - start, SLOT_TILE):
        tl.store(scratch + tl.cumsum(ok.to(tl.int32), 0) - 1, b, mask=ok)
        ids = scratch
    tl.debug_barrier()
    return ids, valid


@triton.jit
def _row_all_valid(idx_row, count, position, num_blocks, BLOCK_SIZE: tl.constexpr, SLOT_TILE: tl.constexpr):
    """Whether every one of a row's `count` slots names a valid block (_valid_block)."""
    invalid = 0
    for start in range(0, count, SLOT_TILE):
        slot = start + tl.arange(0, SLOT_TILE)
        listed = slot < count
        b = tl.load(idx_row + slot, mask=listed, other=0)
        bad = listed & ~_valid_block(b, position, num_blocks, BLOCK_SIZE)
        invalid += tl.sum(bad.to(tl.int32), 0)
    return invalid == 0


@triton.jit
def _selected_block(b, position, len_k, k_seq, stride_ks, q0, q1, offs_n,
                    HEAD_DIM_QK0: tl.constexpr, HEAD_DIM_QK1: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """A valid selected block b: the row offset of its first key, which of its keys the token sees (cut
    at the diagonal and at len_k; at least the first), K in one or two column parts, and q K^T."""
    visible = tl.minimum(tl.minimum(position + 1, len_k) - b * BLOCK_SIZE, BLOCK_SIZE)
    key_ok = offs_n < visible
    first_key = (b * BLOCK_SIZE).to(tl.int64)
    k_block = k_seq + first_key * stride_ks
    # A block's rows from its first in 32 bits (the host refuses a token stride whose block passes 2^31
    # elements): the int64 offsets took registers the loop spilled for, 8% of the forward's time.
    rows_k = offs_n * stride_ks.to(tl.int32)
    k0 = _load_rows(k_block, rows_k, key_ok, HEAD_DIM_QK0, 0)
    qk = tl.dot(q0, tl.trans(k0))
    k1 = k0
    if HEAD_DIM_QK1 > 0:
        k1 = _load_rows(k_block, rows_k, key_ok, HEAD_DIM_QK1, HEAD_DIM_QK0)
        qk = tl.dot(q1, tl.trans(k1), qk)
    return first_key, key_ok, qk, k0, k1


@triton.jit
def _group_q(Q, token64, stride_qs, q_rows, g_ok, HEAD_DIM_QK0: tl.constexpr, HEAD_DIM_QK1: tl.constexpr):
    """The group's q rows, in one or two column parts (192 = 128 + 64; q1 = q0 when there is one)."""
    q_base = Q + token64 * stride_qs
    q0 = _load_rows(q_base, q_rows, g_ok, HEAD_DIM_QK0, 0)
    q1 = q0
    if HEAD_DIM_QK1 > 0:
        q1 = _load_rows(q_base, q_rows, g_ok, HEAD_DIM_QK1, HEAD_DIM_QK0)
    return q0, q1


@triton.jit
def _dq_block(b, dq0, dq1, position, len_k, k_seq, v_seq, stride_ks, stride_vs, q0, q1, do, delta, lse_log2, offs_n,
              qk_scale_log2, HEAD_DIM_QK0: tl.constexpr, HEAD_DIM_QK1: tl.constexpr, HEAD_DIM_V: tl.constexpr,
              BLOCK_SIZE: tl.constexpr):
    """dQ's step over one valid selected block b (dq1: the columns past HEAD_DIM_QK0, if any)."""
    first_key, key_ok, qk, k0, k1 = _selected_block(b, position, len_k, k_seq, stride_ks, q0, q1, offs_n,
                                                    HEAD_DIM_QK0, HEAD_DIM_QK1, BLOCK_SIZE)
    p = tl.math.exp2(qk * qk_scale_log2 - lse_log2[:, None])
    p = tl.where(key_ok[None, :], p, 0.0)
    v = _load_rows(v_seq + first_key * stride_vs, offs_n * stride_vs.to(tl.int32), key_ok, HEAD_DIM_V, 0)
    dp = tl.dot(do, tl.trans(v))
    ds = (p * (dp - delta[:, None])).to(k0.dtype)
    dq0 = tl.dot(ds, k0, dq0)
    if HEAD_DIM_QK1 > 0:
        dq1 = tl.dot(ds, k1, dq1)
    return dq0, dq1


@triton.jit
def sel_fwd(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, BlockIdx, BlockCnt,
            stride_qs, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_os, stride_oh,
            stride_ls, stride_lh, stride_is, stride_ih, stride_cs, stride_ch,
            num_seqs, total_q, total_k, max_seqlen_k, group_size, group_chunks, num_slots, flags,
            qk_scale_log2,
            HEAD_DIM_QK0: tl.constexpr, HEAD_DIM_QK1: tl.constexpr, HEAD_DIM_V: tl.constexpr,
            BLOCK_G: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    token, head_kv, g_ok, head_q, n, position, k_start, len_k, num_blocks = _token_program(
        CuSeqlensQ, CuSeqlensK, num_seqs, total_q, max_seqlen_k, group_size, group_chunks, flags, BLOCK_G, BLOCK_SIZE)
    if n < 0:
        return
    token64 = token.to(tl.int64)
    q0, q1 = _group_q(Q, token64, stride_qs, head_q * stride_qh, g_ok, HEAD_DIM_QK0, HEAD_DIM_QK1)
    offs_n = tl.arange(0, BLOCK_SIZE)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    k_seq = K + k_start.to(tl.int64) * stride_ks + head_kv * stride_kh
    v_seq = V + k_start.to(tl.int64) * stride_vs + head_kv * stride_vh
    idx_row = BlockIdx + token64 * stride_is + head_kv * stride_ih
    count = _row_slots(BlockCnt, token64, head_kv, stride_cs, stride_ch, num_slots, flags)

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM_V], dtype=tl.float32)
    # A tile with invalid slots writes its valid ids, in slot order, to the start of the program's first
    # out row (at least 64 elements: 32 int32 ids), which the loop reads back one by one; the row gets its
    # output after the loop. (Picking the i-th id out of registers instead cost 5% in the AOT build; the
    # forward has no workspace.)
    first_head = tl.min(tl.where(g_ok, head_q, 2147483647), 0)
    scratch = (Out + token64 * stride_os + first_head * stride_oh).to(tl.pointer_type(tl.int32))
    # (Full rows walked slot by slot, as dQ walks them below, measured 0.2-1.5% slower here: not kept.)
    for start in range(0, count, SLOT_TILE):
        ids, valid = _compact_slots(idx_row, start, count, position, num_blocks, scratch, BLOCK_SIZE, SLOT_TILE)
        for i in range(0, valid):
            first_key, key_ok, qk, _, _ = _selected_block(tl.load(ids + i), position, len_k, k_seq, stride_ks, q0,
                                                          q1, offs_n, HEAD_DIM_QK0, HEAD_DIM_QK1, BLOCK_SIZE)
            s = tl.where(key_ok[None, :], qk * qk_scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # Every valid block shows the token at least its first key, so m_new is finite from the first
            # block on (the rows of absent query heads, all zeros, too).
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = _load_rows(v_seq + first_key * stride_vs, offs_n * stride_vs.to(tl.int32), key_ok, HEAD_DIM_V, 0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new

    tl.debug_barrier()  # every thread has read the ids in the out row
    # An empty selection (l = 0): out = 0, lse = -inf.
    has_keys = l_i > 0.0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    o_ptrs = Out + token64 * stride_os + head_q[:, None] * stride_oh + offs_dv[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=g_ok[:, None])
    if (flags & FLAG_WRITE_LSE) != 0:
        lse = tl.where(has_keys, (m_i + tl.math.log2(l_i)) * LN2, float("-inf"))
        tl.store(Lse + token64 * stride_ls + head_q * stride_lh, lse, mask=g_ok)


@triton.jit
def sel_bwd_dq(Q, K, V, Out, DOut, Lse, DQ, Delta, CuSeqlensQ, CuSeqlensK, BlockIdx, BlockCnt, Compact,
               stride_qs, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_os, stride_oh,
               stride_dos, stride_doh, stride_dqs, stride_dqh, stride_ls, stride_lh,
               stride_is, stride_ih, stride_cs, stride_ch,
               num_seqs, total_q, total_k, max_seqlen_k, heads_q, group_size, group_chunks, num_slots, flags,
               qk_scale_log2, softmax_scale,
               HEAD_DIM_QK0: tl.constexpr, HEAD_DIM_QK1: tl.constexpr, HEAD_DIM_V: tl.constexpr,
               BLOCK_G: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # The forward's grid. Also stages delta = rowsum(dO * O) as fp32 [total_q, heads_q] in the
    # workspace for the dK/dV pass (which runs after this one). Compact: int32 [total_q, heads_kv,
    # num_slots] in the workspace, where a tile's valid block ids go when some of its slots are not
    # (_compact_slots; picking the i-th valid id out of registers instead made this kernel 10% slower).
    token, head_kv, g_ok, head_q, n, position, k_start, len_k, num_blocks = _token_program(
        CuSeqlensQ, CuSeqlensK, num_seqs, total_q, max_seqlen_k, group_size, group_chunks, flags, BLOCK_G, BLOCK_SIZE)
    if n < 0:
        return
    token64 = token.to(tl.int64)
    q0, q1 = _group_q(Q, token64, stride_qs, head_q * stride_qh, g_ok, HEAD_DIM_QK0, HEAD_DIM_QK1)
    do = _load_rows(DOut + token64 * stride_dos, head_q * stride_doh, g_ok, HEAD_DIM_V, 0)
    o = _load_rows(Out + token64 * stride_os, head_q * stride_oh, g_ok, HEAD_DIM_V, 0)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    tl.store(Delta + token64 * heads_q + head_q, delta, mask=g_ok)
    lse = tl.load(Lse + token64 * stride_ls + head_q * stride_lh, mask=g_ok, other=float("-inf"))
    # An empty row (lse = -inf) has no gradient: +inf makes every P = exp2(s - inf) = 0.
    lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * LOG2E)

    offs_n = tl.arange(0, BLOCK_SIZE)
    k_seq = K + k_start.to(tl.int64) * stride_ks + head_kv * stride_kh
    v_seq = V + k_start.to(tl.int64) * stride_vs + head_kv * stride_vh
    idx_row = BlockIdx + token64 * stride_is + head_kv * stride_ih
    count = _row_slots(BlockCnt, token64, head_kv, stride_cs, stride_ch, num_slots, flags)

    dq0 = tl.zeros([BLOCK_G, HEAD_DIM_QK0], dtype=tl.float32)
    dq1 = dq0
    if HEAD_DIM_QK1 > 0:
        dq1 = tl.zeros([BLOCK_G, HEAD_DIM_QK1], dtype=tl.float32)
    compact_row = Compact + (token64 * (heads_q // group_size) + head_kv) * num_slots
    # A row whose slots are all valid (full selections) is walked slot by slot, one loop that the
    # compiler pipelines across the whole row; otherwise a tile's valid ids are compacted first (the
    # loop per tile costs about 1 ms at 64k tokens on full rows). The same blocks in the same order
    # either way, so the same bits.
    if _row_all_valid(idx_row, count, position, num_blocks, BLOCK_SIZE, SLOT_TILE):
        for slot in range(0, count):
            dq0, dq1 = _dq_block(tl.load(idx_row + slot), dq0, dq1, position, len_k, k_seq, v_seq, stride_ks,
                                 stride_vs, q0, q1, do, delta, lse_log2, offs_n, qk_scale_log2, HEAD_DIM_QK0,
                                 HEAD_DIM_QK1, HEAD_DIM_V, BLOCK_SIZE)
    else:
        for start in range(0, count, SLOT_TILE):
            ids, valid = _compact_slots(idx_row, start, count, position, num_blocks, compact_row + start, BLOCK_SIZE,
                                        SLOT_TILE)
            for i in range(0, valid):
                dq0, dq1 = _dq_block(tl.load(ids + i), dq0, dq1, position, len_k, k_seq, v_seq, stride_ks, stride_vs,
                                     q0, q1, do, delta, lse_log2, offs_n, qk_scale_log2, HEAD_DIM_QK0, HEAD_DIM_QK1,
                                     HEAD_DIM_V, BLOCK_SIZE)

    offs_q0 = tl.arange(0, HEAD_DIM_QK0)
    dq_base = DQ + token64 * stride_dqs + head_q[:, None] * stride_dqh
    tl.store(dq_base + offs_q0[None, :], (dq0 * softmax_scale).to(DQ.dtype.element_ty), mask=g_ok[:, None])
    if HEAD_DIM_QK1 > 0:
        offs_q1 = HEAD_DIM_QK0 + tl.arange(0, HEAD_DIM_QK1)
        tl.store(dq_base + offs_q1[None, :], (dq1 * softmax_scale).to(DQ.dtype.element_ty), mask=g_ok[:, None])


@triton.jit
def _entry_slots(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, entry, head_kv, num_seqs, total_q, total_k,
                 max_seqlen_k, block_size, num_slots, search_steps, stride_is, stride_ih, stride_cs, stride_ch, flags):
    """For packed index entries (token-major, then slot) of one kv head: each entry's token, and the
    index slot of the block it validly selects (-1: none). Index slot n * ceil(max_seqlen_k /
    block_size) + b is sequence n's block b."""
    token = entry // num_slots
    slot = entry % num_slots
    ok = token < total_q
    token64 = token.to(tl.int64)
    b = tl.load(BlockIdx + token64 * stride_is + head_kv * stride_ih + slot, mask=ok, other=-1)
    if (flags & SEL_FLAG_BLOCK_CNT) != 0:
        count = tl.load(BlockCnt + token64 * stride_cs + head_kv * stride_ch, mask=ok, other=0)
        b = tl.where(slot < count, b, -1)
    n = token * 0
    q_start = token * 0
    len_q = q_start + total_q
    len_k = q_start + total_k
    if (flags & FLAG_VARLEN) != 0:
        # Each entry's sequence: a binary search on cu_seqlens_q, cu[lo] <= token < cu[hi].
        lo = token * 0
        hi = lo + num_seqs
        for _ in range(0, search_steps):
            active = hi - lo > 1
            mid = (lo + hi) // 2
            go = tl.load(CuSeqlensQ + mid, mask=ok & active, other=0) <= token
            lo = tl.where(active & go, mid, lo)
            hi = tl.where(active & ~go, mid, hi)
        n = lo
        q_start = tl.load(CuSeqlensQ + n, mask=ok, other=0)
        len_q = tl.load(CuSeqlensQ + n + 1, mask=ok, other=0) - q_start
        ok = ok & (token < tl.load(CuSeqlensQ + num_seqs))  # rows past the last sequence select nothing
        k_start = tl.load(CuSeqlensK + n, mask=ok, other=0)
        len_k = tl.load(CuSeqlensK + n + 1, mask=ok, other=0) - k_start
    len_k = tl.minimum(len_k, max_seqlen_k)
    position = token - q_start + len_k - len_q
    valid = ok & (b >= 0) & (b < tl.cdiv(len_k, block_size)) & (b * block_size <= position)
    return token, tl.where(valid, n * tl.cdiv(max_seqlen_k, block_size) + b, -1)


@triton.jit
def sel_index_zero(Offsets, count, BLOCK: tl.constexpr):
    # Pass 0 of the inverse index: the counts start at 0.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Offsets + offs, tl.zeros([BLOCK], dtype=tl.int32), mask=offs < count)


@triton.jit
def sel_index_count(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Offsets,
                    stride_is, stride_ih, stride_cs, stride_ch, stride_offsets,
                    num_seqs, total_q, total_k, max_seqlen_k, block_size, num_slots, num_chunks, search_steps, flags,
                    ENTRIES: tl.constexpr):
    # Pass 1: how many tokens select each block, into Offsets[h, slot + 1], one program per ENTRIES
    # index entries of one kv head. Integer atomics: the counts come out exact whatever the order.
    pid = tl.program_id(0)
    head_kv = pid // num_chunks
    entry = (pid % num_chunks) * ENTRIES + tl.arange(0, ENTRIES)
    _, slot = _entry_slots(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, entry, head_kv, num_seqs, total_q, total_k,
                           max_seqlen_k, block_size, num_slots, search_steps, stride_is, stride_ih, stride_cs,
                           stride_ch, flags)
    tl.atomic_add(Offsets + head_kv * stride_offsets + slot + 1, tl.full([ENTRIES], 1, tl.int32), mask=slot >= 0,
                  sem="relaxed")


@triton.jit
def _list_chunks(length, chunk_tokens, max_chunks):
    """How many dK/dV programs share a token list of `length` tokens: one per chunk_tokens of it, at
    least one (an empty list's program writes the zeros) and at most max_chunks."""
    return tl.maximum(tl.minimum(tl.cdiv(length, chunk_tokens), max_chunks), 1)


@triton.jit
def sel_index_scan(Offsets, Cursors, Chunks, stride_offsets, slots, chunk_tokens, max_chunks, BLOCK: tl.constexpr):
    # Pass 2: an inclusive prefix sum over the counts in place, one program per kv head: Offsets[h, s]
    # becomes where slot s's token list starts (Offsets[h, slots] the total), and Cursors[h, s] a copy
    # of it for the scatter to advance. Chunks[h, s]: where slot s's partial dK/dV records start among
    # the kv head's, an exclusive prefix sum over the lists split across several programs (_list_chunks).
    head_kv = tl.program_id(0)
    row = Offsets + head_kv * stride_offsets
    cursors = Cursors + head_kv * stride_offsets
    chunks = Chunks + head_kv * stride_offsets
    tl.store(row, 0)
    tl.store(cursors, 0)
    carry = tl.zeros([], dtype=tl.int32)
    records = tl.zeros([], dtype=tl.int32)
    for start in range(1, slots + 1, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs <= slots
        counts = tl.load(row + offs, mask=ok, other=0)
        sums = tl.cumsum(counts, 0) + carry
        tl.store(row + offs, sums, mask=ok)
        tl.store(cursors + offs, sums, mask=offs < slots)
        carry += tl.sum(counts, 0)
        split = _list_chunks(counts, chunk_tokens, max_chunks)
        split = tl.where(ok & (split > 1), split, 0)
        tl.store(chunks + offs - 1, records + tl.cumsum(split, 0) - split, mask=ok)
        records += tl.sum(split, 0)


@triton.jit
def sel_index_scatter(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Cursors, Tokens,
                      stride_is, stride_ih, stride_cs, stride_ch, stride_offsets, stride_tokens,
                      num_seqs, total_q, total_k, max_seqlen_k, block_size, num_slots, num_chunks, search_steps,
                      flags, ENTRIES: tl.constexpr):
    # Pass 3: each selecting token into its block's list, at a position claimed with an integer atomic.
    # The lists then hold the right tokens in an arbitrary order; pass 4 sorts them.
    pid = tl.program_id(0)
    head_kv = pid // num_chunks
    entry = (pid % num_chunks) * ENTRIES + tl.arange(0, ENTRIES)
    token, slot = _entry_slots(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, entry, head_kv, num_seqs, total_q,
                               total_k, max_seqlen_k, block_size, num_slots, search_steps, stride_is, stride_ih,
                               stride_cs, stride_ch, flags)
    hit = slot >= 0
    where = tl.atomic_add(Cursors + head_kv * stride_offsets + slot, tl.full([ENTRIES], 1, tl.int32), mask=hit,
                          sem="relaxed")
    tl.store(Tokens + head_kv.to(tl.int64) * stride_tokens + where, token, mask=hit)


@triton.jit
def _sort_list(tokens, length, TILE: tl.constexpr):
    offs = tl.arange(0, TILE)
    values = tl.load(tokens + offs, mask=offs < length, other=2147483647)
    tl.store(tokens + offs, tl.sort(values), mask=offs < length)


@triton.jit
def sel_index_order(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Offsets, Tokens,
                    stride_is, stride_ih, stride_cs, stride_ch, stride_offsets, stride_tokens,
                    num_seqs, total_q, total_k, max_seqlen_k, block_size, num_slots, flags,
                    SORT_TILE: tl.constexpr, SCAN_TOKENS: tl.constexpr):
    # Pass 4: each list into token order, one program per (kv head, sequence, block), so that dK/dV
    # sum in a fixed order (bitwise deterministic). A list of up to SORT_TILE tokens is sorted in
    # registers. A longer one (a block most tokens select, like NSA's always-selected first block) is
    # rewritten by scanning the index rows of the tokens that could select it, in order: work of the
    # sequence's length times the slots, for those blocks only.
    pid = tl.program_id(0)
    blocks_per_seq = tl.cdiv(max_seqlen_k, block_size)
    block = pid % blocks_per_seq
    n = (pid // blocks_per_seq) % num_seqs
    head_kv = pid // (blocks_per_seq * num_seqs)
    offsets = Offsets + head_kv * stride_offsets + n * blocks_per_seq + block
    start = tl.load(offsets)
    length = tl.load(offsets + 1) - start
    tokens = Tokens + head_kv.to(tl.int64) * stride_tokens + start
    if length <= 1:
        return
    # Sorting costs grow with the tile, not the list: the smallest tile that holds it. (One 8192 tile for
    # every list took 6.0 ms at the benchmark's 64k tokens, where the average list has ~1000 tokens.)
    if length <= SORT_TILE // 8:
        _sort_list(tokens, length, SORT_TILE // 8)
    elif length <= SORT_TILE // 4:
        _sort_list(tokens, length, SORT_TILE // 4)
    elif length <= SORT_TILE // 2:
        _sort_list(tokens, length, SORT_TILE // 2)
    elif length <= SORT_TILE:
        _sort_list(tokens, length, SORT_TILE)
    else:
        # SCAN_TOKENS tokens a step, as a [tokens, 16 slots] tile: each token's hits summed along its row
        # (a block listed twice by a token counts twice, as in the count pass), then one prefix sum over
        # the tokens. (A flat prefix sum over 1024 index entries a step, 64 tokens of 16 slots, took
        # about 0.9 ms at 64k tokens for NSA's first block, whose list holds every token: H200,
        # bench/explore/ab_libs.py --profile.)
        q_start, len_q = sequence(CuSeqlensQ, n, total_q, flags)
        k_start, len_k = sequence(CuSeqlensK, n, max_seqlen_k, flags)
        first_token = tl.maximum(block * block_size - (len_k - len_q), 0)
        slots16 = tl.arange(0, 16)
        written = tl.zeros([], dtype=tl.int32)
        for t0 in range(first_token, len_q, SCAN_TOKENS):
            local = t0 + tl.arange(0, SCAN_TOKENS)
            token_ok = local < len_q
            token64 = (q_start + local).to(tl.int64)
            row = BlockIdx + token64 * stride_is + head_kv * stride_ih
            count = tl.full([SCAN_TOKENS], num_slots, tl.int32)
            if (flags & SEL_FLAG_BLOCK_CNT) != 0:
                count = tl.load(BlockCnt + token64 * stride_cs + head_kv * stride_ch, mask=token_ok, other=0)
            hits = tl.zeros([SCAN_TOKENS], dtype=tl.int32)
            for s0 in range(0, num_slots, 16):
                slot = s0 + slots16
                ok = token_ok[:, None] & (slot < num_slots)[None, :]
                b = tl.load(row[:, None] + slot[None, :], mask=ok, other=-1)
                b = tl.where(slot[None, :] < count[:, None], b, -1)
                # b == block is valid here: the block exists and starts at or before these tokens' positions.
                hits += tl.sum((b == block).to(tl.int32), 1)
            ends = written + tl.cumsum(hits, 0)
            for c in range(tl.max(hits, 0)):
                where = ends - hits + c
                tl.store(tokens + where, q_start + local, mask=(c < hits) & (where < length))
            written += tl.sum(hits, 0)


@triton.jit
def _dkdv_record(Partials, Chunks, head_kv, stride_offsets, slot, chunk, tile_in_block, partials_per_head,
                 WIDTH: tl.constexpr, BLOCK_N: tl.constexpr, TILES_PER_BLOCK: tl.constexpr):
    """Where chunk `chunk` of the list of index slot `slot` keeps its partial dK/dV for one key tile:
    fp32 [BLOCK_N, WIDTH] (dK's columns, then dV's)."""
    first = tl.load(Chunks + head_kv * stride_offsets + slot)
    record = ((head_kv * partials_per_head + first + chunk) * TILES_PER_BLOCK + tile_in_block).to(tl.int64)
    return Partials + record * (BLOCK_N * WIDTH)


@triton.jit
def _dkdv_part_sum(Partials, Chunks, Out, out_rows, key_in, head_kv, stride_offsets, slot, chunks, tile_in_block,
                   partials_per_head, scale, COLUMN: tl.constexpr, DIM: tl.constexpr, WIDTH: tl.constexpr,
                   BLOCK_N: tl.constexpr, TILES_PER_BLOCK: tl.constexpr):
    """Columns COLUMN .. COLUMN+DIM-1 of a split list's partial records, added in chunk order, times
    `scale`, into rows `out_rows` of Out."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, DIM)
    total = tl.zeros([BLOCK_N, DIM], dtype=tl.float32)
    for c in range(0, chunks):
        partial = _dkdv_record(Partials, Chunks, head_kv, stride_offsets, slot, c, tile_in_block, partials_per_head,
                               WIDTH, BLOCK_N, TILES_PER_BLOCK)
        total += tl.load(partial + offs_n[:, None] * WIDTH + COLUMN + offs_d[None, :])
    tl.store(Out + out_rows[:, None] + offs_d[None, :], (total * scale).to(Out.dtype.element_ty), mask=key_in[:, None])


@triton.jit
def sel_bwd_dkdv(Q, K, V, DOut, Lse, Delta, DK, DV, CuSeqlensQ, CuSeqlensK, Offsets, Tokens, Chunks, Partials,
                 stride_qs, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_dos, stride_doh,
                 stride_dks, stride_dkh, stride_dvs, stride_dvh, stride_ls, stride_lh,
                 stride_offsets, stride_tokens,
                 num_seqs, total_q, total_k, max_seqlen_k, heads_q, group_size, num_key_tiles, chunk_tokens,
                 max_chunks, partials_per_head, flags, qk_scale_log2, softmax_scale,
                 HEAD_DIM_QK0: tl.constexpr, HEAD_DIM_QK1: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                 BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # Grid: (kv head, sequence, key tile of BLOCK_N keys, chunk), kv head outermost, chunk innermost. A
    # tile's program walks the token list of its tile's block, BLOCK_R (token, query head) pairs per step:
    # pair i is query head i % G of the list's token i // G, so any group size fills the rows. A long list
    # (a block most tokens select: NSA's first block, the local blocks) is split into up to max_chunks
    # consecutive chunks (_list_chunks), one program each, which write their partial sums (fp32) to the
    # workspace. A second launch with SEL_FLAG_DKDV_REDUCE (grid: one program per key tile) adds each split
    # list's partials in chunk order and writes dK and dV: bitwise deterministic. (Adding them in the
    # first launch, by the last chunk to finish, cost the loop registers: 16.1 ms instead of 14.0 at the
    # benchmark's 64k tokens.)
    pid = tl.program_id(0)
    reduce = (flags & SEL_FLAG_DKDV_REDUCE) != 0
    chunk = tl.where(reduce, 0, pid % max_chunks)
    work = tl.where(reduce, pid, pid // max_chunks)
    tile = work % num_key_tiles
    n = (work // num_key_tiles) % num_seqs
    head_kv = work // (num_key_tiles * num_seqs)
    q_start, len_q = sequence(CuSeqlensQ, n, total_q, flags)
    k_start, len_k = sequence(CuSeqlensK, n, max_seqlen_k, flags)
    first_key = tile * BLOCK_N
    if first_key >= len_k:
        return
    slot = n * tl.cdiv(max_seqlen_k, BLOCK_SIZE) + first_key // BLOCK_SIZE
    offsets = Offsets + head_kv * stride_offsets + slot
    list_start = tl.load(offsets)
    length = tl.load(offsets + 1) - list_start
    chunks = _list_chunks(length, chunk_tokens, max_chunks)
    keys = first_key + tl.arange(0, BLOCK_N)
    key_in = keys < len_k
    k_start64 = k_start.to(tl.int64)
    dk_rows = (k_start64 + keys) * stride_dks + head_kv * stride_dkh
    dv_rows = (k_start64 + keys) * stride_dvs + head_kv * stride_dvh
    WIDTH: tl.constexpr = HEAD_DIM_QK0 + HEAD_DIM_QK1 + HEAD_DIM_V
    TILES_PER_BLOCK: tl.constexpr = BLOCK_SIZE // BLOCK_N
    tile_in_block = tile % TILES_PER_BLOCK
    if reduce:
        if chunks > 1:
            _dkdv_part_sum(Partials, Chunks, DK, dk_rows, key_in, head_kv, stride_offsets, slot, chunks,
                           tile_in_block, partials_per_head, softmax_scale, 0, HEAD_DIM_QK0, WIDTH, BLOCK_N,
                           TILES_PER_BLOCK)
            if HEAD_DIM_QK1 > 0:
                _dkdv_part_sum(Partials, Chunks, DK + HEAD_DIM_QK0, dk_rows, key_in, head_kv, stride_offsets, slot,
                               chunks, tile_in_block, partials_per_head, softmax_scale, HEAD_DIM_QK0, HEAD_DIM_QK1,
                               WIDTH, BLOCK_N, TILES_PER_BLOCK)
            _dkdv_part_sum(Partials, Chunks, DV, dv_rows, key_in, head_kv, stride_offsets, slot, chunks,
                           tile_in_block, partials_per_head, 1.0, HEAD_DIM_QK0 + HEAD_DIM_QK1, HEAD_DIM_V, WIDTH,
                           BLOCK_N, TILES_PER_BLOCK)
        return
    if chunk >= chunks:
        return
    per_chunk = tl.cdiv(length, chunks)
    pair_first = chunk * per_chunk * group_size
    pair_end = tl.minimum(length, (chunk + 1) * per_chunk) * group_size
    tokens = Tokens + head_kv.to(tl.int64) * stride_tokens + list_start

    k_rows = (k_start64 + keys) * stride_ks + head_kv * stride_kh
    v_rows = (k_start64 + keys) * stride_vs + head_kv * stride_vh
    k0 = _load_rows(K, k_rows, key_in, HEAD_DIM_QK0, 0)
    if HEAD_DIM_QK1 > 0:
        k1 = _load_rows(K, k_rows, key_in, HEAD_DIM_QK1, HEAD_DIM_QK0)
    v = _load_rows(V, v_rows, key_in, HEAD_DIM_V, 0)
    dk0 = tl.zeros([BLOCK_N, HEAD_DIM_QK0], dtype=tl.float32)
    if HEAD_DIM_QK1 > 0:
        dk1 = tl.zeros([BLOCK_N, HEAD_DIM_QK1], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_V], dtype=tl.float32)
    offs_r = tl.arange(0, BLOCK_R)
    diag = len_k - len_q - q_start  # key position of global query row t: t + diag
    for start in range(pair_first, pair_end, BLOCK_R):
        pair = start + offs_r
        pair_ok = pair < pair_end
        token = tl.load(tokens + pair // group_size, mask=pair_ok, other=0)
        head_q = head_kv * group_size + pair % group_size
        token64 = token.to(tl.int64)
        q_rows = token64 * stride_qs + head_q * stride_qh
        q0 = _load_rows(Q, q_rows, pair_ok, HEAD_DIM_QK0, 0)
        do = _load_rows(DOut, token64 * stride_dos + head_q * stride_doh, pair_ok, HEAD_DIM_V, 0)
        lse = tl.load(Lse + token64 * stride_ls + head_q * stride_lh, mask=pair_ok, other=float("inf"))
        delta = tl.load(Delta + token64 * heads_q + head_q, mask=pair_ok, other=0.0)
        qk = tl.dot(q0, tl.trans(k0))
        if HEAD_DIM_QK1 > 0:
            q1 = _load_rows(Q, q_rows, pair_ok, HEAD_DIM_QK1, HEAD_DIM_QK0)
            qk = tl.dot(q1, tl.trans(k1), qk)
        visible = (keys[None, :] <= (token + diag)[:, None]) & key_in[None, :] & pair_ok[:, None]
        p = tl.math.exp2(qk * qk_scale_log2 - (lse * LOG2E)[:, None])
        p = tl.where(visible, p, 0.0)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv)
        dp = tl.dot(do, tl.trans(v))
        ds = tl.trans((p * (dp - delta[:, None])).to(q0.dtype))
        dk0 = tl.dot(ds, q0, dk0)
        if HEAD_DIM_QK1 > 0:
            dk1 = tl.dot(ds, q1, dk1)

    offs_n = tl.arange(0, BLOCK_N)
    offs_d0 = tl.arange(0, HEAD_DIM_QK0)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    if chunks > 1:
        partial = _dkdv_record(Partials, Chunks, head_kv, stride_offsets, slot, chunk, tile_in_block,
                               partials_per_head, WIDTH, BLOCK_N, TILES_PER_BLOCK) + offs_n[:, None] * WIDTH
        tl.store(partial + offs_d0[None, :], dk0)
        if HEAD_DIM_QK1 > 0:
            tl.store(partial + (HEAD_DIM_QK0 + tl.arange(0, HEAD_DIM_QK1))[None, :], dk1)
        tl.store(partial + (HEAD_DIM_QK0 + HEAD_DIM_QK1) + offs_dv[None, :], dv)
        return
    tl.store(DK + dk_rows[:, None] + offs_d0[None, :], (dk0 * softmax_scale).to(DK.dtype.element_ty),
             mask=key_in[:, None])
    if HEAD_DIM_QK1 > 0:
        offs_d1 = HEAD_DIM_QK0 + tl.arange(0, HEAD_DIM_QK1)
        tl.store(DK + dk_rows[:, None] + offs_d1[None, :], (dk1 * softmax_scale).to(DK.dtype.element_ty),
                 mask=key_in[:, None])
    tl.store(DV + dv_rows[:, None] + offs_dv[None, :], dv.to(DV.dtype.element_ty), mask=key_in[:, None])


@triton.jit
def sel_check_indices(BlockIdx, BlockCnt, CuSeqlensQ, CuSeqlensK, Result,
                      stride_is, stride_ih, stride_cs, stride_ch,
                      num_seqs, total_q, total_k, max_seqlen_k, heads_kv, block_size, num_slots, flags,
                      BLOCK: tl.constexpr):
    # The debug check, one program per (token, kv head): the first problem of the row, reported by an
    # atomic minimum on Result (int64, set to INT64_MAX by the host) of
    # ((token * heads_kv + head) * 2^24 + slot) * 4 + code, code 1: block id out of range, 2: block
    # listed twice, 3: count out of [0, slots]. The minimum is the first problem in token order.
    pid = tl.program_id(0)
    token = pid // heads_kv
    head_kv = pid % heads_kv
    n = _token_sequence(CuSeqlensQ, token, num_seqs, flags)
    if n < 0:
        return
    _, len_k = sequence(CuSeqlensK, n, max_seqlen_k, flags)
    num_blocks = tl.cdiv(len_k, block_size)
    token64 = token.to(tl.int64)
    row = BlockIdx + token64 * stride_is + head_kv * stride_ih
    base = (token64 * heads_kv + head_kv) * 16777216
    count = num_slots
    if (flags & SEL_FLAG_BLOCK_CNT) != 0:
        raw = tl.load(BlockCnt + token64 * stride_cs + head_kv * stride_ch)
        if (raw < 0) | (raw > num_slots):
            tl.atomic_min(Result, base * 4 + 3)
        count = tl.minimum(tl.maximum(raw, 0), num_slots)
    offs = tl.arange(0, BLOCK)
    for slot in range(0, count):
        b = tl.load(row + slot)
        if (b < -1) | (b >= num_blocks):
            tl.atomic_min(Result, (base + slot) * 4 + 1)
        # A duplicate: an earlier counted slot with the same valid id.
        duplicate = 0
        for start in range(0, slot, BLOCK):
            earlier = start + offs
            seen = tl.load(row + earlier, mask=earlier < slot, other=-1)
            duplicate += tl.sum(((seen == b) & (b >= 0)).to(tl.int32), 0)
        if duplicate > 0:
            tl.atomic_min(Result, (base + slot) * 4 + 2)

"""The sm_90 forward with FlashAttention-3's schedule, written in Gluon (Triton's explicit-layout dialect).

Persistent and warp-specialized. The grid is at most one program per SM (the host picks it, see
src/attn/aotk_attn.c); each program walks query tiles of BLOCK_M rows, tile = (batch, query head, query
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
64 x BLOCK_N fp32 S tile, the 64 x head_dim accumulator and P: without spilling at d=64 and 128, where
ptxas spills 48 bytes per thread at d=256 and (192, 128) and 80-120 in the EXTRAS rows (cuobjdump
--dump-resource-usage, STACK).

What it covers: every forward (dropout alone in its own entry, attn_fwd_hopper_dropout, at d64 and
d128; dropout with softcap or ALiBi goes to the Triton kernels): masks and
windows of both alignments (the key blocks a tile walks come from the window rule, from the tile's
first visible key in the plain two-warpgroup rows; only the blocks at a window's edges and the last
block are masked, and there only the first block compares keys with the left bound), sinks (an
epilogue term, as in the Triton kernels), and, compiled in with EXTRAS, softcap (tanh.approx on the
MUFU) and ALiBi; dense or varlen layouts, head dims with kernels in the catalog (64, 128, 256, and
(192, 128) with Q and K in three 64-column boxes, since Gluon's shapes are powers of two), GQA, any
lengths, lse optional. Its
arguments are attn_fwd_tma's (kernels/attn_fwd.py) plus num_tiles, so the C launcher packs both the
same way; the ones it does not need are ignored. Q, K and V come through host-side descriptors over
[batch, seqlen, heads * d] (varlen: [1, total, heads * d], rows offset by cu_seqlens): dense blocks
past a sequence's end read zeros, varlen ones the next sequence's rows, which are masked (keys) or not
stored (queries). O leaves through a TMA store from the warpgroup's Q slice where the host set
FLAG_O_TMA (out readable by TMA, dqk == dv, not a varlen slice that reaches past its sequence's end),
otherwise through masked stores; lse through masked stores (rows past seqlen_q are never written).

Measured through the JIT on the H100 (bench/explore/hopper/gluon_attn_fwd.py, the same schedule with
4-d descriptors; bf16, batch 16384 / seqlen, heads 2048 / d; ratio to cuDNN in the same run): d=64
non-causal 0.94 / 0.93 at 4k / 8k, causal 0.92 / 0.99; d=128 non-causal 0.96 / 0.88, causal 0.98 /
0.99; d=256 with BLOCK_N 64 and one Q buffer 0.94 / 0.84 non-causal, 0.98 / 0.97 causal. The same
schedule with one program per tile measured 0.86-0.96 at d=64/128. In the library's benchmark (H100,
bf16, d=64 non-causal, 2026-11-25) three warpgroups reach 0.97-1.12x cuDNN from 2048 rows on, two
0.92-0.98x (2026-11-24). With windows, softcap and ALiBi moved here from the Triton TMA kernel
(2026-11-26, bench_attn.py fwd_feat, d=128, TFLOP/s as a fraction of the plain row): a causal window
of 1024 0.61-0.63 -> 0.70-0.75, softcap 0.50-0.55 -> 0.72-0.76, ALiBi 0.56-0.60 -> 0.77-0.83; (192, 128)
from the padded pointer kernel's 0.43-0.47x cuDNN to 1.04-1.11x.

attn_fwd_hopper_paged is the same program over a paged KV cache, for the packed prefill of
aotk_attn_decode (PAGED): K and V come through the block table in boxes of a page's rows (_pages,
_load_paged), block boundaries kept, and the last block's V rows past the request's length zeroed
(_zero_tail); docs/design.md, "The sm_90 paged prefill".

Free of torch and driver calls: imported on a machine with no GPU.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from attn_hopper_common import (FLAG_ALIBI, FLAG_LEFTPAD, FLAG_O_TMA, FLAG_REVERSE, FLAG_SINKS, FLAG_SOFTCAP,
                                FLAG_SPLIT_OUT, FLAG_TOP_LEFT, FLAG_VARLEN, FLAG_WRITE_LSE, LOG2E, philox7, rng_key,
                                tanh_approx, thread_barrier, tma_load, window_bounds)

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
def _tile(tile, sched, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, UNALIGNED: gl.constexpr, PAGED: gl.constexpr):
    """A tile's coordinates, its sequence (first query and key row in the tensors, lengths, diagonal),
    whether it has rows at all, and its key blocks: n_blocks from kb on (_block_start). Dense: sequence b
    starts at row 0 of batch entry b. Varlen: the tensors are [1, total, heads * d] and sequence b's
    rows start at cu_seqlens[b]; the grid covers max_seqlen_q, so a shorter sequence's last tiles have
    no rows and are skipped (by every partition alike). Keys [lo, hi) are the ones the window rule
    (kernels/attn_common.py) lets some row of the tile see; the blocks start at lo itself when UNALIGNED
    (kb = lo: TMA loads from any row, so a window walks no block that only its left edge masks, and
    every row's first key lies in the first block), else at the block boundary below it (kb = lo //
    BLOCK_N, the block's index). At least one block is walked, so
    the pipeline's prologue and epilogue always run; a tile whose rows see no key masks everything.
    PAGED (attn_fwd_hopper_paged): queries packed as in varlen, keys in a paged cache, request b's length
    cache_seqlens[b] (clamped to [0, seqlen_k], seqlen_k being the capacity) and its first key
    cache_leftpad[b] (FLAG_LEFTPAD; else 0), returned as `start`; with num_splits > 1, tile = (request,
    head, query block) x num_splits + split, and the split's key range narrows start and the length."""
    num_m_blocks, heads_q, group_size, seqlen_q, seqlen_k, top_left, lo_rel, hi_rel, reverse, varlen, CuQ, CuK, paged = sched
    split = tile * 0
    if PAGED:
        # Split keys: a tile's splits are consecutive tiles (they share its Q).
        num_splits = paged[9]
        split = tile % num_splits
        tile = tile // num_splits
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
    start = b * 0
    if PAGED:
        SeqK = paged[1]
        Leftpad = paged[2]
        leftpad = paged[5]
        q_start = gl.load(CuQ + b)
        sq = gl.minimum(gl.load(CuQ + b + 1) - q_start, seqlen_q)
        sk = gl.minimum(gl.maximum(gl.load(SeqK + b), 0), seqlen_k)
        if leftpad:
            start = gl.minimum(gl.maximum(gl.load(Leftpad + b), 0), sk)
    elif varlen:
        q_start = gl.load(CuQ + b)
        k_start = gl.load(CuK + b)
        # A sequence longer than max_seqlen is cut to it, as in the Triton kernels.
        sq = gl.minimum(gl.load(CuQ + b + 1) - q_start, seqlen_q)
        sk = gl.minimum(gl.load(CuK + b + 1) - k_start, seqlen_k)
    diag = sk - sq
    if top_left:
        diag = sk * 0
    last = gl.minimum(m0 + BLOCK_M, sq) - 1
    lo = gl.minimum(gl.maximum(m0 + diag + lo_rel, 0), sk)
    hi = gl.maximum(gl.minimum(last + diag + hi_rel + 1, sk), 0)
    if PAGED:
        lo = gl.maximum(lo, start)  # start <= sk
        # Split `split` takes keys [split * split_keys, (split + 1) * split_keys) (split_keys a multiple
        # of BLOCK_N), the last one every key from its first on (as the decoding kernel's: the split count
        # plans for max_seqlen_k): its first key raises start, its end lowers the length the masks and
        # the page lookups see (the diagonal stays the request's). A split that no row of the tile sees
        # walks one block, all masked (out 0, lse -inf, which the merge skips).
        split_lo = split * paged[10]
        split_hi = gl.maximum(split_lo + paged[10], (split == num_splits - 1).to(gl.int32) * sk)
        lo = gl.maximum(lo, split_lo)
        hi = gl.minimum(hi, split_hi)
        start = gl.maximum(start, split_lo)
        sk = gl.minimum(sk, split_hi)
    if UNALIGNED:
        kb = lo
        n_blocks = gl.maximum(gl.cdiv(hi - lo, BLOCK_N), 1)
    else:
        kb = lo // BLOCK_N
        n_blocks = gl.maximum(gl.cdiv(hi - kb * BLOCK_N, BLOCK_N), 1)
    return b, m0, hq, hq // group_size, kb, n_blocks, q_start, k_start, sq, sk, diag, m0 < sq, start, split


@gluon.jit
def _block_start(kb, j, BLOCK_N: gl.constexpr, UNALIGNED: gl.constexpr):
    # The first key of a tile's block j (kb from _tile).
    if UNALIGNED:
        n0 = kb + j * BLOCK_N
    else:
        n0 = (kb + j) * BLOCK_N
    return n0


@gluon.jit
def _load(desc, bufs, ready, empty, it, coord0, coord1, coord2, STAGES: gl.constexpr, CHUNKS: gl.constexpr):
    # Stage it % STAGES: CHUNKS boxes side by side along the head dim (buffers s * CHUNKS + c). A fresh
    # mbarrier counts as having completed the phase before phase 0, so waiting on parity 1 passes at
    # once: the first STAGES loads do not wait.
    s = it % STAGES
    mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(s), CHUNKS * desc.block_type.nbytes)
    for c in gl.static_range(CHUNKS):
        tma_load(desc, [coord0, coord1, coord2 + c * desc.block_type.shape[2]], ready.index(s),
                  bufs.index(s * CHUNKS + c))


@gluon.jit
def _pages(table_row, n0, sk, page_shift, PAGE_BOX: gl.constexpr, BLOCK_N: gl.constexpr):
    # The pages of keys [n0, n0 + BLOCK_N), one a box of PAGE_BOX rows, as a tuple of scalars loaded from
    # the request's block-table row (pages of 2^page_shift keys): the producer issues the loads before it
    # waits for a free stage, and takes each page from its own register (a vector would need a
    # reduction across the warp for each box). Boxes from the request's length on take page -1: TMA fills
    # a box outside the tensor with zeros and still counts its bytes, so no block-table entry past the
    # length is read.
    pages = ()
    for u in gl.static_range(BLOCK_N // PAGE_BOX):
        key = n0 + u * PAGE_BOX
        pages = pages + (gl.load(table_row + (key >> page_shift), mask=key < sk, other=-1), )
    return pages


@gluon.jit
def _load_paged(desc, bufs, ready, empty, it, pages, n0, page_shift, col, STAGES: gl.constexpr, CHUNKS: gl.constexpr,
                BLOCK_N: gl.constexpr):
    # Stage it % STAGES of a paged cache: keys [n0, n0 + BLOCK_N) of one request, read as BLOCK_N //
    # PAGE_BOX boxes of PAGE_BOX rows from `pages` (_pages), each inside one page (the page size is a
    # power of two, at least PAGE_BOX, and n0 a multiple of BLOCK_N). A stage holds CHUNKS buffers [1,
    # BLOCK_N, BOX]; a 128-byte swizzle keeps each 64-column slice of a buffer as its own [BLOCK_N, 64]
    # tile (as the dense kernels' TMA loads fill it), so the boxes are [1, PAGE_BOX, W] at W = 64 columns,
    # stored at sub-tile (chunk, slice, box). (The rows past the length inside the last box are read from
    # its page; the consumer zeroes them in V: _zero_tail.)
    PAGE_BOX: gl.constexpr = desc.block_type.shape[1]
    W: gl.constexpr = desc.block_type.shape[2]
    H: gl.constexpr = bufs.shape[3] // W
    NSUB: gl.constexpr = BLOCK_N // PAGE_BOX
    s = it % STAGES
    mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(s), CHUNKS * H * NSUB * desc.block_type.nbytes)
    view = bufs._reinterpret(bufs.dtype, [bufs.shape[0] * H * NSUB, 1, PAGE_BOX, W], desc.layout)
    row_mask = (1 << page_shift) - 1
    for u in gl.static_range(NSUB):
        row = (n0 + u * PAGE_BOX) & row_mask
        for c in gl.static_range(CHUNKS):
            for h in gl.static_range(H):
                tma_load(desc, [pages[u], row, col + (c * H + h) * W], ready.index(s),
                          view.index(((s * CHUNKS + c) * H + h) * NSUB + u))


@gluon.jit
def _zero_tail(v_bufs, sv, valid, PAGE_BOX: gl.constexpr, W: gl.constexpr, BLOCK_N: gl.constexpr):
    # The paged forward's last block: V rows [valid, BLOCK_N) lie past the request's length. Boxes that
    # start past it were filled with zeros (_load_paged), but the box holding the length also read the
    # rows after it from its page, which may hold anything (a NaN there, times its zero probability, is
    # NaN). Zero them in V's stage sv (K's are masked out of the scores). 0 < valid < BLOCK_N.
    H: gl.constexpr = v_bufs.shape[3] // W
    NSUB: gl.constexpr = BLOCK_N // PAGE_BOX
    view = v_bufs._reinterpret(v_bufs.dtype, [v_bufs.shape[0] * H * NSUB, 1, PAGE_BOX, W], v_bufs.layout)
    tail_layout: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 4, 8], [1, 4, 1], [2, 1, 0])
    rows = gl.arange(0, PAGE_BOX, layout=gl.SliceLayout(0, gl.SliceLayout(2, tail_layout)))
    keep = gl.expand_dims(gl.expand_dims(rows < valid % PAGE_BOX, 0), 2)
    u = valid // PAGE_BOX
    for h in gl.static_range(H):
        box = view.index((sv * H + h) * NSUB + u)
        x = box.load(tail_layout)
        box.store(gl.where(keep, x, gl.zeros_like(x)))


@gluon.jit
def _producer(desc_q, desc_k, desc_v, q_bufs, k_bufs, v_bufs, bars, sched, num_tiles,
              HEAD_DIM_QK: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, Q_BUFS: gl.constexpr, UNALIGNED: gl.constexpr, PAGED: gl.constexpr):
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn = bars
    NUM_WG: gl.constexpr = BLOCK_M // ROWS
    QK_CHUNKS: gl.constexpr = HEAD_DIM_QK // desc_q.block_type.shape[2]
    varlen_i = sched[9].to(gl.int32)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    kit = 0
    vit = 0
    t = 0
    for r in range(gl.cdiv(num_tiles, nprog)):
        tile = _tile_id(r, pid, nprog)
        b, m0, hq, hkv, kb, n_blocks, q_start, k_start, sq, sk, diag, active, start, split = _tile(
            gl.minimum(tile, num_tiles - 1), sched, BLOCK_M, BLOCK_N, UNALIGNED, PAGED)
        if (tile < num_tiles) & active:
            # The view's batch coordinate: the batch entry, or 0 for varlen (starts are in the rows).
            bc = b - b * varlen_i
            # The tile's first key row in the view (PAGED: the request's first key of the tile).
            k_row = k_start + _block_start(kb, 0, BLOCK_N, UNALIGNED)
            # K(0) first: the first product needs it and Q; then Q, then K(j+1) before V(j), the order
            # in which the consumers use them.
            if PAGED:
                table_row = sched[12][0] + b.to(gl.int64) * sched[12][3]
                page_shift = sched[12][4]
                PAGE_BOX: gl.constexpr = desc_k.block_type.shape[1]
                pages = _pages(table_row, k_row, sk, page_shift, PAGE_BOX, BLOCK_N)
                _load_paged(desc_k, k_bufs, k_ready, k_empty, kit, pages, k_row, page_shift, hkv * HEAD_DIM_QK,
                            STAGES, QK_CHUNKS, BLOCK_N)
            else:
                _load(desc_k, k_bufs, k_ready, k_empty, kit, bc, k_row, hkv * HEAD_DIM_QK, STAGES, QK_CHUNKS)
            kit += 1
            qs = t % Q_BUFS
            mbarrier.wait(q_empty.index(qs), ((t // Q_BUFS) & 1) ^ 1)
            mbarrier.expect(q_ready.index(qs), NUM_WG * QK_CHUNKS * desc_q.block_type.nbytes)
            for w in gl.static_range(NUM_WG):
                for c in gl.static_range(QK_CHUNKS):
                    tma_load(desc_q, [bc, q_start + m0 + ROWS * w, hq * HEAD_DIM_QK + c * desc_q.block_type.shape[2]],
                              q_ready.index(qs), q_bufs.index((qs * NUM_WG + w) * QK_CHUNKS + c))
            for j in range(n_blocks):
                if j + 1 < n_blocks:
                    if PAGED:
                        pages = _pages(table_row, k_row + (j + 1) * BLOCK_N, sk, page_shift, PAGE_BOX, BLOCK_N)
                        _load_paged(desc_k, k_bufs, k_ready, k_empty, kit, pages, k_row + (j + 1) * BLOCK_N,
                                    page_shift, hkv * HEAD_DIM_QK, STAGES, QK_CHUNKS, BLOCK_N)
                    else:
                        _load(desc_k, k_bufs, k_ready, k_empty, kit, bc, k_row + (j + 1) * BLOCK_N, hkv * HEAD_DIM_QK,
                              STAGES, QK_CHUNKS)
                    kit += 1
                if PAGED:
                    pages = _pages(table_row, k_row + j * BLOCK_N, sk, page_shift, PAGE_BOX, BLOCK_N)
                    _load_paged(desc_v, v_bufs, v_ready, v_empty, vit, pages, k_row + j * BLOCK_N, page_shift,
                                hkv * HEAD_DIM_V, STAGES, 1, BLOCK_N)
                else:
                    _load(desc_v, v_bufs, v_ready, v_empty, vit, bc, k_row + j * BLOCK_N, hkv * HEAD_DIM_V, STAGES, 1)
                vit += 1
            t += 1


@gluon.jit
def _softmax_step(qk, m_i, l_i, n0, rows, first_key, last_key, full_lo, full_hi, row_alibi, scores,
                  s_layout: gl.constexpr, BLOCK_N: gl.constexpr, EXTRAS: gl.constexpr, LEFT: gl.constexpr,
                  ALIBI_FP32: gl.constexpr):
    # Row i sees keys first_key[i] <= j <= last_key[i] (the window rule and the key length). A block
    # that every row of this warpgroup sees in full ([full_lo, full_hi]) is not masked: that is every
    # block but the edges of a window and the last one. LEFT: the block may start before some row's
    # first key; without it a masked block compares each key with the right bound alone (one compare a
    # score fewer). ALIBI_FP32: ALiBi's distances from fp32 column offsets (below).
    qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags = scores
    cols = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if EXTRAS:
        # Scores in log2 units with softcap and ALiBi applied (attn_common.modified_scores).
        s = qk * qk_scale_log2
        if (flags & FLAG_SOFTCAP) != 0:
            s = tanh_approx(qk * softcap_scale) * softcap_log2
        if (flags & FLAG_ALIBI) != 0:
            if ALIBI_FP32:
                # |i + diag - j| as |(i + diag - n0) - (j - n0)| in fp32: the first term converted once a
                # row and block, the second the layout's column offsets (converted once, kept in
                # registers), so that a score costs one FADD and no I2F: conversions issue at the MUFU's
                # rate, 16 a clock an SM, so one a score cost as much as its exp2. Exact while
                # |i + diag - n0| < 2^24. Only where registers allow (head dim 64: JIT, H100, ALiBi
                # forward 1.20-1.28x; at 128 the 32 offsets a thread keeps made it spill, 0.73x).
                rel = gl.expand_dims((row_alibi - n0).to(gl.float32), 1)
                offs = gl.expand_dims(gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout)).to(gl.float32), 0)
                s = s - slope_log2 * gl.abs(rel - offs)
            else:
                # Converted before the absolute value, which then folds into the FFMA as an operand
                # modifier (an integer IABS per score otherwise: 7-12% of the ALiBi row's time).
                distance = gl.abs((gl.expand_dims(row_alibi, 1) - gl.expand_dims(cols, 0)).to(gl.float32))
                s = s - slope_log2 * distance
        scale = 1.0
    else:
        s = qk
        scale = qk_scale_log2
    need_mask = (n0 < full_lo) | (n0 + BLOCK_N - 1 > full_hi)
    if need_mask:
        c = gl.expand_dims(cols, 0)
        if LEFT:
            ok = (c >= gl.expand_dims(first_key, 1)) & (c <= gl.expand_dims(last_key, 1))
        else:
            ok = c <= gl.expand_dims(last_key, 1)
        s = gl.where(ok, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * scale)
    # A row that has seen no visible key keeps m = -inf; subtract 0 instead (exp2 gives 0, not NaN).
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * scale - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _dropout_rows(row0, ROWS: gl.constexpr):
    # The per-tile half of the keep rule (attn_common.dropout_keep; docs/design.md, "Dropout") for query
    # rows row0 .. row0 + ROWS - 1 (row0 a multiple of 16), in a 64 x 16 wgmma accumulator layout: element
    # (r, k), r = 16 w + 8 a' + l / 4 and k = 8 b'' + 2 q + c' for warp w and lane l, stands for the counter
    # (4 J + q, 4 I + p) of its row with J's low bits 4 a' + 2 b'' + c': the 8 counters of a thread are the 8
    # its 64 scores of a 128-key block need. Returns the key counter's per-lane part (4 J_low + q), the row
    # counter (4 I + p) and whether the row is odd (e: words 2 and 3).
    L16: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])
    r = gl.expand_dims(gl.arange(0, ROWS, layout=gl.SliceLayout(1, L16)), 1)
    k = gl.expand_dims(gl.arange(0, 16, layout=gl.SliceLayout(0, L16)), 0)
    zero = gl.zeros([ROWS, 16], gl.int32, L16)
    i = zero + row0 + r
    key_part = (zero + 4 * (((r >> 3) & 1) * 4 + ((k >> 3) & 1) * 2 + (k & 1)) + ((k >> 1) & 3)).to(gl.uint32,
                                                                                                 bitcast=True)
    row_counter = (4 * (i >> 4) + ((i >> 1) & 3)).to(gl.uint32, bitcast=True)
    odd = (i & 1) != 0
    return key_part, row_counter, odd


@gluon.jit
def _dropout_apply(p, n0, drop, s_layout: gl.constexpr):
    # P with the dropped scores zeroed, for keys n0 .. n0 + 127 (n0 a multiple of 16): one Philox call per
    # counter, 8 a thread; the two words of the row's e spread over its 64 scores by byte in registers
    # (join, reshape, permute: row 16 w + 8 a + l / 4, key 16 J + 8 b + 2 q + c, byte 2 a + b of word c).
    key_part, row_counter, odd, k0, k1, stream, offset_lo, threshold = drop
    ROWS: gl.constexpr = p.shape[0]
    gl.static_assert(p.shape[1] == 128, "the dropout spreading is written for 128-key blocks")
    c0 = key_part + (4 * (n0 >> 4)).to(gl.uint32, bitcast=True)
    w0, w1, w2, w3 = philox7(k0, k1, c0, row_counter, stream, offset_lo)
    x = gl.join(gl.where(odd, w2, w0), gl.where(odd, w3, w1))
    x = gl.join(gl.join(x & 255, (x >> 8) & 255), gl.join((x >> 16) & 255, x >> 24))
    x = gl.permute(x.reshape([ROWS // 16, 2, 8, 2, 4, 2, 2, 2, 2]), [0, 8, 2, 1, 3, 5, 7, 4, 6]).reshape([ROWS, 128])
    keep = gl.convert_layout(x >= threshold, s_layout)
    return gl.where(keep, p, 0.0)


@gluon.jit
def _scores(q_bufs, k_bufs, q_first, k_first, zero_s, ROWS: gl.constexpr, BLOCK_N: gl.constexpr,
            CHUNKS: gl.constexpr):
    # S = Q K^T as asynchronous wgmma, one per head-dim chunk (one but at (192, 128), whose Q and K are
    # three 64-column chunks: Gluon's shapes are powers of two), accumulated in order.
    CHUNK: gl.constexpr = q_bufs.shape[3]
    q = q_bufs.index(q_first).reshape([ROWS, CHUNK])
    k_t = k_bufs.index(k_first).reshape([BLOCK_N, CHUNK]).permute((1, 0))
    s_token = warpgroup_mma(q, k_t, zero_s, use_acc=False, is_async=True)
    for c in gl.static_range(1, CHUNKS):
        q = q_bufs.index(q_first + c).reshape([ROWS, CHUNK])
        k_t = k_bufs.index(k_first + c).reshape([BLOCK_N, CHUNK]).permute((1, 0))
        s_token = warpgroup_mma(q, k_t, s_token, is_async=True)
    return s_token


@gluon.jit
def _store_o(out, o_args, o_layout: gl.constexpr, ROWS: gl.constexpr, HEAD_DIM_V: gl.constexpr):
    # A warpgroup's 64 rows of O by masked stores (rows past seqlen_q are not written).
    Out, b, q_start, hq, row0, seqlen_q, stride_ob, stride_os, stride_oh = o_args
    rows_o = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    cols_o = gl.arange(0, HEAD_DIM_V, layout=gl.SliceLayout(0, o_layout))
    o_base = Out + b.to(gl.int64) * stride_ob + q_start.to(gl.int64) * stride_os + hq.to(gl.int64) * stride_oh
    o_ptrs = o_base + gl.expand_dims(rows_o.to(gl.int64) * stride_os, 1) + gl.expand_dims(cols_o, 0)
    o_mask = gl.expand_dims(rows_o < seqlen_q, 1) & gl.expand_dims(cols_o < HEAD_DIM_V, 0)
    gl.store(o_ptrs, out, mask=o_mask)


@gluon.jit
def _epilogue_store(out, m_i, l_i, has_keys, rows, o_args, q_bufs, q_first, q_empty, qs, DescO, Lse, stride_lb,
                    stride_lh, flags, o_tma, o_layout: gl.constexpr, ROWS: gl.constexpr, HEAD_DIM_V: gl.constexpr,
                    O_TMA: gl.constexpr):
    # A warpgroup's 64 rows of O (normalized, fp32 `out`) in q's dtype and their lse.
    dtype: gl.constexpr = q_bufs.dtype
    Out, b, q_start, hq, row0, seqlen_q, stride_ob, stride_os, stride_oh = o_args
    if O_TMA:
        if o_tma:
            # O through shared memory and one TMA store per warpgroup: into this tile's Q slice, which every
            # QK^T has read. The buffer goes back to the producer once the store has read it.
            o_buf = q_bufs.index(q_first)
            o_buf.reshape([ROWS, HEAD_DIM_V]).store(out.to(dtype))
            fence_async_shared()
            thread_barrier()
            bc = b - b * ((flags & FLAG_VARLEN) != 0).to(gl.int32)
            tma.async_copy_shared_to_global(DescO, [bc, q_start + row0, hq * HEAD_DIM_V], o_buf)
            tma.store_wait(0)
            mbarrier.arrive(q_empty.index(qs))
        else:
            _store_o(out.to(dtype), o_args, o_layout, ROWS, HEAD_DIM_V)
    else:
        _store_o(out.to(dtype), o_args, o_layout, ROWS, HEAD_DIM_V)
    if (flags & FLAG_WRITE_LSE) != 0:
        lse = gl.where(has_keys, (m_i + gl.log2(l_i)) * 0.6931471805599453, float("-inf"))
        lse_ptrs = Lse + b.to(gl.int64) * stride_lb + hq.to(gl.int64) * stride_lh + q_start.to(gl.int64) + rows
        gl.store(lse_ptrs, lse, mask=rows < seqlen_q)


@gluon.jit
def _consumer(q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, DescO, Out, Lse, Sinks, AlibiSlopes, stride_ob, stride_os,
              stride_oh, stride_lb, stride_lh, stride_ab, flags, qk_scale_log2, softcap_scale, softcap_log2,
              WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM_QK: gl.constexpr,
              HEAD_DIM_V: gl.constexpr, STAGES: gl.constexpr, Q_BUFS: gl.constexpr, EXTRAS: gl.constexpr,
              O_TMA: gl.constexpr, UNALIGNED: gl.constexpr, PAGED: gl.constexpr, PAGE_BOX: gl.constexpr,
              RngState, dropout_threshold, dropout_scale, DROPOUT: gl.constexpr):
    # This warpgroup owns query rows [WG * ROWS, WG * ROWS + ROWS) of each tile. DROPOUT: the keep rule of
    # attn_common.dropout_keep drawn in registers (_dropout_apply); l sums the undropped P, O the kept.
    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn = bars
    NUM_WG: gl.constexpr = BLOCK_M // ROWS
    lo_rel = sched[6]
    hi_rel = sched[7]
    FIRST: gl.constexpr = 1 if WG == 0 else 0  # warpgroup 0 takes the first turn
    OTHER: gl.constexpr = (WG + 1) % NUM_WG  # the turn passes round-robin
    dtype: gl.constexpr = q_bufs.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM_V, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    QK_CHUNKS: gl.constexpr = HEAD_DIM_QK // q_bufs.shape[3]
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    if DROPOUT:
        k0, k1, offset_lo = rng_key(RngState)
        threshold = dropout_threshold.to(gl.uint32, bitcast=True)
    # Ring position of this tile's first K and V block: both rings advance by n_blocks per tile.
    it = 0
    t = 0
    turn_phase = 0
    for r in range(gl.cdiv(num_tiles, nprog)):
        tile = _tile_id(r, pid, nprog)
        b, m0, hq, hkv, kb, n_blocks, q_start, k_start, seqlen_q, seqlen_k, diag, active, start, split = _tile(
            gl.minimum(tile, num_tiles - 1), sched, BLOCK_M, BLOCK_N, UNALIGNED, PAGED)
        if (tile < num_tiles) & active:
            row0 = m0 + WG * ROWS
            rows = row0 + gl.arange(0, ROWS, layout=row_s)
            # Each row's visible keys, and the keys every row of this warpgroup sees: rows past seqlen_q
            # count too (they are computed and never stored), which only masks more.
            first_key = gl.minimum(gl.maximum(rows + diag + lo_rel, 0), seqlen_k)
            last_key = gl.maximum(gl.minimum(rows + diag + hi_rel, seqlen_k - 1), -1)
            full_lo = gl.minimum(gl.maximum(row0 + ROWS - 1 + diag + lo_rel, 0), seqlen_k)
            full_hi = gl.maximum(gl.minimum(row0 + diag + hi_rel, seqlen_k - 1), -1)
            if PAGED:
                # The request's first key (cache_leftpad; 0 without it), at most seqlen_k.
                first_key = gl.maximum(first_key, start)
                full_lo = gl.maximum(full_lo, start)
            slope_log2 = qk_scale_log2 * 0.0
            if EXTRAS:
                if (flags & FLAG_ALIBI) != 0:
                    slope_log2 = gl.load(AlibiSlopes + b.to(gl.int64) * stride_ab + hq) * LOG2E
            scores = (qk_scale_log2, softcap_scale, softcap_log2, slope_log2, flags)
            if DROPOUT:
                key_part, row_counter, odd = _dropout_rows(row0, ROWS)
                stream = (b * sched[1] + hq).to(gl.uint32, bitcast=True)
                drop = (key_part, row_counter, odd, k0, k1, stream, offset_lo, threshold)
            row_alibi = rows + diag
            qs = t % Q_BUFS
            q_first = (qs * NUM_WG + WG) * QK_CHUNKS
            acc = gl.zeros([ROWS, HEAD_DIM_V], gl.float32, o_layout)
            m_i = gl.full([ROWS], float("-inf"), gl.float32, row_s)
            l_i = gl.zeros([ROWS], gl.float32, row_s)

            # Prologue: S_0.
            s = it % STAGES
            mbarrier.wait(k_ready.index(s), (it // STAGES) & 1)
            mbarrier.wait(q_ready.index(qs), (t // Q_BUFS) & 1)
            mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
            s_token = _scores(q_bufs, k_bufs, q_first, s * QK_CHUNKS, zero_s, ROWS, BLOCK_N, QK_CHUNKS)
            mbarrier.arrive(turn.index(OTHER))
            turn_phase ^= 1
            qk = warpgroup_mma_wait(0, deps=(s_token, ))
            mbarrier.arrive(k_empty.index(s))
            p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, _block_start(kb, 0, BLOCK_N, UNALIGNED), rows, first_key,
                                               last_key, full_lo, full_hi, row_alibi, scores, s_layout, BLOCK_N, EXTRAS,
                                               True, HEAD_DIM_V <= 64)
            if DROPOUT:
                p = _dropout_apply(p, _block_start(kb, 0, BLOCK_N, UNALIGNED), drop, s_layout)
            p_op = gl.convert_layout(p.to(dtype), p_layout)

            for j in range(1, n_blocks):
                kj = it + j  # K(j) and V(j - 1)
                s = kj % STAGES
                sv = (kj - 1) % STAGES
                mbarrier.wait(k_ready.index(s), (kj // STAGES) & 1)
                mbarrier.wait(v_ready.index(sv), ((kj - 1) // STAGES) & 1)
                mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
                s_token = _scores(q_bufs, k_bufs, q_first, s * QK_CHUNKS, zero_s, ROWS, BLOCK_N, QK_CHUNKS)
                v2 = v_bufs.index(sv).reshape([BLOCK_N, HEAD_DIM_V])
                o_token = warpgroup_mma(p_op, v2, acc, is_async=True)
                mbarrier.arrive(turn.index(OTHER))
                turn_phase ^= 1
                # wgmma groups retire in order: with one left outstanding, S_j (issued first) is done.
                qk = warpgroup_mma_wait(1, deps=(s_token, ))
                mbarrier.arrive(k_empty.index(s))
                p, m_i, l_i, alpha = _softmax_step(qk, m_i, l_i, _block_start(kb, j, BLOCK_N, UNALIGNED), rows,
                                                   first_key, last_key, full_lo, full_hi, row_alibi, scores, s_layout,
                                                   BLOCK_N, EXTRAS, not UNALIGNED, HEAD_DIM_V <= 64)
                acc, p_done = warpgroup_mma_wait(0, deps=(o_token, p_op))
                mbarrier.arrive(v_empty.index(sv))
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
                if DROPOUT:
                    p = _dropout_apply(p, _block_start(kb, j, BLOCK_N, UNALIGNED), drop, s_layout)
                p_op = gl.convert_layout(p.to(dtype), p_layout)

            # Every QK^T of this tile is done: its Q buffer may take the tile after next, unless O leaves
            # through it (below). Varlen: a slice that reaches past its sequence's end would write the next
            # sequence's rows, so it takes the masked stores (dense rows are clipped at seqlen_q by the
            # descriptor).
            o_tma = ((flags & FLAG_O_TMA) != 0) & (((flags & FLAG_VARLEN) == 0) | (row0 + ROWS <= seqlen_q))
            if not O_TMA:
                mbarrier.arrive(q_empty.index(qs))
            elif o_tma == 0:
                mbarrier.arrive(q_empty.index(qs))
            # Epilogue: O += P_last V_last.
            it += n_blocks
            sv = (it - 1) % STAGES
            mbarrier.wait(v_ready.index(sv), ((it - 1) // STAGES) & 1)
            if PAGED:
                if WG == 0:
                    # Warpgroup 0 zeroes the rows past the length in the last block's V (_zero_tail) before its
                    # product; warpgroup 1 issues its own after 0 has passed it the turn, so it reads them
                    # zeroed (the fence orders the stores before the tensor cores' reads, the turn's
                    # mbarrier before warpgroup 1's).
                    valid = seqlen_k - _block_start(kb, n_blocks - 1, BLOCK_N, UNALIGNED)
                    if (valid > 0) & (valid < BLOCK_N) & (valid % PAGE_BOX != 0):
                        _zero_tail(v_bufs, sv, valid, PAGE_BOX, 64, BLOCK_N)
                        fence_async_shared()
                        thread_barrier()
            mbarrier.wait(turn.index(WG), turn_phase ^ FIRST)
            v2 = v_bufs.index(sv).reshape([BLOCK_N, HEAD_DIM_V])
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
            if DROPOUT:
                # l summed the undropped P (lse is the softmax's before dropout); O the kept, scaled here.
                l_safe = l_safe / dropout_scale
            out = acc * gl.expand_dims(gl.convert_layout(1.0 / l_safe, row_o), 1)
            o_args = (Out, b, q_start, hq, row0, seqlen_q, stride_ob, stride_os, stride_oh)
            if PAGED:
                if (flags & FLAG_SPLIT_OUT) != 0:
                    # Split keys: fp32 partials [split, request, max_seqlen_q, heads_q, HEAD_DIM_V] (out's
                    # strides stand for theirs: the host passes the partials') and partial LSEs through Lse
                    # [split, request, heads_q, max_seqlen_q], for attn_merge (FLAG_SPLIT_OUT). The host clears
                    # FWD_FLAG_O_TMA (the Q buffer went back above) and FLAG_SINKS (the merge adds the sink).
                    part = (sched[12][6] + split.to(gl.int64) * sched[12][7], b, q_start * 0, hq, row0, seqlen_q,
                            stride_ob, stride_os, stride_oh)
                    _store_o(out, part, o_layout, ROWS, HEAD_DIM_V)
                    lse = gl.where(has_keys, (m_i + gl.log2(l_i)) * 0.6931471805599453, float("-inf"))
                    lse_ptrs = (Lse + split.to(gl.int64) * sched[12][8] + b.to(gl.int64) * stride_lb +
                                hq.to(gl.int64) * stride_lh + rows)
                    gl.store(lse_ptrs, lse, mask=rows < seqlen_q)
                else:
                    _epilogue_store(out, m_i, l_i, has_keys, rows, o_args, q_bufs, q_first, q_empty, qs, DescO, Lse,
                                    stride_lb, stride_lh, flags, o_tma, o_layout, ROWS, HEAD_DIM_V, O_TMA)
            else:
                _epilogue_store(out, m_i, l_i, has_keys, rows, o_args, q_bufs, q_first, q_empty, qs, DescO, Lse,
                                stride_lb, stride_lh, flags, o_tma, o_layout, ROWS, HEAD_DIM_V, O_TMA)
            t += 1


@gluon.jit
def _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, AlibiSlopes, Sinks, stride_ob, stride_os, stride_oh, stride_lb,
             stride_lh, stride_ab, seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_left, window_right,
             flags, qk_scale_log2, softcap_scale, softcap_log2, DescQ, DescK, DescV, DescO, num_tiles, paged,
             HEAD_DIM_QK: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             STAGES: gl.constexpr, EXTRAS: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
             PAGED: gl.constexpr, RngState, dropout_threshold, dropout_scale, DROPOUT: gl.constexpr):
    # The program of both entry points: BLOCK_M // ROWS consumer warpgroups.
    NUM_WG: gl.constexpr = BLOCK_M // ROWS
    gl.static_assert(BLOCK_M == NUM_WG * ROWS, "one 64-row slice of the tile per consumer warpgroup")
    gl.static_assert((NUM_WG == 2) | (NUM_WG == 3), "two or three consumer warpgroups")
    # Two Q buffers let the next tile's Q load during this one; from d=192 on they do not fit beside the
    # ring.
    Q_BUFS: gl.constexpr = 2 if HEAD_DIM_QK <= 128 else 1
    # O leaves through a TMA store from the warpgroup's Q slice where the two have one shape.
    O_TMA: gl.constexpr = HEAD_DIM_QK == HEAD_DIM_V
    # A tile's key blocks start at its first visible key where a block holds every row's first key
    # (BLOCK_N >= BLOCK_M - 1, see _tile): then only the first block compares keys with a window's left
    # bound. The 192-row tiles and d=256's 64-key blocks cannot drop the compare, and keep block
    # boundaries, as do the EXTRAS rows: there the change measured slower, compare dropped or not
    # (ptxas schedules their loops differently: three-warpgroup d=64 5-11%, softcap 4-7%, ALiBi 11%).
    # The host costs tiles by the same rule (tile_key_blocks in src/attn/aotk_attn.c).
    # The paged forward keeps block boundaries: its boxes must not cross a page.
    # Dropout's counters take key blocks that start at multiples of 16 (_dropout_apply): block boundaries too.
    UNALIGNED: gl.constexpr = (not EXTRAS) and (not PAGED) and (not DROPOUT) and BLOCK_N >= BLOCK_M - 1
    # Q and K come in boxes of the descriptors' width: the head dim, or 64 columns at (192, 128).
    QK_CHUNKS: gl.constexpr = HEAD_DIM_QK // DescQ.block_type.shape[2]
    gl.static_assert(QK_CHUNKS * DescQ.block_type.shape[2] == HEAD_DIM_QK, "whole boxes along the head dim")
    lo_rel, hi_rel = window_bounds(window_left, window_right)
    top_left = (flags & FLAG_TOP_LEFT) != 0
    reverse = (flags & FLAG_REVERSE) != 0
    varlen = (flags & FLAG_VARLEN) != 0

    dtype: gl.constexpr = DescQ.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [Q_BUFS * NUM_WG * QK_CHUNKS] + DescQ.block_type.shape, DescQ.layout)
    if PAGED:
        # K and V arrive in boxes of PAGE_BOX rows (_load_paged) into stages shaped like the dense kernel's:
        # Q's box width for K, O's for V (the same 128-byte swizzle as the boxes').
        PAGE_BOX: gl.constexpr = DescK.block_type.shape[1]
        gl.static_assert(BLOCK_N % PAGE_BOX == 0, "whole boxes a key block")
        gl.static_assert(DescK.block_type.shape[2] == 64, "64-column boxes (one 128-byte swizzle)")
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES * QK_CHUNKS, 1, BLOCK_N, DescQ.block_type.shape[2]],
                                           DescQ.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, BLOCK_N, HEAD_DIM_V], DescO.layout)
    else:
        PAGE_BOX: gl.constexpr = 0
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES * QK_CHUNKS] + DescK.block_type.shape, DescK.layout)
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
    sched = (num_m_blocks, heads_q, group_size, seqlen_q, seqlen_k, top_left, lo_rel, hi_rel, reverse, varlen,
             CuSeqlensQ, CuSeqlensK, paged)
    # (The argument tuples are written out in each call: a tuple held in a variable loses its constexprs.)
    if NUM_WG == 3:
        gl.warp_specialize([
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, DescO, Out, Lse, Sinks, AlibiSlopes, stride_ob,
                         stride_os, stride_oh, stride_lb, stride_lh, stride_ab, flags, qk_scale_log2, softcap_scale,
                         softcap_log2, 0, BLOCK_M, BLOCK_N, HEAD_DIM_QK, HEAD_DIM_V, STAGES, Q_BUFS, EXTRAS, O_TMA,
                         UNALIGNED, PAGED, PAGE_BOX, RngState, dropout_threshold, dropout_scale, DROPOUT)),
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, DescO, Out, Lse, Sinks, AlibiSlopes, stride_ob,
                         stride_os, stride_oh, stride_lb, stride_lh, stride_ab, flags, qk_scale_log2, softcap_scale,
                         softcap_log2, 1, BLOCK_M, BLOCK_N, HEAD_DIM_QK, HEAD_DIM_V, STAGES, Q_BUFS, EXTRAS, O_TMA,
                         UNALIGNED, PAGED, PAGE_BOX, RngState, dropout_threshold, dropout_scale, DROPOUT)),
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, DescO, Out, Lse, Sinks, AlibiSlopes, stride_ob,
                         stride_os, stride_oh, stride_lb, stride_lh, stride_ab, flags, qk_scale_log2, softcap_scale,
                         softcap_log2, 2, BLOCK_M, BLOCK_N, HEAD_DIM_QK, HEAD_DIM_V, STAGES, Q_BUFS, EXTRAS, O_TMA,
                         UNALIGNED, PAGED, PAGE_BOX, RngState, dropout_threshold, dropout_scale, DROPOUT)),
            (_producer, (DescQ, DescK, DescV, q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, HEAD_DIM_QK,
                         HEAD_DIM_V, BLOCK_M, BLOCK_N, STAGES, Q_BUFS, UNALIGNED, PAGED)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, DescO, Out, Lse, Sinks, AlibiSlopes, stride_ob,
                         stride_os, stride_oh, stride_lb, stride_lh, stride_ab, flags, qk_scale_log2, softcap_scale,
                         softcap_log2, 0, BLOCK_M, BLOCK_N, HEAD_DIM_QK, HEAD_DIM_V, STAGES, Q_BUFS, EXTRAS, O_TMA,
                         UNALIGNED, PAGED, PAGE_BOX, RngState, dropout_threshold, dropout_scale, DROPOUT)),
            (_consumer, (q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, DescO, Out, Lse, Sinks, AlibiSlopes, stride_ob,
                         stride_os, stride_oh, stride_lb, stride_lh, stride_ab, flags, qk_scale_log2, softcap_scale,
                         softcap_log2, 1, BLOCK_M, BLOCK_N, HEAD_DIM_QK, HEAD_DIM_V, STAGES, Q_BUFS, EXTRAS, O_TMA,
                         UNALIGNED, PAGED, PAGE_BOX, RngState, dropout_threshold, dropout_scale, DROPOUT)),
            (_producer, (DescQ, DescK, DescV, q_bufs, k_bufs, v_bufs, bars, sched, num_tiles, HEAD_DIM_QK,
                         HEAD_DIM_V, BLOCK_M, BLOCK_N, STAGES, Q_BUFS, UNALIGNED, PAGED)),
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
                    DescQ, DescK, DescV, DescO, num_tiles,
                    HEAD_DIM_QK: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, EXTRAS: gl.constexpr,
                    PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # Two consumer warpgroups, 128-row tiles; EXTRAS compiles in softcap and ALiBi (not dropout).
    _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, AlibiSlopes, Sinks, stride_ob, stride_os, stride_oh, stride_lb,
             stride_lh, stride_ab, seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_left, window_right,
             flags, qk_scale_log2, softcap_scale, softcap_log2, DescQ, DescK, DescV, DescO, num_tiles,
             (CuSeqlensQ, CuSeqlensQ, CuSeqlensQ, 0, 1, False, Lse, 0, 0, 1, 1), HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M,
             BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, CONSUMER_REGS, False, RngState, dropout_threshold,
             dropout_scale, False)


@gluon.jit
def attn_fwd_hopper_dropout(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                            stride_qb, stride_qs, stride_qh,
                            stride_kb, stride_ks, stride_kh,
                            stride_vb, stride_vs, stride_vh,
                            stride_ob, stride_os, stride_oh,
                            stride_lb, stride_lh, stride_ab,
                            seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                            window_left, window_right, flags,
                            qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                            DescQ, DescK, DescV, DescO, num_tiles,
                            HEAD_DIM_QK: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr,
                            BLOCK_N: gl.constexpr, STAGES: gl.constexpr, EXTRAS: gl.constexpr,
                            PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # The two-warpgroup forward drawing dropout in its consumers (128-key blocks; no softcap or ALiBi:
    # EXTRAS stays off), for d64 and d128 (the catalog's attn_fwd_hopper_dropout; plan_fwd in
    # src/attn/aotk_attn.c). bench/explore/hopper/fwd_hopper_jit.py --dropout P runs it through the JIT.
    gl.static_assert(not EXTRAS, "dropout's variant carries no softcap or ALiBi code")
    _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, AlibiSlopes, Sinks, stride_ob, stride_os, stride_oh, stride_lb,
             stride_lh, stride_ab, seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_left, window_right,
             flags, qk_scale_log2, softcap_scale, softcap_log2, DescQ, DescK, DescV, DescO, num_tiles,
             (CuSeqlensQ, CuSeqlensQ, CuSeqlensQ, 0, 1, False, Lse, 0, 0, 1, 1), HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M,
             BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, CONSUMER_REGS, False, RngState, dropout_threshold,
             dropout_scale, True)


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
                        DescQ, DescK, DescV, DescO, num_tiles,
                        HEAD_DIM_QK: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr,
                        BLOCK_N: gl.constexpr, STAGES: gl.constexpr, EXTRAS: gl.constexpr,
                        PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # Three consumer warpgroups, 192-row tiles (d=64; the host takes it without a causal mask).
    _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, AlibiSlopes, Sinks, stride_ob, stride_os, stride_oh, stride_lb,
             stride_lh, stride_ab, seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_left, window_right,
             flags, qk_scale_log2, softcap_scale, softcap_log2, DescQ, DescK, DescV, DescO, num_tiles,
             (CuSeqlensQ, CuSeqlensQ, CuSeqlensQ, 0, 1, False, Lse, 0, 0, 1, 1), HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M,
             BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, CONSUMER_REGS, False, RngState, dropout_threshold,
             dropout_scale, False)


@gluon.jit
def attn_fwd_hopper_paged(Q, K, V, Out, Lse, CuSeqlensQ, CuSeqlensK, AlibiSlopes, Sinks, RngState,
                          stride_qb, stride_qs, stride_qh,
                          stride_kb, stride_ks, stride_kh,
                          stride_vb, stride_vs, stride_vh,
                          stride_ob, stride_os, stride_oh,
                          stride_lb, stride_lh, stride_ab,
                          seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, head_dim_qk8, head_dim_v8,
                          window_left, window_right, flags,
                          qk_scale_log2, softcap_scale, softcap_log2, dropout_threshold, dropout_scale,
                          DescQ, DescK, DescV, DescO, num_tiles, BlockTable, CacheSeqlens, CacheLeftpad, stride_bt,
                          page_shift, OutPartial, stride_pp, stride_lpp, num_splits, split_keys,
                          HEAD_DIM_QK: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr,
                          BLOCK_N: gl.constexpr, STAGES: gl.constexpr, EXTRAS: gl.constexpr,
                          PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # The prefill over a paged KV cache (chunked prefill, prefix caching; aotk_attn_decode with
    # cu_seqlens_q): two consumer warpgroups, 128-row tiles of packed queries (cu_seqlens_q, FLAG_VARLEN,
    # seqlen_q = max_seqlen_q), K and V through the block table [batch, stride_bt] from caches described
    # as [num_pages, page_size, heads_kv * d] in boxes of PAGE_BOX rows and 64 columns (page_size =
    # 2^page_shift, a multiple of the box), request b's keys 0 .. cache_seqlens[b] - 1 (seqlen_k is the capacity), from
    # cache_leftpad[b] with FLAG_LEFTPAD. Queries sit at the end of their request's keys (bottom-right).
    # num_splits > 1 cuts each request's keys into ranges of split_keys (_tile) whose fp32 partials and
    # LSEs go to OutPartial and Lse at split strides stride_pp and stride_lpp, for attn_merge.
    _forward(CuSeqlensQ, CuSeqlensK, Out, Lse, AlibiSlopes, Sinks, stride_ob, stride_os, stride_oh, stride_lb,
             stride_lh, stride_ab, seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks, window_left, window_right,
             flags, qk_scale_log2, softcap_scale, softcap_log2, DescQ, DescK, DescV, DescO, num_tiles,
             (BlockTable, CacheSeqlens, CacheLeftpad, stride_bt, page_shift, (flags & FLAG_LEFTPAD) != 0, OutPartial,
              stride_pp, stride_lpp, num_splits, split_keys),
             HEAD_DIM_QK, HEAD_DIM_V, BLOCK_M, BLOCK_N, STAGES, EXTRAS, PRODUCER_REGS, CONSUMER_REGS, True, RngState,
             dropout_threshold, dropout_scale, False)

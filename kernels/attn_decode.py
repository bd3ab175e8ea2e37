"""Decoding over a KV cache (contiguous or paged), split-KV, and the merge of partial attentions.

attn_decode: a few new query tokens per request (seqlen_q from 1 to 16; or, packed with cu_seqlens_q,
any number: a prefill over the cache, for chunked prefill and prefix caching) against request b's first
L_b = cache_seqlens[b] cache rows, read on the device (so a captured graph replays with new lengths).
One program holds every query row of one kv head's group: the G query heads times the seqlen_q tokens,
row r = g * seqlen_q + i, so K and V are read once per group rather than once per query head (the
prefill kernel reads them G times). When batch x heads_kv programs cannot fill the GPU, each request's
keys are cut into num_splits ranges of split_keys keys (the host chooses both from sizes it knows, never
from device data); split s writes an fp32 partial output and its log-sum-exp, and attn_merge combines
them.

Cache layouts, chosen at compile time (PAGE_MODE; the catalog's attn_decode, attn_decode_paged and
attn_decode_paged_blocks families): contiguous (0), [batch, capacity, heads_kv, d] (the "page" of key j
is the request, its row j); paged, [num_pages, page_size, heads_kv, d] with key j of request b in page
BlockTable[b, j / page_size], row j % page_size. Any page size from 1 up runs with a lookup per key row
(1: BLOCK_N int32 loads per block, against BLOCK_N * d * 4 bytes of K and V); a page size that is a
multiple of BLOCK_N runs with one lookup per block (2: the block lies in one page). In both, each step
loads the next block's page ids, so that K and V stream num_stages - 1 steps ahead as in the contiguous
kernel. The
mode was a run-time flag first: the branch inside the key loop kept Triton from pipelining the paged
loads, and 16-key pages ran at 0.74-0.86 of the contiguous speed on the H100 (now 0.80-0.90; 256-key pages
0.95-1.02). Addresses are computed in int64 throughout: a cache is allowed to span more than 2^31
elements.

Masks: token i sits at position p_i = L - seqlen_q + i (its own key is the cache's row p_i, bottom-right
as flash-attn's flash_attn_with_kvcache); it sees key j when p_i - window_left <= j <= p_i +
window_right (causal: window_right = 0; -1 unbounded) and j < L. Softcap, ALiBi (|p_i - j|) and sinks
are run-time flags: decoding is bound by memory, and their arithmetic is hidden under the loads. A
sink joins the softmax once: in this kernel's epilogue without splits, else in the merge.

attn_cache_append: writes the step's new keys and values into the cache (contiguous or paged) at
each request's cache_seqlens, before attn_decode reads them (flash_attn_with_kvcache's k and v).

attn_merge: out and lse of num_partials attentions of the same queries over disjoint key sets:
lse = log sum_p exp(lse_p) (+ exp(sink)), out = sum_p exp(lse_p - lse) out_p. A partial whose lse is
-inf contributes nothing; a row with no key in any partial (and no sink) gets out = 0 and lse = -inf.
The partials' and the output's dtypes are run-time choices (one pointer of each triple is non-NULL), so
one compiled kernel serves fp32, fp16 and bf16 on both sides. A program covers BLOCK_M rows and BLOCK_N
head-dim columns and reads every partial of them before it writes them; when lse is written over the
partials' lse, the host asks for whole rows (FLAG_WHOLE_ROWS) so that no program overwrites an lse that
another still reads. So out and lse may be the first partial's memory (an in-place update, as ring
attention does step by step).
"""

import triton
import triton.language as tl

from attn_common import FLAG_ALIBI, FLAG_SINKS, FLAG_SOFTCAP, FLAG_VARLEN, FLAG_WRITE_LSE, LN2, LOG2E, modified_scores

# Bits of attn_decode's `flags` beyond attn_common's (src/decode/aotk_decode.c sets them).
FLAG_PAGED = tl.constexpr(256)
FLAG_SPLIT = tl.constexpr(512)     # write fp32 partials (and partial lse) for attn_merge
# attn_merge's: which of the typed pointers holds the partials and the output.
FLAG_PARTIAL_FP16 = tl.constexpr(1024)
FLAG_PARTIAL_BF16 = tl.constexpr(2048)
FLAG_OUT_FP16 = tl.constexpr(4096)
FLAG_OUT_BF16 = tl.constexpr(8192)
FLAG_WHOLE_ROWS = tl.constexpr(16384)  # attn_merge: one program per row block, every column chunk
FLAG_FUSED_APPEND = tl.constexpr(32768)  # attn_decode writes the step's new keys and values itself
FLAG_LEFTPAD = tl.constexpr(65536)  # attn_decode: request b's keys start at row CacheLeftpad[b] (cache_leftpad)
FUSED_APPEND_ROWS = tl.constexpr(16)  # the most new tokens a request the decoding kernel appends itself


@triton.jit
def attn_decode(Q, K, V, Out, Lse, BlockTable, CacheSeqlens, CuSeqlensQ, CacheLeftpad, AlibiSlopes, Sinks,
                OutPartial, LsePartial, KNew, VNew,
                stride_qb, stride_qs, stride_qh,
                stride_kp, stride_ks, stride_kh,
                stride_vp, stride_vs, stride_vh,
                stride_ob, stride_os, stride_oh,
                stride_nb, stride_ns, stride_nh,
                stride_wb, stride_ws, stride_wh,
                stride_lb, stride_lh, stride_tb, stride_ab,
                batch_size, seqlen_q, heads_q, group_size, capacity, page_size, num_splits, split_keys, row_chunks,
                head_dim_qk8, head_dim_v8, window_left, window_right, flags, seqlen_new,
                qk_scale_log2, softcap_scale, softcap_log2,
                HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                PAGE_MODE: tl.constexpr, OFFSET32: tl.constexpr = False):
    # Grid: (split, row chunk, kv head, request), split fastest: the splits of one group run side by
    # side and the group's query rows stay in L2.
    pid = tl.program_id(0)
    split = pid % num_splits
    rest = pid // num_splits
    chunk = rest % row_chunks
    rest = rest // row_chunks
    heads_kv = heads_q // group_size
    head_kv = rest % heads_kv
    batch = rest // heads_kv
    batch64 = batch.to(tl.int64)

    # With appending (seqlen_new > 0), cache_seqlens holds the length before the step's keys were
    # written (by attn_cache_append, launched first), as in flash-attn.
    # (In int64: a length near 2^31 plus the new tokens must clamp to the capacity, not wrap.)
    cached = tl.maximum(tl.load(CacheSeqlens + batch), 0).to(tl.int64)  # keys before the step's new ones
    length = tl.minimum(cached + seqlen_new, capacity).to(tl.int32)
    # Queries: dense [batch, seqlen_q, heads_q, d], or packed (FLAG_VARLEN, a prefill over the cache)
    # [total_q, heads_q, d] with request b's rows from CuSeqlensQ[b] and seqlen_q their maximum.
    q_start = batch64 * 0
    sq = seqlen_q
    if (flags & FLAG_VARLEN) != 0:
        q_start = tl.load(CuSeqlensQ + batch).to(tl.int64)
        sq = tl.minimum(tl.load(CuSeqlensQ + batch + 1) - q_start, seqlen_q).to(tl.int32)
    rows = chunk * BLOCK_M + tl.arange(0, BLOCK_M)
    token = rows % seqlen_q
    row_ok = (rows < group_size * seqlen_q) & (token < sq)
    head_q = head_kv * group_size + rows // seqlen_q
    offs_n = tl.arange(0, BLOCK_N)
    offs_dqk = tl.arange(0, HEAD_DIM_QK)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    dqk_ok = offs_dqk < head_dim_qk8 * 8
    dv_ok = offs_dv < head_dim_v8 * 8

    q_rows = Q + batch64 * stride_qb + (q_start + token) * stride_qs + head_q.to(tl.int64) * stride_qh
    q = tl.load(q_rows[:, None] + offs_dqk[None, :], mask=row_ok[:, None] & dqk_ok[None, :], other=0.0)

    # Each row's visible keys [first, last], in int64 so that unbounded windows cannot overflow, then
    # cut to this split's range; the last split runs to the request's end whatever its length.
    position = (length - sq + token).to(tl.int64)
    split_lo = split * split_keys
    split_hi = tl.where(split == num_splits - 1, length, tl.minimum(split_lo + split_keys, length))
    first = tl.where(window_left >= 0, position - window_left, 0)
    # Left padding (FLAG_LEFTPAD): rows before the request's padding are not its keys. Positions stay
    # those of the cache's rows (the padding counts in p_i, in windows and in ALiBi's distance, as in
    # flash-attn). The padding joins the split's bound as a scalar: one more vector operation on the rows'
    # bounds, or on the loop's masks, pushed the 16-key-page kernel (240 registers) into spills, 4-8%
    # slower through the JIT on the H100.
    leftpad = (flags & FLAG_LEFTPAD) != 0
    key_lo = tl.load(CacheLeftpad + batch, mask=leftpad, other=0)
    last = tl.where(window_right >= 0, position + window_right, length - 1)
    first = tl.maximum(first, tl.maximum(split_lo, key_lo)).to(tl.int32)
    last = tl.minimum(last, split_hi - 1).to(tl.int32)
    first = tl.where(row_ok, first, split_hi)
    last = tl.where(row_ok, last, -1)
    lo = (tl.min(first, 0) // BLOCK_N) * BLOCK_N
    if PAGE_MODE == 0:
        # A contiguous cache with left padding: the loop starts at the first key any row sees, not at
        # its block's start, so no load reaches the padding, whatever it holds. Paged, the loop starts
        # at a block boundary (a page lookup per block needs it, and per key row an unaligned start
        # spilled): the rows of the padding's last block are read, their scores masked, so they must
        # hold finite values (include/aotk.h). (Masking those loads too cost 1-4% with 16-key pages;
        # the block peeled before the loop, 2-8%.)
        lo = tl.where(leftpad, tl.min(first, 0), lo)
    hi = tl.max(last, 0) + 1
    # The keys every row of the tile sees: a block inside [full_lo, full_hi] needs no mask, which is
    # every block of a split but its last for one new token. (Rows outside the group are computed
    # unmasked there and never stored.) Skipping the per-score mask (two compares and a select on each
    # of BLOCK_M x BLOCK_N scores) there measured 0-4% faster (tune_decode_jit.py, H100).
    full_lo = tl.max(tl.where(row_ok, first, -2147483647), 0)
    full_hi = tl.min(tl.where(row_ok, last, 2147483647), 0)

    slope_log2 = tl.zeros([BLOCK_M], dtype=tl.float32)
    if (flags & FLAG_ALIBI) != 0:
        slope_log2 = tl.load(AlibiSlopes + batch64 * stride_ab + head_q, mask=row_ok, other=0.0) * LOG2E

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], dtype=tl.float32)
    table_base = batch64 * stride_tb
    k_head = head_kv.to(tl.int64) * stride_kh
    v_head = head_kv.to(tl.int64) * stride_vh
    # OFFSET32 (the catalog's attn_decode_paged32, PAGE_MODE 1): the host found every element offset of
    # k_cache and v_cache below 2^31, so a key row's offset (page x page stride + row x row stride + head)
    # is computed in 32 bits. In 64 bits that arithmetic was most of the 16-key-page loop (1326 SASS
    # instructions a step against 972 contiguous; 859 in 32 bits) and the pages ran 5-13% behind the
    # contiguous cache on the H200 (tune_decode_jit.py, docs/design.md).
    if OFFSET32:
        stride_kp32 = stride_kp.to(tl.int32)
        stride_ks32 = stride_ks.to(tl.int32)
        stride_vp32 = stride_vp.to(tl.int32)
        stride_vs32 = stride_vs.to(tl.int32)
        k_head32 = k_head.to(tl.int32)
        v_head32 = v_head.to(tl.int32)
    # PAGE_MODE 1: each key's block-table index and row in its page, divided once here and then advanced
    # by BLOCK_N a step with one compare (the keys of a step are the last step's plus BLOCK_N). A division
    # by the run-time page size per key row, in the loop, cost 1-9% with 16-key pages on the H100
    # (tune_decode_jit.py, bf16 d128; shifts in its place measured 0.93-0.98 of the contiguous speed
    # against 0.87-0.97).
    # (Not compiled into the per-row page lookup (PAGE_MODE 1, 16-key pages): the code before the loop
    # made its loop 1-3% slower on the H100 with no appending at all; those caches keep the separate kernel.)
    if (PAGE_MODE != 1) and ((flags & FLAG_FUSED_APPEND) != 0):
        # Appending fused (the host's choice: one row chunk a group and at most FUSED_APPEND_ROWS new
        # tokens; else attn_cache_append runs first): new token i of the request goes to position
        # cached + i, and the program whose key range [split_lo, split_hi) holds that position writes it
        # for its kv head, before its own loop reads it (split_hi <= the length <= the capacity, so
        # nothing at or past the capacity is written). Only that program reads those
        # rows, so no other program waits on them. The CTA barrier orders the stores before the loop's
        # loads of the same rows.
        new_tokens = tl.arange(0, FUSED_APPEND_ROWS)
        new_pos = cached + new_tokens
        write = (new_tokens < seqlen_new) & (new_pos >= split_lo) & (new_pos < split_hi)
        if PAGE_MODE == 0:
            new_page = batch64 + new_pos * 0
            new_row = new_pos
        else:  # a page of whole key blocks
            new_page = tl.load(BlockTable + table_base + new_pos // page_size, mask=write, other=0).to(tl.int64)
            new_row = new_pos % page_size
        new_src = batch64 * stride_nb + new_tokens.to(tl.int64) * stride_ns + head_kv.to(tl.int64) * stride_nh
        kn = tl.load(KNew + new_src[:, None] + offs_dqk[None, :], mask=write[:, None] & dqk_ok[None, :])
        tl.store(K + (new_page * stride_kp + new_row * stride_ks + k_head)[:, None] + offs_dqk[None, :], kn,
                 mask=write[:, None] & dqk_ok[None, :])
        new_src = batch64 * stride_wb + new_tokens.to(tl.int64) * stride_ws + head_kv.to(tl.int64) * stride_wh
        vn = tl.load(VNew + new_src[:, None] + offs_dv[None, :], mask=write[:, None] & dv_ok[None, :])
        tl.store(V + (new_page * stride_vp + new_row * stride_vs + v_head)[:, None] + offs_dv[None, :], vn,
                 mask=write[:, None] & dv_ok[None, :])
        tl.debug_barrier()
    if PAGE_MODE == 2:
        # The first block's page here, then each step loads the next block's (a loop-carried scalar). With
        # the lookup inside the step, Triton's pipeliner gave the page id's load a stage of its own and
        # issued K and V one step ahead instead of num_stages - 1 (73,732 bytes of shared memory against
        # the contiguous kernel's 139,264 at 16 x 128, 3 stages; 4 stages changed nothing): on the H200
        # 256-key pages ran at 0.79-0.84 of the contiguous speed from 16k keys. Loop-carried, K and V
        # are issued two steps ahead as contiguous: 0.93-1.02 (design.md, "Paged loads two steps ahead").
        # That depth costs residency (139 KB of shared memory: one program an SM), so grids of more
        # programs than SMs take the catalog's 2-stage row (DECODE_PAGED_SHALLOW), one step ahead.
        page_next = tl.load(BlockTable + table_base + lo // page_size, mask=lo < hi, other=0).to(tl.int64)
    lane_page = (lo + offs_n) // page_size
    lane_row = (lo + offs_n) % page_size
    step_pages = BLOCK_N // page_size
    step_rows = BLOCK_N % page_size
    if PAGE_MODE == 1:
        # The same for a lookup per key row: the step's vector of page ids loaded by the step before.
        pages_next = tl.load(BlockTable + table_base + lane_page, mask=(lo + offs_n) < hi, other=0)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < hi
        if PAGE_MODE == 1:
            if OFFSET32:
                page = pages_next
                row = lane_row
            else:
                page = pages_next.to(tl.int64)
                row = lane_row.to(tl.int64)
            lane_row += step_rows
            wrap = lane_row >= page_size
            lane_row = tl.where(wrap, lane_row - page_size, lane_row)
            lane_page += step_pages + wrap.to(tl.int32)
            pages_next = tl.load(BlockTable + table_base + lane_page, mask=(cols + BLOCK_N) < hi, other=0)
        elif PAGE_MODE == 2:
            page = page_next
            row = (start_n % page_size + offs_n).to(tl.int64)
            page_next = tl.load(BlockTable + table_base + (start_n + BLOCK_N) // page_size,
                                mask=start_n + BLOCK_N < hi, other=0).to(tl.int64)
        else:  # contiguous: the request's own rows
            page = batch64
            row = (start_n + offs_n).to(tl.int64)
        if OFFSET32:
            k_ptrs = K + (page * stride_kp32 + row * stride_ks32 + k_head32)[:, None] + offs_dqk[None, :]
        else:
            k_ptrs = K + (page * stride_kp + row * stride_ks + k_head)[:, None] + offs_dqk[None, :]
        k = tl.load(k_ptrs, mask=col_ok[:, None] & dqk_ok[None, :], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        s, _ = modified_scores(qk, position, cols, 0, qk_scale_log2, softcap_scale, softcap_log2,
                               slope_log2[:, None], flags)
        if (start_n < full_lo) | (start_n + BLOCK_N - 1 > full_hi):
            s = tl.where((cols[None, :] >= first[:, None]) & (cols[None, :] <= last[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no visible key yet keeps m = -inf: subtract 0 so exp2 gives 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        if OFFSET32:
            v_ptrs = V + (page * stride_vp32 + row * stride_vs32 + v_head32)[:, None] + offs_dv[None, :]
        else:
            v_ptrs = V + (page * stride_vp + row * stride_vs + v_head)[:, None] + offs_dv[None, :]
        v = tl.load(v_ptrs, mask=col_ok[:, None] & dv_ok[None, :], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new

    if (flags & FLAG_SPLIT) != 0:
        # Partials [split, batch, seqlen_q, heads_q, round_up(head_dim_v, 16)] and [split, batch, heads_q, seqlen_q],
        # contiguous in the workspace; the sink waits for the merge.
        has_keys = l_i > 0.0
        out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
        lse = tl.where(has_keys, (m_i + tl.math.log2(l_i)) * LN2, float("-inf"))
        part = (split * batch_size + batch).to(tl.int64)
        row_index = (part * seqlen_q + token) * heads_q + head_q
        # Rows padded to 16 floats, so that the merge's aligned variant reads them 16 bytes at a time.
        tl.store(OutPartial + row_index[:, None] * (((head_dim_v8 + 1) // 2) * 16) + offs_dv[None, :], out,
                 mask=row_ok[:, None] & dv_ok[None, :])
        tl.store(LsePartial + (part * heads_q + head_q) * seqlen_q + token, lse, mask=row_ok)
    else:
        if (flags & FLAG_SINKS) != 0:
            sink = tl.load(Sinks + head_q, mask=row_ok, other=0.0) * LOG2E
            m_fin = tl.maximum(m_i, sink)
            rescale = tl.math.exp2(m_i - m_fin)
            l_i = l_i * rescale + tl.math.exp2(sink - m_fin)
            acc = acc * rescale[:, None]
            m_i = m_fin
        has_keys = l_i > 0.0
        out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
        o_rows = Out + batch64 * stride_ob + (q_start + token) * stride_os + head_q.to(tl.int64) * stride_oh
        tl.store(o_rows[:, None] + offs_dv[None, :], out.to(Out.dtype.element_ty), mask=row_ok[:, None] & dv_ok[None, :])
        if (flags & FLAG_WRITE_LSE) != 0:
            lse = tl.where(has_keys, (m_i + tl.math.log2(l_i)) * LN2, float("-inf"))
            tl.store(Lse + batch64 * stride_lb + head_q.to(tl.int64) * stride_lh + q_start + token, lse, mask=row_ok)


@triton.jit
def _merge_load(P32, P16, PB16, offsets, mask, flags):
    # The partials in whichever dtype the flags name. Three masked loads rather than a branch: a loop
    # whose loads sit inside an if is not pipelined by Triton, and the loads of the dtypes not chosen
    # are masked off (no memory is touched; their pointers may be NULL).
    # (The flags broadcast to the tile before the tests: the interpreter takes no scalar in a mask.)
    tile_flags = flags + tl.zeros_like(offsets).to(tl.int32)
    is32 = (tile_flags & (FLAG_PARTIAL_FP16 | FLAG_PARTIAL_BF16)) == 0
    is16 = (tile_flags & FLAG_PARTIAL_FP16) != 0
    isb16 = (tile_flags & FLAG_PARTIAL_BF16) != 0
    x = tl.load(P32 + offsets, mask=mask & is32, other=0.0)
    x += tl.load(P16 + offsets, mask=mask & is16, other=0.0).to(tl.float32)
    x += tl.load(PB16 + offsets, mask=mask & isb16, other=0.0).to(tl.float32)
    return x


@triton.jit
def attn_merge(OutPartial32, OutPartial16, OutPartialBF16, LsePartial, Out32, Out16, OutBF16, Lse, Sinks,
               CuSeqlensQ, stride_pp, stride_pb, stride_ps, stride_ph,
               stride_lpp, stride_lpb, stride_lph, stride_lps,
               stride_ob, stride_os, stride_oh,
               stride_lb, stride_lh, stride_ls,
               num_partials, seqlen_q, heads, num_rows, head_dim8, flags,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr):
    # One program per BLOCK_M rows (batch, token, head; flattened with the head fastest) and BLOCK_N
    # columns of the head dim (the column chunk fastest in the grid), so that a merge of few rows still
    # spreads over several programs; with FLAG_WHOLE_ROWS one program per BLOCK_M rows walks every
    # chunk (the host asks for it when lse is written over the partials' lse, an in-place merge: the
    # programs of one row must not write the lse that another one still reads). The partials are read
    # BLOCK_P at a time, as one [BLOCK_P, BLOCK_M, BLOCK_N] tile summed over its first axis: split-KV
    # at batch 1 merges up to 256 partials of a few rows, which is bound by the loads' latency, not by
    # bandwidth, and a loop of one partial a step (even pipelined, num_stages) waited for each in turn
    # (the host takes the kernel of BLOCK_P = 1 for merges of few partials or of many rows, whose
    # programs fill the GPU and are bound by bandwidth: there the wide tiles measured 2-8x slower;
    # src/decode/aotk_decode.c, choose_merge). One pass over the partials, as the attention kernels'
    # online softmax: each step's lse and partials are loaded together and the running sums rescaled
    # when the row's largest lse grows, so a merge of at most BLOCK_P partials waits for one round trip
    # of loads (a first pass for the largest lse, then a second for the sums, waited for two: on the
    # H100, tune_decode_jit.py, 32 rows x 8 partials 2.7 -> 2.4 us, x 128 partials 5.0 -> 4.6 us, and
    # 3.4 us with 128 partials a step). The loops carry no branch, so Triton pipelines their loads. All
    # strides are int64 (the partials of a long prefill may span more than 2^31 elements).
    pid = tl.program_id(0)
    chunks = (head_dim8 * 8 + BLOCK_N - 1) // BLOCK_N
    whole = (flags & FLAG_WHOLE_ROWS) != 0
    chunk_lo = tl.where(whole, 0, pid % chunks)
    chunk_hi = tl.where(whole, chunks, chunk_lo + 1)
    row_block = tl.where(whole, pid, pid // chunks)
    # (In int64: the last block's rows may pass 2^31 - 1 when num_rows is near it.)
    rows = row_block.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < num_rows
    head = rows % heads
    token = (rows // heads) % seqlen_q
    batch = rows // heads // seqlen_q
    # Packed output (FLAG_VARLEN: split-KV decoding of packed queries, whose partials keep [batch,
    # max_seqlen_q] rows): token t of request b is out's and lse's row cu_seqlens_q[b] + t (the batch
    # strides unused), and only its len_q_b = cu_seqlens_q[b + 1] - cu_seqlens_q[b] tokens exist: the
    # others are neither read nor written.
    o_batch = batch
    o_token = token
    if (flags & FLAG_VARLEN) != 0:
        q_start = tl.load(CuSeqlensQ + batch, mask=row_ok, other=0).to(tl.int64)
        q_end = tl.load(CuSeqlensQ + batch + 1, mask=row_ok, other=0).to(tl.int64)
        row_ok = row_ok & (token < q_end - q_start)
        o_batch = batch * 0
        o_token = q_start + token
    lse_rows = LsePartial + batch * stride_lpb + head * stride_lph + token * stride_lps
    offs_p = tl.arange(0, BLOCK_P)
    sink = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    if (flags & FLAG_SINKS) != 0:
        sink = tl.load(Sinks + head, mask=row_ok, other=float("-inf"))
    p_rows = batch * stride_pb + token * stride_ps + head * stride_ph
    o_rows = o_batch * stride_ob + o_token * stride_os + head * stride_oh
    # One pass: the running largest lse m, the sum of weights and the weighted sum, rescaled when m
    # grows; the sink is the first term (weight 1 at m = sink). (Defined before the chunk loop too: the
    # lse after it reads the last chunk's.)
    m = sink
    total = tl.where(sink == float("-inf"), 0.0, 1.0)
    nan = tl.zeros([BLOCK_M], dtype=tl.int32)
    for chunk in range(chunk_lo, chunk_hi):
        cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
        # head_dim8 * 8: the mask is then constant over 8-element runs, and the loads stay 16 bytes wide.
        mask = row_ok[:, None] & (cols < head_dim8 * 8)[None, :]
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        m = sink
        total = tl.where(sink == float("-inf"), 0.0, 1.0)
        nan = tl.zeros([BLOCK_M], dtype=tl.int32)
        for p0 in range(0, num_partials, BLOCK_P):
            p = (p0 + offs_p).to(tl.int64)
            p_ok = p < num_partials
            lse_p = tl.load(lse_rows[None, :] + p[:, None] * stride_lpp, mask=p_ok[:, None] & row_ok[None, :],
                            other=float("-inf"))
            offsets = (p_rows[None, :] + p[:, None] * stride_pp)[:, :, None] + cols[None, None, :]
            x = _merge_load(OutPartial32, OutPartial16, OutPartialBF16, offsets,
                            p_ok[:, None, None] & mask[None, :, :], flags)
            nan = nan | tl.max((lse_p != lse_p).to(tl.int32), axis=0)
            m_new = tl.maximum(m, tl.max(lse_p, axis=0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            scale = tl.math.exp(m - m_safe)
            weight = tl.math.exp(lse_p - m_safe[None, :])  # [BLOCK_P, BLOCK_M]
            total = total * scale + tl.sum(weight, axis=0)
            # A partial with no keys has weight 0 and, by the contract, out 0; where() keeps a NaN or
            # garbage out of a weightless partial from reaching the sum.
            acc = acc * scale[:, None] + tl.sum(tl.where(weight[:, :, None] > 0.0, x * weight[:, :, None], 0.0),
                                                axis=0)
            m = m_new
        acc = acc * (1.0 / tl.where(total > 0.0, total, 1.0))[:, None]
        # A NaN lse poisons its row (max and the weights above would otherwise drop it).
        acc = tl.where(nan[:, None] != 0, float("nan"), acc)
        offsets = o_rows[:, None] + cols[None, :]
        if (flags & FLAG_OUT_FP16) != 0:
            tl.store(Out16 + offsets, acc.to(tl.float16), mask=mask)
        elif (flags & FLAG_OUT_BF16) != 0:
            tl.store(OutBF16 + offsets, acc.to(tl.bfloat16), mask=mask)
        else:
            tl.store(Out32 + offsets, acc, mask=mask)
    if (flags & FLAG_WRITE_LSE) != 0 and chunk_lo == 0:
        m_safe = tl.where(m == float("-inf"), 0.0, m)
        lse = tl.where(total > 0.0, m_safe + tl.math.log(total), float("-inf"))
        lse = tl.where(nan != 0, float("nan"), lse)
        tl.store(Lse + o_batch * stride_lb + head * stride_lh + o_token * stride_ls, lse, mask=row_ok)


@triton.jit
def attn_cache_append(KNew, VNew, K, V, BlockTable, CacheSeqlens,
                      stride_nb, stride_ns, stride_nh, stride_wb, stride_ws, stride_wh,
                      stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh, stride_tb,
                      seqlen_new, heads_kv, capacity, page_size, head_dim_qk8, head_dim_v8, flags,
                      HEAD_DIM_QK: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr):
    # Appending: new token i of request b (k_new, v_new [batch, seqlen_new, heads_kv, d]) goes to the
    # cache row at position max(cache_seqlens[b], 0) + i, through the block table when paged. A
    # position at or past the capacity is not written. One program per (request, new token), BLOCK_M kv
    # heads at a time. Launched before attn_decode on the same stream, which then reads these rows.
    pid = tl.program_id(0)
    token = pid % seqlen_new
    batch64 = (pid // seqlen_new).to(tl.int64)
    position = tl.maximum(tl.load(CacheSeqlens + batch64), 0).to(tl.int64) + token
    if position < capacity:
        if (flags & FLAG_PAGED) != 0:
            page = tl.load(BlockTable + batch64 * stride_tb + position // page_size).to(tl.int64)
            row = position % page_size
        else:
            page = batch64
            row = position
        heads = tl.arange(0, BLOCK_M)
        offs_k = tl.arange(0, HEAD_DIM_QK)
        offs_v = tl.arange(0, HEAD_DIM_V)
        k_row = K + page * stride_kp + row * stride_ks
        v_row = V + page * stride_vp + row * stride_vs
        k_src = KNew + batch64 * stride_nb + token.to(tl.int64) * stride_ns
        v_src = VNew + batch64 * stride_wb + token.to(tl.int64) * stride_ws
        for h0 in range(0, heads_kv, BLOCK_M):
            h = (h0 + heads).to(tl.int64)
            mask_k = (h < heads_kv)[:, None] & (offs_k < head_dim_qk8 * 8)[None, :]
            mask_v = (h < heads_kv)[:, None] & (offs_v < head_dim_v8 * 8)[None, :]
            x = tl.load(k_src + h[:, None] * stride_nh + offs_k[None, :], mask=mask_k)
            tl.store(k_row + h[:, None] * stride_kh + offs_k[None, :], x, mask=mask_k)
            y = tl.load(v_src + h[:, None] * stride_wh + offs_v[None, :], mask=mask_v)
            tl.store(v_row + h[:, None] * stride_vh + offs_v[None, :], y, mask=mask_v)

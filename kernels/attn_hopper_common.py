"""Pieces the Gluon kernels (kernels/attn_fwd_hopper.py, attn_bwd_hopper.py, attn_bwd_dq_hopper.py) share:
the bits of `flags`, a sequence's rows, the window rule's bounds, the softcap's tanh and a masked tile
store, in Gluon (Triton's attn_common.py holds the same for the Triton kernels, whose @triton.jit
functions Gluon cannot call).

Free of torch and driver calls: imported on a machine with no GPU.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma

# A barrier of the partition's threads: thread_barrier in 3.6, barrier in newer releases.
thread_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

# The TMA load: Triton 3.6 calls it async_copy_global_to_shared, newer releases async_load (the old
# name raises there), so the kernels compile under either while the pin is evaluated.
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

# Bits of `flags` (kernels/attn_common.py; src/attn/aotk_attn.c sets them).
FLAG_WRITE_LSE: gl.constexpr = gl.constexpr(1)
FLAG_VARLEN: gl.constexpr = gl.constexpr(2)
FLAG_TOP_LEFT: gl.constexpr = gl.constexpr(4)
FLAG_SOFTCAP: gl.constexpr = gl.constexpr(8)
FLAG_ALIBI: gl.constexpr = gl.constexpr(16)
FLAG_SINKS: gl.constexpr = gl.constexpr(32)
FLAG_REVERSE: gl.constexpr = gl.constexpr(128)
# The forward's O goes out through a TMA store (DescO describes it); without it, through masked stores.
FLAG_O_TMA: gl.constexpr = gl.constexpr(256)
# The paged forward (attn_fwd_hopper_paged): CacheLeftpad holds each request's first key.
FLAG_LEFTPAD: gl.constexpr = gl.constexpr(512)
# The paged forward splits its keys (num_splits > 1): fp32 partials to OutPartial and Lse. A flag, not the
# count's test, so that no specialization of num_splits can fold the branch (Triton 3.6 fails to lower
# the kernel when `num_splits > 1` folds inside a warp-specialized partition).
FLAG_SPLIT_OUT: gl.constexpr = gl.constexpr(1024)
LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)

# A window bound beyond any sequence these kernels see: the host keeps lengths at most 2^30 - 512
# (AOTK__MAX_SEQLEN), so |j - i - diag| < 2^30 and a bound past +-2^30 bounds nothing that +-2^30 would
# not (window_bounds clamps to it), and every sum of a row (up to a tile past the end), the diagonal
# and a bound stays in int32: at most seqlen_k + 191 + 2^30 < 2^31.
FAR: gl.constexpr = gl.constexpr(1073741824)


@gluon.jit
def philox7(k0, k1, c0, c1, c2, c3):
    # Philox4x32 with 7 rounds (Salmon et al., SC'11), as tl.philox draws it for the Triton kernels.
    for _ in gl.static_range(7):
        d0 = c0
        d2 = c2
        c0 = gl.umulhi(0xCD9E8D57, d2) ^ c1 ^ k0
        c2 = gl.umulhi(0xD2511F53, d0) ^ c3 ^ k1
        c1 = d2 * 0xCD9E8D57
        c3 = d0 * 0xD2511F53
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3


@gluon.jit
def rng_key(RngState):
    # attn_common.rng_state's key from the device-side {seed, offset}: the seed with the offset's high word
    # XORed into its high word, as two 32-bit halves, and the offset's low word (the counter's last word).
    seed = gl.load(RngState)
    offset = gl.load(RngState + 1)
    key = seed ^ (offset & -4294967296)
    k0 = (key & 4294967295).to(gl.uint32)
    k1 = ((key >> 32) & 4294967295).to(gl.uint32)
    offset_lo = (offset & 4294967295).to(gl.uint32)
    return k0, k1, offset_lo


@gluon.jit
def window_bounds(window_left, window_right):
    """The window as bounds on j - i - diag (row i sees key j when lo_rel <= j - i - diag <= hi_rel), a
    negative window unbounded; clamped to +-FAR (see FAR)."""
    lo_rel = gl.where(window_left >= 0, -gl.minimum(window_left, FAR), -FAR)
    hi_rel = gl.where(window_right >= 0, gl.minimum(window_right, FAR), FAR)
    return lo_rel, hi_rel


@gluon.jit
def tanh_approx(x):
    # tanh.approx.f32: one MUFU instruction (see kernels/attn_common.py, tanh_approx).
    return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def store_rows(base, stride, row0, seqlen, col0, tile, layout: gl.constexpr, ROWS: gl.constexpr,
               WIDTH: gl.constexpr):
    """tile [ROWS, WIDTH] into rows row0.. (those below seqlen), columns col0.. of a row-major tensor."""
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, WIDTH, layout=gl.SliceLayout(0, layout))
    mask = gl.expand_dims(rows < seqlen, 1) & gl.expand_dims(cols < WIDTH, 0)
    gl.store(base + gl.expand_dims(rows.to(gl.int64), 1) * stride + col0 + gl.expand_dims(cols, 0), tile, mask=mask)


@gluon.jit
def store_rows_staged(base, stride, row0, seqlen, col0, tile, smem, ROWS: gl.constexpr, WIDTH: gl.constexpr,
                      NUM_WARPS: gl.constexpr):
    """store_rows through shared memory: tile [ROWS, WIDTH] (16-bit, in a wgmma accumulator's layout, whose
    4-byte pieces would make 8 partial sectors per warp store) into smem (a free buffer of its shape),
    then read back 16 bytes a thread along rows and stored coalesced into columns col0.. The caller has
    made smem free in every thread of the partition (a barrier after its last reader) and must not
    reuse it before a barrier."""
    COLS: gl.constexpr = WIDTH // 8  # threads along a row, 16 bytes each
    gl.static_assert(WIDTH % 8 == 0 and 32 % COLS == 0, "rows of 8, 16, 32, 64, 128 or 256 16-bit values")
    out_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[32 // COLS, COLS],
                                                warps_per_cta=[NUM_WARPS, 1], order=[1, 0])
    smem.store(tile)
    thread_barrier()
    store_rows(base, stride, row0, seqlen, col0, smem.load(out_layout), out_layout, ROWS, WIDTH)


# The backward's grids under causal-like masks (FLAG_REVERSE): about this many programs per group (an
# H100 has 132 SMs). See program_tile.
GROUP_PROGRAMS: gl.constexpr = gl.constexpr(128)


@gluon.jit
def program_tile(pid, num_blocks, flags):
    """The (block, sequence x head) tile of program pid in a backward grid of num_blocks blocks per head.
    Plain: block fastest, so that the programs in flight share a head's rows in L2. Under causal-like masks
    (FLAG_REVERSE) a block's work falls with its index (the dK/dV pass's key blocks; the dQ pass reverses
    its query blocks), and the heads' heaviest programs would start one head at a time, the last head's
    with nothing left to pair them with (about 10% of the time at 8k tokens, by a list-scheduling model).
    So the heads are taken in groups of about GROUP_PROGRAMS programs (ceil(GROUP_PROGRAMS / num_blocks)
    heads), block slowest within a group: the in-flight programs span about as many heads as before, and
    each group runs heaviest first. (Block slowest over the whole grid balanced the load but read each
    head's rows from one program at a time: 0.6-0.95x the time at d 64 and 128, H100, bench/explore/ab_libs.py.)"""
    num_heads = gl.num_programs(0) // num_blocks
    block = pid % num_blocks
    head = pid // num_blocks
    if (flags & FLAG_REVERSE) != 0:
        group_heads = gl.minimum(gl.cdiv(GROUP_PROGRAMS, num_blocks), num_heads)
        first = pid // (group_heads * num_blocks) * group_heads
        in_group = gl.minimum(group_heads, num_heads - first)
        rank = pid - first * num_blocks
        block = rank // in_group
        head = first + rank % in_group
    return block, head


@gluon.jit
def sequence(b, CuSeqlensQ, CuSeqlensK, seqlen_q, seqlen_k, flags):
    """Sequence b of a call: the view's batch coordinate, its first query and key rows, its lengths.
    Dense: batch entry b, rows from 0. Varlen (FLAG_VARLEN): the tensors are [1, total, heads * d] and its
    rows start at cu_seqlens[b]; a sequence longer than max_seqlen is cut to it, as in the Triton kernels."""
    bc = b
    q_start = b * 0
    k_start = b * 0
    sq = seqlen_q
    sk = seqlen_k
    if (flags & FLAG_VARLEN) != 0:
        bc = b * 0
        q_start = gl.load(CuSeqlensQ + b)
        k_start = gl.load(CuSeqlensK + b)
        sq = gl.minimum(gl.load(CuSeqlensQ + b + 1) - q_start, seqlen_q)
        sk = gl.minimum(gl.load(CuSeqlensK + b + 1) - k_start, seqlen_k)
    return bc, q_start, k_start, sq, sk

"""The catalog: every kernel aotk compiles, declared as data.

Keep it boring (AOTriton's lesson): a variant axis only where a run-time argument would cost speed.
Causal masking, GQA group size, lengths, strides and the softmax scale are run-time arguments. The axes
that remain are the dtype, the head dim (a tile shape), the alignment assumption (it decides whether
loads are 16 bytes wide: 2.4x, see notes/triton-aot.md) and the tile config, which the tuning table
chooses by problem size.

Each family lists its kernel parameters in order, with the Triton type and whether the aligned variant
promises divisibility by 16 (pointers: 16 bytes; integers: 16 elements), or ALWAYS for values aligned
in every call. The generator checks this list
against the Triton function's own signature and the compiled PTX's .entry, and records it in the table
so the C launcher's packing is checked against it when a kernel loads.
"""

from dataclasses import dataclass, field

TRITON_VERSION = "3.6.0"

# Targets: 90 compiles for sm_90a (wgmma, H100/H200); 80 for sm_80 (A100, and sm_86/sm_89 cards).
# The sm_80 PTX is kept too: the driver JIT-compiles it on GPUs newer than both (sm_90a PTX is not
# forward compatible, so keeping it would serve no GPU).
ARCHS = (80, 90)
KEEP_PTX = {80: True, 90: False}

# sm_86 and sm_89 allow at most 99 KiB of shared memory per block; an sm_80 cubin that needs more would
# run on an A100 but not on the cards the same cubin serves, so the generator refuses such a config.
MAX_SHARED_BYTES = {80: 99 * 1024, 90: 227 * 1024}

DTYPES = ("fp16", "bf16")
ALIGNMENTS = (True, False)


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    # The merge's partials per step (BLOCK_P); 0 elsewhere. Left out of repr (the generator's cache key):
    # the constexprs carry it, and the other families' keys stay as they were.
    block_p: int = field(default=0, repr=False)

    @property
    def tag(self):
        block_n = f"n{self.block_n}" if self.block_n else ""
        block_p = f"p{self.block_p}" if self.block_p else ""
        return f"m{self.block_m}{block_n}{block_p}w{self.num_warps}s{self.num_stages}"


ALWAYS = "always"


def _strides(tensors, hinted=True):
    """(b: i64, s: i32, h: i32) strides for each named tensor, in order."""
    return [item for t in tensors for item in ((f"stride_{t}b", "i64", hinted), (f"stride_{t}s", "i32", hinted),
                                               (f"stride_{t}h", "i32", hinted))]


def _pointers(names, triton_type="*{dtype}", hinted=True):
    return [(name, triton_type, hinted) for name in names]


def _ints(names, triton_type="i32"):
    return [(name, triton_type, False) for name in names]


# The feature arguments every attention kernel takes after its tensors (kernels/attn_common.py): the
# varlen offsets, ALiBi slopes and the RNG state, as pointers that may be NULL when their flag is off.
_FEATURE_POINTERS = _pointers(("CuSeqlensQ", "CuSeqlensK"), "*i32", False)
_SCORE_SCALARS = [(n, "fp32", False) for n in ("qk_scale_log2", "softcap_scale", "softcap_log2")]
_DROPOUT_SCALARS = [("dropout_threshold", "i32", False), ("dropout_scale", "fp32", False)]

# Parameter spec: (name, triton type, hinted in the aligned variant). "{dtype}" is the variant's dtype.
ATTN_FWD_PARAMS = (
    _pointers(("Q", "K", "V", "Out")) + _pointers(("Lse",), "*fp32", False) + _FEATURE_POINTERS
    + _pointers(("AlibiSlopes", "Sinks"), "*fp32", False) + _pointers(("RngState",), "*i64", False)
    + _strides("qkvo")
    + [("stride_lb", "i64", False), ("stride_lh", "i32", False), ("stride_ab", "i64", False)]
    + _ints(("seqlen_q", "seqlen_k", "heads_q", "group_size", "num_m_blocks", "head_dim_qk8", "head_dim_v8",
             "window_left", "window_right", "flags"))
    + _SCORE_SCALARS + _DROPOUT_SCALARS
)
# The sm_90 forward with Q, K and V loaded through TMA (kernels/attn_fwd.py, attn_fwd_tma): the pointer
# kernel's parameters, then three host-side descriptors over [batch, seqlen, heads * head_dim], each a
# 128-byte CUtensorMap followed by its shape (3 x i32) and strides (3 x i64). Their blocks are the
# config's tiles: "{block_m}" and "{block_n}" are filled in per config like "{dtype}".
ATTN_FWD_TMA_PARAMS = ATTN_FWD_PARAMS + [
    ("DescQ", "tensordesc<{dtype}[1,{block_m},{dqk}]>", False),
    ("DescK", "tensordesc<{dtype}[1,{block_n},{dqk}]>", False),
    ("DescV", "tensordesc<{dtype}[1,{block_n},{dv}]>", False),
]
# The Gluon forward (kernels/attn_fwd_hopper.py): the TMA kernel's parameters with Q in 64-row boxes
# (one per consumer warpgroup) and O's in 64-row boxes too (its TMA store; without FLAG_O_TMA it is V's,
# unused), then the number of tiles its persistent programs share. Q and K boxes
# span the head dim, but for 192 (not a power of two, which Gluon's shapes must be): 64 columns, three
# boxes side by side.
ATTN_FWD_HOPPER_PARAMS = ATTN_FWD_PARAMS + [
    ("DescQ", "tensordesc<{dtype}[1,64,{dqk_box}]>", False),
    ("DescK", "tensordesc<{dtype}[1,{block_n},{dqk_box}]>", False),
    ("DescV", "tensordesc<{dtype}[1,{block_n},{dv}]>", False),
    ("DescO", "tensordesc<{dtype}[1,64,{dv}]>", False),
    ("num_tiles", "i32", False),
]
# The prefill over a paged KV cache on sm_90 (kernels/attn_fwd_hopper.py, attn_fwd_hopper_paged; launched
# by aotk_attn_decode with cu_seqlens_q): the Gluon forward's parameters with K and V described as
# [num_pages, page_size, heads_kv * d] in boxes of {box} rows (the config's block_p) and 64 columns (a box
# never crosses a page), then the block table, the lengths, the left padding, the table's row stride and
# log2 of the page size.
ATTN_FWD_HOPPER_PAGED_PARAMS = ATTN_FWD_PARAMS + [
    ("DescQ", "tensordesc<{dtype}[1,64,{dqk_box}]>", False),
    ("DescK", "tensordesc<{dtype}[1,{box},64]>", False),
    ("DescV", "tensordesc<{dtype}[1,{box},64]>", False),
    ("DescO", "tensordesc<{dtype}[1,64,{dv}]>", False),
    ("num_tiles", "i32", False),
    ("BlockTable", "*i32", False), ("CacheSeqlens", "*i32", False), ("CacheLeftpad", "*i32", False),
    ("stride_bt", "i64", False), ("page_shift", "i32", False),
    # Split keys (num_splits > 1): fp32 partial outputs and partial LSEs (through Lse) in the workspace,
    # merged by attn_merge.
    ("OutPartial", "*fp32", False), ("stride_pp", "i64", False), ("stride_lpp", "i64", False),
    ("num_splits", "i32", False), ("split_keys", "i32", False),
]
ATTN_DROPOUT_MASK_PARAMS = (
    _pointers(("Mask",), "*u8", False) + _FEATURE_POINTERS + _pointers(("RngState",), "*i64", False)
    + [("stride_mb", "i64", False), ("stride_mh", "i64", False), ("stride_ms", "i64", False)]
    + _ints(("seqlen_q", "seqlen_k", "heads_q", "num_m_blocks", "flags", "dropout_threshold"))
)

# The backward: a pre-pass stages delta = rowsum(dO * O) and lse * log2(e) in the workspace, in rows
# padded to a multiple of 128 floats, then dK/dV and dQ passes read them. The workspace pointers and the
# padded row stride are aligned in every call (the API requires a 16-byte-aligned workspace and the
# library pads the rows), so they are hinted ALWAYS, not only in the aligned variant.
ATTN_BWD_PREPROCESS_PARAMS = (
    _pointers(("Out", "DOut")) + _pointers(("Lse",), "*fp32", False) + _pointers(("Delta", "LseLog2"), "*fp32", ALWAYS)
    + _pointers(("CuSeqlensQ",), "*i32", False) + _pointers(("Sinks", "SinkPartial"), "*fp32", False)
    + _strides(("o", "d"))
    + [("stride_lb", "i64", False), ("stride_lh", "i32", False)]
    + _ints(("seqlen_q", "heads_q", "num_seqs", "num_m_blocks"))
    + [("stats_stride", "i32", ALWAYS)]
    + _ints(("head_dim_v8", "flags"))
)
ATTN_BWD_SINK_REDUCE_PARAMS = _pointers(("SinkPartial", "DSinks"), "*fp32", False) + _ints(("count",))
ATTN_BWD_DKDV_PARAMS = (
    _pointers(("Q", "K", "V", "DOut")) + _pointers(("LseLog2", "Delta"), "*fp32", ALWAYS) + _pointers(("DK", "DV"))
    + _FEATURE_POINTERS + _pointers(("AlibiSlopes",), "*fp32", False) + _pointers(("RngState",), "*i64", False)
    + _strides(("q", "k", "v", "do", "dk", "dv")) + [("stride_ab", "i64", False)]
    + _ints(("seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size", "num_n_blocks"))
    + [("stats_stride", "i32", ALWAYS)]
    + _ints(("head_dim_qk8", "head_dim_v8", "window_left", "window_right", "flags"))
    + [("softmax_scale", "fp32", False)] + _SCORE_SCALARS + _DROPOUT_SCALARS
)
# The sm_90 dK/dV pass in Gluon (kernels/attn_bwd_hopper.py): attn_bwd_dkdv's parameters, then
# descriptors of Q, K, V and dO over [batch, seqlen, heads * head_dim] (query tiles of {block_m} rows,
# key blocks of {block_n}).
ATTN_BWD_DKDV_HOPPER_PARAMS = ATTN_BWD_DKDV_PARAMS + [
    ("DescQ", "tensordesc<{dtype}[1,{block_m},{dqk_box}]>", False),
    ("DescK", "tensordesc<{dtype}[1,{block_n},{dqk_box}]>", False),
    ("DescV", "tensordesc<{dtype}[1,{block_n},{dv}]>", False),
    ("DescDO", "tensordesc<{dtype}[1,{block_m},{dv}]>", False),
]
# The non-deterministic sm_90 backward's one pass (kernels/attn_bwd_hopper.py, attn_bwd_fused_hopper):
# the dK/dV pass's parameters, then a descriptor of the fp32 dQ accumulator in the workspace,
# [batch * heads_q, stats_stride, head_dim], that its query tiles are reduce-added into.
ATTN_BWD_FUSED_HOPPER_PARAMS = ATTN_BWD_DKDV_HOPPER_PARAMS + [
    ("DescDQ", "tensordesc<fp32[1,{block_m},{dqk}]>", False),
]
# ... and the cast of that accumulator into dq (kernels/attn_bwd.py): only after the fused pass, whose
# calls are aligned (TMA needs it), so everything is hinted.
ATTN_BWD_DQ_CONVERT_PARAMS = (
    _pointers(("DQAcc",), "*fp32", ALWAYS) + _pointers(("DQ",)) + _pointers(("CuSeqlensQ",), "*i32", False)
    + _strides(("q",)) + _ints(("seqlen_q", "heads_q", "num_m_blocks")) + [("stats_stride", "i32", ALWAYS)]
    + _ints(("flags",))
)
ATTN_BWD_DQ_PARAMS = (
    _pointers(("Q", "K", "V", "DOut")) + _pointers(("LseLog2", "Delta"), "*fp32", ALWAYS) + _pointers(("DQ",))
    + _FEATURE_POINTERS + _pointers(("AlibiSlopes",), "*fp32", False) + _pointers(("RngState",), "*i64", False)
    + _strides(("q", "k", "v", "do", "dq")) + [("stride_ab", "i64", False)]
    + _ints(("seqlen_q", "seqlen_k", "heads_q", "group_size", "num_m_blocks"))
    + [("stats_stride", "i32", ALWAYS)]
    + _ints(("head_dim_qk8", "head_dim_v8", "window_left", "window_right", "flags"))
    + [("softmax_scale", "fp32", False)] + _SCORE_SCALARS + _DROPOUT_SCALARS
)
# The sm_90 dQ pass in Gluon (kernels/attn_bwd_dq_hopper.py): attn_bwd_dq's parameters, then descriptors
# of Q, K, V and dO over [batch, seqlen, heads * head_dim] (query blocks of {block_m} rows, key blocks of
# {block_n}).
ATTN_BWD_DQ_HOPPER_PARAMS = ATTN_BWD_DQ_PARAMS + [
    ("DescQ", "tensordesc<{dtype}[1,{block_m},{dqk_box}]>", False),
    ("DescK", "tensordesc<{dtype}[1,{block_n},{dqk_box}]>", False),
    ("DescV", "tensordesc<{dtype}[1,{block_n},{dv}]>", False),
    ("DescDO", "tensordesc<{dtype}[1,{block_m},{dv}]>", False),
]

# Selection attention (kernels/sel_attn.py). The pointers and strides are always hinted (ALWAYS): the API
# requires 16-byte-aligned pointers and strides that are multiples of 16 elements, which contiguous
# tensors with the selection head dims (64, 128, 192) always have. Token strides are int64, head strides
# int32. For sel_fwd and sel_bwd_dkdv the "align" axis means something else: the aligned variant hints
# that the group size is a multiple of 16 (bench/explore/tune_sel_jit.py --spec, H100, the benchmark's problem
# at 64k tokens, G = 16: the forward ran in 18.1 ms with the JIT's divisibility of group_size and 20.6
# without it; dK/dV 13.9 and 14.7; dQ 18.0 either way, so it has no such variant).
def _sel_strides(tensors, hinted=ALWAYS):
    return [item for t in tensors for item in ((f"stride_{t}s", "i64", hinted), (f"stride_{t}h", "i32", hinted))]


_SEL_INDEX_POINTERS = _pointers(("BlockIdx", "BlockCnt"), "*i32", False)
_SEL_SEQ_POINTERS = _pointers(("CuSeqlensQ", "CuSeqlensK"), "*i32", False)
_SEL_INDEX_STRIDES = [("stride_is", "i64", False), ("stride_ih", "i32", False), ("stride_cs", "i64", False),
                      ("stride_ch", "i32", False)]
SEL_FWD_PARAMS = (
    _pointers(("Q", "K", "V", "Out"), hinted=ALWAYS) + _pointers(("Lse",), "*fp32", False) + _SEL_SEQ_POINTERS
    + _SEL_INDEX_POINTERS + _sel_strides("qkvo") + _sel_strides("l", False) + _SEL_INDEX_STRIDES
    + _ints(("num_seqs", "total_q", "total_k", "max_seqlen_k")) + [("group_size", "i32", True)]
    + _ints(("group_chunks", "num_slots", "flags")) + [("qk_scale_log2", "fp32", False)]
)
SEL_BWD_DQ_PARAMS = (
    _pointers(("Q", "K", "V", "Out", "DOut"), hinted=ALWAYS) + _pointers(("Lse",), "*fp32", False)
    + _pointers(("DQ",), hinted=ALWAYS) + _pointers(("Delta",), "*fp32", ALWAYS) + _SEL_SEQ_POINTERS
    + _SEL_INDEX_POINTERS + _pointers(("Compact",), "*i32", ALWAYS)
    + _sel_strides(("q", "k", "v", "o", "do", "dq")) + _sel_strides("l", False) + _SEL_INDEX_STRIDES
    + _ints(("num_seqs", "total_q", "total_k", "max_seqlen_k", "heads_q", "group_size", "group_chunks", "num_slots",
             "flags"))
    + [("qk_scale_log2", "fp32", False), ("softmax_scale", "fp32", False)]
)
SEL_BWD_DKDV_PARAMS = (
    _pointers(("Q", "K", "V", "DOut"), hinted=ALWAYS) + _pointers(("Lse",), "*fp32", False)
    + _pointers(("Delta",), "*fp32", ALWAYS) + _pointers(("DK", "DV"), hinted=ALWAYS) + _SEL_SEQ_POINTERS
    + _pointers(("Offsets", "Tokens", "Chunks"), "*i32", ALWAYS) + _pointers(("Partials",), "*fp32", ALWAYS)
    + _sel_strides(("q", "k", "v", "do", "dk", "dv")) + _sel_strides("l", False)
    + [("stride_offsets", "i32", False), ("stride_tokens", "i64", False)]
    + _ints(("num_seqs", "total_q", "total_k", "max_seqlen_k", "heads_q")) + [("group_size", "i32", True)]
    + _ints(("num_key_tiles", "chunk_tokens", "max_chunks", "partials_per_head", "flags"))
    + [("qk_scale_log2", "fp32", False), ("softmax_scale", "fp32", False)]
)
_SEL_INDEX_ENTRY_INTS = _ints(("num_seqs", "total_q", "total_k", "max_seqlen_k", "block_size", "num_slots",
                                "num_chunks", "search_steps", "flags"))
SEL_INDEX_ZERO_PARAMS = _pointers(("Offsets",), "*i32", ALWAYS) + _ints(("count",))
SEL_INDEX_COUNT_PARAMS = (
    _SEL_INDEX_POINTERS + _SEL_SEQ_POINTERS + _pointers(("Offsets",), "*i32", ALWAYS) + _SEL_INDEX_STRIDES
    + [("stride_offsets", "i32", False)] + _SEL_INDEX_ENTRY_INTS
)
SEL_INDEX_SCAN_PARAMS = (_pointers(("Offsets", "Cursors", "Chunks"), "*i32", ALWAYS)
                         + _ints(("stride_offsets", "slots", "chunk_tokens", "max_chunks")))
SEL_INDEX_SCATTER_PARAMS = (
    _SEL_INDEX_POINTERS + _SEL_SEQ_POINTERS + _pointers(("Cursors", "Tokens"), "*i32", ALWAYS) + _SEL_INDEX_STRIDES
    + [("stride_offsets", "i32", False), ("stride_tokens", "i64", False)] + _SEL_INDEX_ENTRY_INTS
)
SEL_INDEX_ORDER_PARAMS = (
    _SEL_INDEX_POINTERS + _SEL_SEQ_POINTERS + _pointers(("Offsets", "Tokens"), "*i32", ALWAYS) + _SEL_INDEX_STRIDES
    + [("stride_offsets", "i32", False), ("stride_tokens", "i64", False)]
    + _ints(("num_seqs", "total_q", "total_k", "max_seqlen_k", "block_size", "num_slots", "flags"))
)
SEL_CHECK_INDICES_PARAMS = (
    _SEL_INDEX_POINTERS + _SEL_SEQ_POINTERS + _pointers(("Result",), "*i64", False) + _SEL_INDEX_STRIDES
    + _ints(("num_seqs", "total_q", "total_k", "max_seqlen_k", "heads_kv", "block_size", "num_slots", "flags"))
)
# Decoding (kernels/attn_decode.py). Every stride is int64 (a cache may span more than 2^31 elements).
# Only an aligned variant is compiled: q, the caches and out 16-byte aligned with strides that are
# multiples of 16 elements (ptxas -v, sm_90, bf16 d128, 16-row tile: 168 registers and 16-byte
# cp.async loads aligned; without the hints 255 registers, 1352 bytes spilled and 2-byte loads). The
# split partials live in the workspace, 16-byte aligned in every call.
def _decode_strides(tensors, hinted=True):
    return [item for t in tensors for item in ((f"stride_{t[0]}", "i64", hinted), (f"stride_{t[1]}", "i64", hinted),
                                               (f"stride_{t[2]}", "i64", hinted))]


ATTN_DECODE_PARAMS = (
    _pointers(("Q", "K", "V", "Out")) + _pointers(("Lse",), "*fp32", False)
    + _pointers(("BlockTable", "CacheSeqlens", "CuSeqlensQ", "CacheLeftpad"), "*i32", False)
    + _pointers(("AlibiSlopes", "Sinks"), "*fp32", False) + _pointers(("OutPartial", "LsePartial"), "*fp32", ALWAYS)
    + _pointers(("KNew", "VNew"))  # the step's new keys and values when it appends them itself (else NULL)
    + _decode_strides((("qb", "qs", "qh"), ("kp", "ks", "kh"), ("vp", "vs", "vh"), ("ob", "os", "oh"),
                       ("nb", "ns", "nh"), ("wb", "ws", "wh")))
    + [(n, "i64", False) for n in ("stride_lb", "stride_lh", "stride_tb", "stride_ab")]
    + _ints(("batch_size", "seqlen_q", "heads_q", "group_size", "capacity", "page_size", "num_splits", "split_keys",
             "row_chunks", "head_dim_qk8", "head_dim_v8", "window_left", "window_right", "flags", "seqlen_new"))
    + _SCORE_SCALARS
)
# Appending the step's keys and values into the cache (the decode's alignment rule: hinted throughout).
ATTN_CACHE_APPEND_PARAMS = (
    _pointers(("KNew", "VNew", "K", "V")) + _pointers(("BlockTable", "CacheSeqlens"), "*i32", False)
    + _decode_strides((("nb", "ns", "nh"), ("wb", "ws", "wh"), ("kp", "ks", "kh"), ("vp", "vs", "vh")))
    + [("stride_tb", "i64", False)]
    + _ints(("seqlen_new", "heads_kv", "capacity", "page_size", "head_dim_qk8", "head_dim_v8", "flags"))
)
# The merge: partials and output in any of fp32, fp16 and bf16, chosen at run time by which of each
# typed triple is non-NULL; any strides (int64).
# The aligned variant hints the partial and output pointers 16-byte aligned and their strides multiples
# of 16 elements (split-KV's own partials always are: the workspace rows are padded to 16 floats).
ATTN_MERGE_PARAMS = (
    _pointers(("OutPartial32",), "*fp32") + _pointers(("OutPartial16",), "*fp16")
    + _pointers(("OutPartialBF16",), "*bf16") + _pointers(("LsePartial",), "*fp32", False)
    + _pointers(("Out32",), "*fp32") + _pointers(("Out16",), "*fp16")
    + _pointers(("OutBF16",), "*bf16") + _pointers(("Lse", "Sinks"), "*fp32", False)
    + _pointers(("CuSeqlensQ",), "*i32", False)
    + [(n, "i64", True) for n in ("stride_pp", "stride_pb", "stride_ps", "stride_ph")]
    + [(n, "i64", False) for n in ("stride_lpp", "stride_lpb", "stride_lph", "stride_lps")]
    + [(n, "i64", True) for n in ("stride_ob", "stride_os", "stride_oh")]
    + [(n, "i64", False) for n in ("stride_lb", "stride_lh", "stride_ls")]
    + _ints(("num_partials", "seqlen_q", "heads", "num_rows", "head_dim8", "flags"))
)

# (q/k, v) head dims; 192 runs as two dots of 128 and 64.
SEL_HEAD_DIMS = ((64, 64), (128, 128), (192, 128))
SEL_BLOCK_SIZES = (32, 64, 128)

# The compiled head-dim pairs (q/k, v): powers of two (Triton's tiles are), every multiple of 8 up to
# 256 runs in the smallest pair that holds it, masked; (256, 128) serves DeepSeek's (192, 128).
ATTN_HEAD_DIMS = ((32, 32), (64, 64), (128, 128), (256, 256), (256, 128))
# The TMA forward runs where the head dim is the tile's (a box must not reach into the next head) and
# where TMA measured faster than the pointer kernel (bench/explore/hopper/fwd_tma_jit.py, H100, bf16,
# 16k tokens, TFLOP/s, pointer -> TMA): d=256 340 -> 532 non-causal at 8k; d=128 441 -> 490 at 2k and
# even at 8k (495 -> 494); d=64 even (433 -> 427), so d=64 keeps the pointer kernel.
ATTN_TMA_HEAD_DIMS = ((128, 128), (256, 256))
# The Gluon forward with FA3's warp-specialized ping-pong schedule (kernels/attn_fwd_hopper.py) at the
# head dims it was measured at; d=256 with 64-key blocks (bench/explore/hopper/gluon_attn_fwd.py,
# ppp_bn64_s2: 0.84-0.98x cuDNN at 4k/8k, where the Triton TMA kernel measured 0.70-0.89).
# (192, 128), DeepSeek's pair, has a tile of its own (issue 11): Q and K in three 64-column boxes.
ATTN_HOPPER_HEAD_DIMS = ((64, 64), (128, 128), (192, 128), (256, 256))
# The Gluon forward with three consumer warpgroups (192-row tiles), FA3's d=64 tile: the host takes it
# for the plain forward without a causal mask (bench/explore/hopper/gluon_attn_fwd.py, ppp3_bn128_s2:
# 1.0-1.07x cuDNN non-causal; causal, with the static rounds, it measured worse than two warpgroups).
ATTN_HOPPER_WG3_HEAD_DIMS = ((64, 64),)
# The Gluon forward drawing dropout in its consumers (attn_fwd_hopper_dropout): its spreading of the
# random bytes is written for 128-key blocks, which d64 and d128 take.
ATTN_HOPPER_DROPOUT_HEAD_DIMS = ((64, 64), (128, 128))
# The backward's forms drawing dropout (attn_bwd_dkdv_hopper_dropout, attn_bwd_fused_hopper_dropout): the
# head dims whose consumers hold 64 query columns a step (the spreading's shape).
ATTN_HOPPER_BWD_DROPOUT_HEAD_DIMS = ((64, 64), (128, 128))
# The paged prefill's Gluon forward (attn_fwd_hopper_paged).
ATTN_HOPPER_PAGED_HEAD_DIMS = ((64, 64), (128, 128), (192, 128), (256, 256))
# The Gluon dK/dV pass (kernels/attn_bwd_hopper.py) at the head dims it was measured at.
ATTN_HOPPER_BWD_HEAD_DIMS = ((64, 64), (128, 128), (192, 128), (256, 256))
# Its fused (non-deterministic) form and the cast of its dQ accumulator: d=256 measured faster with the
# deterministic passes (the dK/dV pass beside the Gluon dQ pass), which the host takes there either way.
ATTN_HOPPER_BWD_FUSED_HEAD_DIMS = ((64, 64), (128, 128))
# The Gluon dQ pass (kernels/attn_bwd_dq_hopper.py), beside the deterministic Gluon dK/dV pass.
ATTN_HOPPER_BWD_DQ_HEAD_DIMS = ((192, 128), (256, 256))
EXTRAS = (False, True)

T = TileConfig
# Tuning tables: for each (family, arch, head dims), configs with the smallest size key each one is
# chosen for (seqlen_k for attn_bwd_dkdv, seqlen_q otherwise).
# sm_90 d=64/128 figures are from bench/explore/tune_fwd_jit.py and bench/explore/tune_bwd_jit.py on the H100 (TFLOP/s,
# bf16, 16k tokens):
#   fwd d=64:  seqlen 512-1024 best with 64x64/4 warps (causal 1024: 305 vs 283 for 128x64/8);
#              from 4096 on 128x64/8 warps/3 stages (456 non-causal, 427 causal at 16k).
#   fwd d=128: seqlen <= 1024 best with 64x64/4 warps (394 at 1024); from 4096 on 128x128/8 warps/3
#              stages (502-520), 128x64/8 is within 5%.
#   dK/dV d=64: 32x64/4 warps/2 stages best or within 2% everywhere; d=128: 64x64/4/2 up to 2k,
#              64x128/8/3 from 4k.  dQ: 128x64/8 warps/3 stages best or within 4% on every row.
# d=32 and d=256 configs are first picks sized to the shared memory and register file (see the issue-4
# notes in docs/design.md for their measurement). sm_80 configs are not tuned (no A100 here): tiles that
# fit the 99 KiB shared-memory limit of sm_86/sm_89.
# FWD_SHORT_CAUSAL: the size key of the Gluon forward's short causal tile (64-key blocks, 3 stages), beyond
# any sequence, so that the tuning rule never picks it by size: src/attn/aotk_attn.c asks for it by this key
# (HOPPER_SHORT_CAUSAL_KEY) for a causal mask (no left window) over at most 512 queries and keys, or 1024
# with softcap or ALiBi. Half-width key blocks halve the masked triangle the diagonal block computes, which
# is most of a short causal row's waste. Through the JIT (bench/explore/hopper/fwd_hopper_jit.py, H100,
# bf16, causal, TFLOP/s with 128 -> 64 keys a block): d64 at 256 93 -> 121, 512 184 -> 195, 768 257 -> 231,
# 1024 296 -> 258; d128 at 256 147 -> 157, 512 265 -> 290, 768 357 -> 350, 1024 411 -> 388; with softcap or
# ALiBi (EXTRAS, which keep block boundaries) d128 at 512 174-176 -> 222-227, 768 231-232 -> 283-294, 1024
# 279-283 -> 318-331, 2048 about even; d64 at 512 111-118 -> 138-154, 1024 188-207 -> 198-223, 2048 254-287 ->
# 233-269. Slower without a causal mask (d64 non-causal 512: 348 -> 305) and on windows (causal window
# of 1024 at 4096: 470 -> 415).
FWD_SHORT_CAUSAL = 1 << 30
ATTN_TUNING = {
    ("attn_fwd", 90, 32, 32): ((1, T(64, 64, 4, 3)), (1025, T(128, 64, 4, 3))),
    ("attn_fwd", 90, 64, 64): ((1, T(64, 64, 4, 3)), (1025, T(128, 64, 8, 3))),
    ("attn_fwd", 90, 128, 128): ((1, T(64, 64, 4, 3)), (1025, T(128, 128, 8, 3))),
    ("attn_fwd", 90, 256, 256): ((1, T(64, 64, 4, 2)),),
    ("attn_fwd", 90, 256, 128): ((1, T(64, 64, 4, 2)),),
    # Gluon: num_warps is the first consumer warpgroup's (the program runs 4 + 4 + 1 producer, padded to
    # 12 warps: the metadata's count is what launches), num_stages the K/V ring's depth
    # (bench/explore/hopper/gluon_attn_fwd_check.py: BLOCK_N 128 with 2 stages beat 64 with 3 by 10-20%).
    ("attn_fwd_hopper", 90, 64, 64): ((1, T(128, 128, 4, 2)), (FWD_SHORT_CAUSAL, T(128, 64, 4, 3))),
    ("attn_fwd_hopper", 90, 128, 128): ((1, T(128, 128, 4, 2)), (FWD_SHORT_CAUSAL, T(128, 64, 4, 3))),
    ("attn_fwd_hopper", 90, 256, 256): ((1, T(128, 64, 4, 2)),),
    # (192, 128): 128-key blocks with one Q buffer (as at d=256): 48 KiB of Q, 2 x 48 of K and 2 x 32 of V.
    ("attn_fwd_hopper", 90, 192, 128): ((1, T(128, 128, 4, 2)),),
    # Three consumer warpgroups of 64 rows (4 + 4 + 4 + 1 producer warps, padded to 16): registers
    # 128 at entry, setmaxnreg 160 for the consumers and 24 for the producer (CONSUMER_REGS below).
    ("attn_fwd_hopper_wg3", 90, 64, 64): ((1, T(192, 128, 4, 2)),),
    # Dropout in the consumers: the plain tile (128-key blocks; no short causal row, whose blocks are 64).
    ("attn_fwd_hopper_dropout", 90, 64, 64): ((1, T(128, 128, 4, 2)),),
    ("attn_fwd_hopper_dropout", 90, 128, 128): ((1, T(128, 128, 4, 2)),),
    # The paged prefill: the plain forward's tile, K and V in boxes of 16 rows (block_p), or 64 from 64-row
    # pages on (the size key is the page size). Each box costs the producer a block-table entry and its
    # TMA issues: on the H100 (bench/explore/hopper/paged_prefill_jit.py, bf16, 4 requests, GQA, chunks of
    # 256-4096 causal queries over 4k-16k keys) 16-row boxes ran 0.87-1.00 of the dense varlen forward
    # over the same keys whatever the page size, 64-row boxes 0.90-1.06; at d256 0.97-1.01 either way, at
    # (192, 128) 0.76-0.82 with 16-row boxes (three 64-column chunks of K: 24 boxes a block) and 0.99-1.02
    # with 64-row ones.
    # (The host takes the family for power-of-two pages of 16 rows or more only.)
    ("attn_fwd_hopper_paged", 90, 64, 64): ((1, T(128, 128, 4, 2, block_p=16)), (64, T(128, 128, 4, 2, block_p=64))),
    ("attn_fwd_hopper_paged", 90, 128, 128): ((1, T(128, 128, 4, 2, block_p=16)),
                                              (64, T(128, 128, 4, 2, block_p=64))),
    ("attn_fwd_hopper_paged", 90, 192, 128): ((1, T(128, 128, 4, 2, block_p=16)),
                                              (64, T(128, 128, 4, 2, block_p=64))),
    # d256 (64-key blocks): the box did not matter (0.97-1.01 either way), so the 16-row one serves every page.
    ("attn_fwd_hopper_paged", 90, 256, 256): ((1, T(128, 64, 4, 2, block_p=16)),),
    # The Gluon dK/dV pass: 64 query rows per step, 128 keys per program, a 2-stage Q/dO ring
    # (bench/explore/hopper/gluon_attn_bwd.py: 3 stages measured no faster). num_warps is the default
    # partition's: at d 64 and 128 one consumer warpgroup in ping-pong with a second (4 + 4 + 1 producer
    # warps, padded to 12); at 256 and (192, 128) one 8-warp consumer partition (8 + 1, padded to 12).
    ("attn_bwd_dkdv_hopper", 90, 64, 64): ((1, T(64, 128, 4, 2)),),
    ("attn_bwd_dkdv_hopper", 90, 128, 128): ((1, T(64, 128, 4, 2)),),
    ("attn_bwd_dkdv_hopper", 90, 256, 256): ((1, T(64, 64, 8, 2)),),
    # (192, 128): its WIDE tiles (32 query rows a step, 3 stages), Q and K in three 64-column boxes.
    ("attn_bwd_dkdv_hopper", 90, 192, 128): ((1, T(32, 128, 8, 3)),),
    # The same tiles with dQ fused (gluon_attn_bwd.py's bm64_s2_tr_rs: 0.86x cuDNN over the d64/d128
    # grid through the JIT, against 0.76x for the dK/dV pass beside the Triton dQ pass). d 64: two
    # consumer warpgroups in ping-pong and a dQ warpgroup (4 + 4 + 4 + 1, padded to 16; HEAD_DIM_OPTIONS);
    # d 128: one 8-warp consumer partition.
    ("attn_bwd_fused_hopper", 90, 64, 64): ((1, T(64, 128, 4, 2)),),
    ("attn_bwd_fused_hopper", 90, 128, 128): ((1, T(64, 128, 8, 2)),),
    # Dropout drawn in the consumers: the same tiles.
    ("attn_bwd_dkdv_hopper_dropout", 90, 64, 64): ((1, T(64, 128, 4, 2)),),
    ("attn_bwd_dkdv_hopper_dropout", 90, 128, 128): ((1, T(64, 128, 4, 2)),),
    ("attn_bwd_fused_hopper_dropout", 90, 64, 64): ((1, T(64, 128, 4, 2)),),
    ("attn_bwd_fused_hopper_dropout", 90, 128, 128): ((1, T(64, 128, 8, 2)),),
    # The Gluon dQ pass: 64 query rows per program, 64 keys per step, 8 consumer warps, a 2-stage K/V ring.
    ("attn_bwd_dq_hopper", 90, 256, 256): ((1, T(64, 64, 8, 2)),),
    ("attn_bwd_dq_hopper", 90, 192, 128): ((1, T(128, 64, 8, 2)),),
    ("attn_fwd_tma", 90, 128, 128): ((1, T(128, 64, 4, 2)), (4096, T(128, 128, 8, 3))),
    ("attn_fwd_tma", 90, 256, 256): ((1, T(128, 64, 8, 2)),),
    ("attn_fwd", 80, 32, 32): ((1, T(64, 64, 4, 3)), (1025, T(128, 64, 4, 3))),
    ("attn_fwd", 80, 64, 64): ((1, T(64, 64, 4, 3)), (1025, T(128, 64, 4, 3))),
    ("attn_fwd", 80, 128, 128): ((1, T(64, 64, 4, 3)), (1025, T(128, 64, 8, 2))),
    ("attn_fwd", 80, 256, 256): ((1, T(64, 32, 4, 2)),),
    ("attn_fwd", 80, 256, 128): ((1, T(64, 32, 4, 2)),),
    ("attn_bwd_dkdv", 90, 32, 32): ((1, T(32, 64, 4, 2)),),
    ("attn_bwd_dkdv", 90, 64, 64): ((1, T(32, 64, 4, 2)),),
    ("attn_bwd_dkdv", 90, 128, 128): ((1, T(64, 64, 4, 2)), (4096, T(64, 128, 8, 3))),
    ("attn_bwd_dkdv", 90, 256, 256): ((1, T(32, 64, 8, 2)),),
    ("attn_bwd_dkdv", 90, 256, 128): ((1, T(32, 64, 8, 2)),),
    ("attn_bwd_dkdv", 80, 32, 32): ((1, T(64, 64, 4, 2)),),
    ("attn_bwd_dkdv", 80, 64, 64): ((1, T(64, 64, 4, 2)),),
    ("attn_bwd_dkdv", 80, 128, 128): ((1, T(64, 64, 4, 2)),),
    ("attn_bwd_dkdv", 80, 256, 256): ((1, T(32, 32, 4, 1)),),
    ("attn_bwd_dkdv", 80, 256, 128): ((1, T(32, 32, 4, 1)),),
    ("attn_bwd_dq", 90, 32, 32): ((1, T(128, 64, 8, 3)),),
    ("attn_bwd_dq", 90, 64, 64): ((1, T(128, 64, 8, 3)),),
    ("attn_bwd_dq", 90, 128, 128): ((1, T(128, 64, 8, 3)),),
    ("attn_bwd_dq", 90, 256, 256): ((1, T(64, 64, 8, 2)),),
    ("attn_bwd_dq", 90, 256, 128): ((1, T(64, 64, 8, 2)),),
    ("attn_bwd_dq", 80, 32, 32): ((1, T(128, 64, 8, 2)),),
    ("attn_bwd_dq", 80, 64, 64): ((1, T(128, 64, 8, 2)),),
    ("attn_bwd_dq", 80, 128, 128): ((1, T(64, 64, 4, 2)),),
    ("attn_bwd_dq", 80, 256, 256): ((1, T(32, 32, 4, 1)),),
    ("attn_bwd_dq", 80, 256, 128): ((1, T(32, 32, 4, 1)),),
}
# The EXTRAS variants need more shared memory (the dropout mask's layout change goes through it), so
# where a plain config does not fit they take a smaller one.
# The EXTRAS dK/dV pass at d=128 spilled 2072 bytes per thread with the plain kernel's 64x128/8/3
# (ptxas -v); 64x64/8/2 spills 152.
ATTN_TUNING_EXTRAS = {
    # The TMA kernel's 128 x 128 tile needs 241 KiB with the EXTRAS code (over sm_90's 227).
    ("attn_fwd_tma", 90, 128, 128): ((1, T(128, 64, 4, 2)), (4096, T(128, 64, 8, 2))),
    ("attn_fwd", 90, 128, 128): ((1, T(64, 64, 4, 3)), (1025, T(128, 64, 8, 3))),
    ("attn_bwd_dkdv", 90, 128, 128): ((1, T(64, 64, 8, 2)),),
}
# Selection tiles. Forward and dQ: BLOCK_G query-head rows (block_m) by one selected block (block_n =
# the block size); a group of up to 16 heads runs in a 16-row tile, larger groups in 64-row tiles
# (several programs when G > 64). The size key is the group size.
# bench/explore/tune_sel_jit.py, H100, the benchmark's problem at 64k tokens (G = 16, d = 128, block 64): the
# 16-row tile with 2 warps ran the forward in 18.6 ms and dQ in 19.1 with 2 stages, 18.2 and 17.9 with 3
# (4 warps: 20.0, 20.1; 8 warps: 26.7, 23.2; 1 warp: 21.6, 30.4; a 32-row tile: 28.1, 28.9).
def _sel_group_configs(arch, dqk, block_size):
    stage_bytes = block_size * (dqk + 128) * 2
    stages = 3 if arch == 90 and 3 * stage_bytes <= 200 * 1024 else 2 if arch == 90 or 2 * stage_bytes <= 64 * 1024 else 1
    return ((1, T(16, block_size, 2, stages)), (17, T(64, block_size, 4, min(stages, 2))))


# dK/dV: BLOCK_R (token, query head) pairs per step (block_m) against BLOCK_N keys (block_n, at most the
# block size) held by the program. Same script and problem: 64 x 64 with 4 warps, 13.9 ms; 8 warps 24.9;
# 128 x 64 with 8 warps 16.1; 32 x 64 20.9; 64 x 32 20.1.
def _sel_dkdv_config(arch, dqk, block_size):
    block_n = min(block_size, 64 if dqk <= 128 else 32)
    return ((1, T(64, block_n, 4, 2 if arch == 90 else 1)),)


# Decoding: one kernel function, three families by how a key row is found (PAGE_MODE, a constexpr: a
# run-time branch in the key loop kept Triton from pipelining the paged loads): contiguous (0), paged
# with a lookup per key row (1), paged with one lookup per block of keys (2: the page size is a multiple
# of BLOCK_N, chosen by the host).
DECODE_PAGE_MODES = {"attn_decode": 0, "attn_decode_paged": 1, "attn_decode_paged_blocks": 2, "attn_decode_paged32": 1}
# attn_decode_paged32: the per-row lookup with 32-bit K/V offsets (OFFSET32, FAMILY_CONSTEXPRS), which the
# host takes where every element offset of both caches is below 2^31; attn_decode_paged stays for larger
# caches. On the H200 (tune_decode_jit.py, bf16 d128, two rounds) 16-key pages ran 5-13% faster with it
# (GQA 32/8 batch 16 at 32k keys 550.7 -> 492.8 us, contiguous 488.7).


# A group's query rows (G x seqlen_q) in a 16-row tile up to 16 rows, a 32-row tile up to 32 (MQA at 32
# query heads), else 64-row tiles; the size key is G x seqlen_q. 128 keys per step up to head dim 128
# (measured on the H100 through bench/explore/tune_decode_jit.py, bf16 d128, the kernel and its merge: against
# 64 keys, within 4% either way on contiguous caches (64 keys ahead when split at batch 1, behind at
# batch 64), 10-25% faster on 16- and 256-key pages, 1.4x on MQA); 64 at 256, where 128 keys of K and V
# take 128 KB a stage. More stages measured no better; filling two program slots per SM with splits
# (264 programs) was 5-25% slower than one with
# this tile (not with the short-split tile below). The 32-row tile runs 8 warps on sm_90 up to head dim 128:
# with 4 it holds 255 registers and spills 120 bytes where nothing tells the compiler that seqlen_q
# is 1 (the JIT, which specializes the 1, measures 4 warps faster: 15.8 against 16.9 us at batch 8 and
# 8k keys). Through the JIT with that specialization off, as the AOT build compiles it
# (tune_decode_jit.py --unspecialize all, H100, bf16 d128, MQA 32/1), 8 warps against 4: batch 8 at 8k
# keys 19.7 -> 17.0 us, batch 1 at 128k 37.9 -> 35.3, batch 16 at 32k 106.7 -> 100.4, batch 64 at 4k
# 69.8 -> 65.3, and 16-key pages 6-20% faster.
#
# DECODE_SHORT_SPLIT: the size key of the short-split tile, beyond any group's rows, so that the tuning rule
# never picks it by size: src/decode/aotk_decode.c asks for it by this key (AOTK__DECODE_SHORT_SPLIT_KEY)
# where a split cuts at most DECODE_SHORT_SPLIT_KEYS keys of a 16-row group into splits of as few as 64
# keys, two programs an SM. 64 keys a step and 2 stages (smaller programs, more of them resident) against
# the 16x128 tile with 3 stages, on the H100 (tune_decode_jit.py --unspecialize all, bf16 d128, GQA 32/8
# and 64/8, the kernel and its merge), contiguous: batch 1 at 1k keys 8.2 -> 6.9 us, 2k 8.3 -> 7.8, 8k
# 12.8 -> 12.6, batch 4 at 1k 10.0 -> 9.7, batch 8 at 1k 13.7 -> 13.1, batch 2 at 4k 12.6 -> 12.4; 16-key
# pages 8-10% faster on the same rows, 256-key pages 2-10%. From 16k keys at batch 1 it was 1-2% slower
# (29.6 -> 29.9 us; 32k 50.9 -> 51.8), hence the bound; unsplit problems keep the wide tile (batch 16 at
# 1k 26.8 -> 30.8 us). Not on sm_80 (not measured) nor for the MQA tiles (no gain: batch 8 at 8k 15.8 ->
# 17.7 us with 32x64, 4 warps, 2 stages).
DECODE_SHORT_SPLIT = 1 << 30
DECODE_SHORT_SPLIT_KEYS = 8192
# DECODE_PAGED_SHALLOW: the size key of the paged families' 16-row tile with 2 stages, which
# src/decode/aotk_decode.c asks for (AOTK__DECODE_PAGED_SHALLOW_KEY) where the grid holds more programs than
# SMs. The paged kernels load a step's page ids one step ahead, so with 3 stages K and V stream two steps
# ahead as in the contiguous kernel (139 KB of shared memory, one program an SM); with 2 stages one step
# ahead (about 70 KB, three programs an SM), which grids of several programs an SM want. Through the JIT
# (H200, bf16 d128, GQA 32/8, tune_decode_jit.py --unspecialize all): b64 at 1k keys over 16-key pages 85.1
# us with 3 stages, 73.9 with 2 (72.2 before the loop-carried page ids), 256-key pages 76.7 -> 68.9 (69.0);
# b256 at 1k 326.9 -> 275.9 (270.3) and 278.9 -> 256.5 (256.8); one wave the other way: b16 at 32k 535.6
# against 686.1 (623.2), b1 at 128k 140.2 against 179.7 (163.4).
DECODE_PAGED_SHALLOW = 1 << 29


def _decode_configs(arch, dqk, dv, paged=False):
    wide = dqk <= 128 and dv <= 128
    stages = (3 if wide else 2) if arch == 90 else (2 if wide else 1)
    block_n = 128 if wide else 64
    warps32 = 8 if arch == 90 and wide else 4
    configs = ((1, T(16, block_n, 4, stages)), (17, T(32, block_n, warps32, stages)),
               (33, T(64, 64, 4 if wide else 8, min(stages, 2))))
    if arch == 90 and wide:
        configs += ((DECODE_SHORT_SPLIT, T(16, 64, 4, 2)),)
        if paged:
            configs += ((DECODE_PAGED_SHALLOW, T(16, block_n, 4, 2)),)
    return configs


# The merge: 8 rows x 32 head-dim columns per program, 2 warps, 3 stages (the partials' loads pipelined).
# Split-KV merges few rows from many partials, so small tiles keep more SMs loading: on the H100
# (bench/explore/tune_decode_jit.py, bf16 d128) 8x32 against 16x64 took a batch-1 128k-token MQA step from 78 to
# 64 us with 103 partials, and never lost. Where that kernel's grid leaves SMs idle (few rows: split-KV
# decoding at small batch) and from MERGE_WIDE_PARTIALS partials on (the size key is then the partial
# count: src/decode/aotk_decode.c, choose_merge), one row and 32 partials a program: one partial a step
# waited for each load in turn, most of a split batch-1 step (tune_decode_jit.py --merge-only, H200: 32
# rows x 128 partials 40 -> 5 us, against 7.6-16.6 for 2-8 rows or 16 partials a step). From
# MERGE_MANY_PARTIALS on (split-KV at batch 1-2 with one kv head: up to 256 splits), 128 partials a step
# and 4 warps: on the H100 (tune_decode_jit.py, the one-pass merge) 32 rows x 128 partials 4.6 -> 3.4 us,
# a batch-1 MQA step at 128k keys 34.8 -> 33.6 us and at 64k 17.4 -> 16.1; from 16 partials of 256 rows
# it lost (3.2 -> 6.3 us), and at 61 partials it measured the same as 32 a step.
MERGE_WIDE_PARTIALS = 4
MERGE_MANY_PARTIALS = 64
MERGE_CONFIGS = ((1, T(8, 32, 2, 3, block_p=1)), (MERGE_WIDE_PARTIALS, T(1, 32, 2, 3, block_p=32)),
                 (MERGE_MANY_PARTIALS, T(1, 32, 4, 3, block_p=128)))
APPEND_CONFIG = T(8, 0, 4, 1)   # kv heads per step
SEL_INDEX_CONFIG = T(1024, 0, 4, 1)   # ENTRIES: index entries per program (count, scatter)
SEL_ORDER_CONFIG = T(8192, 256, 4, 1)  # SORT_TILE (lists sorted in registers) x SCAN_TOKENS (the long-list scan)
SEL_SCAN_CONFIG = T(1024, 0, 4, 1)
SEL_CHECK_CONFIG = T(64, 0, 4, 1)
PREPROCESS_CONFIG = T(64, 0, 4, 1)
HELPER_CONFIG = T(64, 64, 4, 1)    # the dropout-mask debug kernel
SINK_REDUCE_CONFIG = T(1024, 0, 4, 1)

# family: (source file, function, parameter spec, axes). Axes: "dtype", "dims" (head-dim pairs), "align",
# "extras" ("extras_only": the EXTRAS variant alone); a family without "dims" has one head-dim-less config. "tma_dims": the TMA family's head
# dims; it is sm_90 only (FAMILY_ARCHS) and always aligned (TMA needs 16-byte addresses and strides).
FAMILIES = {
    "attn_fwd": ("attn_fwd.py", "attn_fwd", ATTN_FWD_PARAMS, ("dtype", "dims", "align", "extras")),
    # Only EXTRAS: the Gluon forward runs every other call these head dims make on sm_90, and dropout
    # only this kernel (or the pointer kernel) computes.
    "attn_fwd_tma": ("attn_fwd.py", "attn_fwd_tma", ATTN_FWD_TMA_PARAMS, ("dtype", "tma_dims", "extras_only")),
    "attn_fwd_hopper": ("attn_fwd_hopper.py", "attn_fwd_hopper", ATTN_FWD_HOPPER_PARAMS,
                        ("dtype", "hopper_dims", "extras")),
    "attn_fwd_hopper_wg3": ("attn_fwd_hopper.py", "attn_fwd_hopper_wg3", ATTN_FWD_HOPPER_PARAMS,
                            ("dtype", "hopper_wg3_dims")),
    "attn_fwd_hopper_dropout": ("attn_fwd_hopper.py", "attn_fwd_hopper_dropout", ATTN_FWD_HOPPER_PARAMS,
                                ("dtype", "hopper_dropout_dims")),
    "attn_fwd_hopper_paged": ("attn_fwd_hopper.py", "attn_fwd_hopper_paged", ATTN_FWD_HOPPER_PAGED_PARAMS,
                              ("dtype", "hopper_paged_dims", "extras")),
    "attn_dropout_mask": ("attn_fwd.py", "attn_dropout_mask", ATTN_DROPOUT_MASK_PARAMS, ()),
    "attn_bwd_preprocess": ("attn_bwd.py", "attn_bwd_preprocess", ATTN_BWD_PREPROCESS_PARAMS,
                            ("dtype", "dims_v", "align")),
    "attn_bwd_sink_reduce": ("attn_bwd.py", "attn_bwd_sink_reduce", ATTN_BWD_SINK_REDUCE_PARAMS, ()),
    "attn_bwd_dkdv": ("attn_bwd.py", "attn_bwd_dkdv", ATTN_BWD_DKDV_PARAMS, ("dtype", "dims", "align", "extras")),
    "attn_bwd_dq": ("attn_bwd.py", "attn_bwd_dq", ATTN_BWD_DQ_PARAMS, ("dtype", "dims", "align", "extras")),
    "attn_bwd_dkdv_hopper": ("attn_bwd_hopper.py", "attn_bwd_dkdv_hopper", ATTN_BWD_DKDV_HOPPER_PARAMS,
                             ("dtype", "hopper_bwd_dims", "extras")),
    "attn_bwd_fused_hopper": ("attn_bwd_hopper.py", "attn_bwd_fused_hopper", ATTN_BWD_FUSED_HOPPER_PARAMS,
                              ("dtype", "hopper_fused_dims", "extras")),
    "attn_bwd_dkdv_hopper_dropout": ("attn_bwd_hopper.py", "attn_bwd_dkdv_hopper_dropout",
                                     ATTN_BWD_DKDV_HOPPER_PARAMS, ("dtype", "hopper_bwd_dropout_dims")),
    "attn_bwd_fused_hopper_dropout": ("attn_bwd_hopper.py", "attn_bwd_fused_hopper_dropout",
                                      ATTN_BWD_FUSED_HOPPER_PARAMS, ("dtype", "hopper_bwd_dropout_dims")),
    "attn_bwd_dq_hopper": ("attn_bwd_dq_hopper.py", "attn_bwd_dq_hopper", ATTN_BWD_DQ_HOPPER_PARAMS,
                           ("dtype", "hopper_dq_dims", "extras")),
    "attn_bwd_dq_convert": ("attn_bwd.py", "attn_bwd_dq_convert", ATTN_BWD_DQ_CONVERT_PARAMS,
                            ("dtype", "hopper_fused_dims")),
    "attn_decode": ("attn_decode.py", "attn_decode", ATTN_DECODE_PARAMS, ("dtype", "dims", "aligned_only")),
    "attn_decode_paged": ("attn_decode.py", "attn_decode", ATTN_DECODE_PARAMS, ("dtype", "dims", "aligned_only")),
    "attn_decode_paged32": ("attn_decode.py", "attn_decode", ATTN_DECODE_PARAMS, ("dtype", "dims", "aligned_only")),
    "attn_decode_paged_blocks": ("attn_decode.py", "attn_decode", ATTN_DECODE_PARAMS,
                                 ("dtype", "dims", "aligned_only")),
    "attn_merge": ("attn_decode.py", "attn_merge", ATTN_MERGE_PARAMS, ("align",)),
    "attn_cache_append": ("attn_decode.py", "attn_cache_append", ATTN_CACHE_APPEND_PARAMS,
                          ("dtype", "dims", "aligned_only")),
    "sel_fwd": ("sel_attn.py", "sel_fwd", SEL_FWD_PARAMS, ("dtype", "sel_dims", "sel_block", "align")),
    "sel_bwd_dq": ("sel_attn.py", "sel_bwd_dq", SEL_BWD_DQ_PARAMS, ("dtype", "sel_dims", "sel_block")),
    "sel_bwd_dkdv": ("sel_attn.py", "sel_bwd_dkdv", SEL_BWD_DKDV_PARAMS, ("dtype", "sel_dims", "sel_block", "align")),
    "sel_index_zero": ("sel_attn.py", "sel_index_zero", SEL_INDEX_ZERO_PARAMS, ()),
    "sel_index_count": ("sel_attn.py", "sel_index_count", SEL_INDEX_COUNT_PARAMS, ()),
    "sel_index_scan": ("sel_attn.py", "sel_index_scan", SEL_INDEX_SCAN_PARAMS, ()),
    "sel_index_scatter": ("sel_attn.py", "sel_index_scatter", SEL_INDEX_SCATTER_PARAMS, ()),
    "sel_index_order": ("sel_attn.py", "sel_index_order", SEL_INDEX_ORDER_PARAMS, ()),
    "sel_check_indices": ("sel_attn.py", "sel_check_indices", SEL_CHECK_INDICES_PARAMS, ()),
}


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel: a family's variant with one tile config, for one target."""
    family: str
    source: str          # file in kernels/
    function: str        # the @triton.jit function
    params: tuple        # ((name, triton type, hinted), ...) with the dtype substituted
    constexprs: tuple    # ((name, value), ...)
    arch: int
    dtype: str           # "" for dtype-less helpers
    head_dim_qk: int     # 0 for head-dim-less helpers
    head_dim_v: int
    aligned: bool        # selection: the group size is a multiple of 16 (see SEL_FWD_PARAMS)
    extras: bool         # softcap, ALiBi and dropout compiled in (sinks are in every variant)
    # Selection attention's key block size; 0 for the other families. Left out of repr (the generator's
    # cache key): the constexprs carry it, and the other families' keys stay as they were.
    block_size: int = field(repr=False)
    config: TileConfig
    min_seqlen: int      # tuning: chosen when the family's size key (seqlen_k for attn_bwd_dkdv, seqlen_q
                         # otherwise) is >= this, and no other config's bound is larger

    @property
    def name(self):
        parts = [self.family]
        if self.dtype:
            parts.append(self.dtype)
        if self.head_dim_qk:
            dims = f"d{self.head_dim_qk}" if self.head_dim_qk == self.head_dim_v else f"d{self.head_dim_qk}v{self.head_dim_v}"
            parts.append(dims)
        elif self.head_dim_v:
            parts.append(f"v{self.head_dim_v}")
        if self.block_size:
            parts.append(f"bs{self.block_size}" + ("g16" if self.aligned else ""))
        elif self.dtype or self.family == "attn_merge":
            parts.append("aligned" if self.aligned else "any")
        if self.extras:
            parts.append("extras")
        parts.append(self.config.tag)
        return "_".join(parts)


def _configs(family, arch, dqk, dv, extras, block_size=0):
    if family in ("sel_fwd", "sel_bwd_dq"):
        return _sel_group_configs(arch, dqk, block_size)
    if family == "sel_bwd_dkdv":
        return _sel_dkdv_config(arch, dqk, block_size)
    if family in DECODE_PAGE_MODES:
        return _decode_configs(arch, dqk, dv, paged=DECODE_PAGE_MODES[family] != 0)
    if family == "attn_merge":
        return MERGE_CONFIGS
    if family == "attn_cache_append":
        return ((1, APPEND_CONFIG),)
    if family in ("sel_index_count", "sel_index_scatter"):
        return ((1, SEL_INDEX_CONFIG),)
    if family == "sel_index_order":
        return ((1, SEL_ORDER_CONFIG),)
    if family in ("sel_index_scan", "sel_index_zero"):
        return ((1, SEL_SCAN_CONFIG),)
    if family == "sel_check_indices":
        return ((1, SEL_CHECK_CONFIG),)
    if family in ("attn_fwd", "attn_fwd_tma", "attn_fwd_hopper", "attn_fwd_hopper_wg3", "attn_fwd_hopper_dropout",
                  "attn_fwd_hopper_paged",
                  "attn_bwd_dkdv", "attn_bwd_dq",
                  "attn_bwd_dkdv_hopper", "attn_bwd_fused_hopper", "attn_bwd_dkdv_hopper_dropout",
                  "attn_bwd_fused_hopper_dropout", "attn_bwd_dq_hopper"):
        key = (family, arch, dqk, dv)
        return ATTN_TUNING_EXTRAS.get(key, ATTN_TUNING[key]) if extras else ATTN_TUNING[key]
    if family in ("attn_bwd_preprocess", "attn_bwd_dq_convert"):
        return ((1, PREPROCESS_CONFIG),)
    if family == "attn_bwd_sink_reduce":
        return ((1, SINK_REDUCE_CONFIG),)
    return ((1, HELPER_CONFIG),)


def _constexprs(function_params, dqk, dv, config, extras, block_size=0, page_mode=0, overrides=None):
    values = {"PAGE_MODE": page_mode, "HEAD_DIM_QK": dqk, "HEAD_DIM_V": dv, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
              "EXTRAS": extras, "BLOCK": config.block_m, "HEAD_DIM": dqk, "STAGES": config.num_stages,
              # setmaxnreg: three consumer warpgroups (192-row tiles) share the file at 160 each
              "PRODUCER_REGS": 24, "CONSUMER_REGS": 160 if config.block_m == 192 else 240,
              # selection: 192 = 128 + 64; the group, pair and index tiles
              "HEAD_DIM_QK0": 128 if dqk == 192 else dqk, "HEAD_DIM_QK1": 64 if dqk == 192 else 0,
              "BLOCK_G": config.block_m, "BLOCK_R": config.block_m, "BLOCK_SIZE": block_size,
              "ENTRIES": config.block_m, "SORT_TILE": config.block_m, "SCAN_TOKENS": config.block_n,
              "BLOCK_P": config.block_p, "OFFSET32": False}
    values.update(overrides or {})
    return tuple((n, values[n]) for n in function_params)


# Constexprs a (family, extras) variant sets otherwise than _constexprs. The paged prefill's producer holds
# a block of page ids (8 with 16-row boxes): ptxas -v (sm_90a, bf16 16-row boxes, bytes spilled a thread)
# with the producer at 24, 32 and 56 registers: d128 64, 44, 0; d256 112, 36, 96. But the EXTRAS rows
# spill more the more the producer takes (d128 116, 212, 896; (192, 128) 192, 264, 928; d64 52, 76, 184;
# the dense EXTRAS rows, at 24, spill 12-224), so they keep 24.
FAMILY_CONSTEXPRS = {("attn_fwd_hopper_paged", False): {"PRODUCER_REGS": 56},
                     ("attn_decode_paged32", False): {"OFFSET32": True}}


CONSTEXPRS = {
    "attn_fwd": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "EXTRAS"),
    "attn_fwd_tma": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "EXTRAS"),
    "attn_fwd_hopper": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS",
                        "CONSUMER_REGS"),
    "attn_fwd_hopper_wg3": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS",
                            "CONSUMER_REGS"),
    "attn_fwd_hopper_dropout": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS",
                                "PRODUCER_REGS", "CONSUMER_REGS"),
    "attn_fwd_hopper_paged": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS",
                              "CONSUMER_REGS"),
    "attn_bwd_dkdv_hopper": ("HEAD_DIM", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS"),
    "attn_bwd_fused_hopper": ("HEAD_DIM", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS"),
    "attn_bwd_dkdv_hopper_dropout": ("HEAD_DIM", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS"),
    "attn_bwd_fused_hopper_dropout": ("HEAD_DIM", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS"),
    "attn_bwd_dq_hopper": ("HEAD_DIM", "BLOCK_M", "BLOCK_N", "STAGES", "EXTRAS", "PRODUCER_REGS"),
    "attn_bwd_dq_convert": ("HEAD_DIM", "BLOCK_M"),
    "attn_dropout_mask": ("BLOCK_M", "BLOCK_N"),
    "attn_bwd_preprocess": ("HEAD_DIM_V", "BLOCK_M"),
    "attn_bwd_sink_reduce": ("BLOCK",),
    "attn_bwd_dkdv": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "EXTRAS"),
    "attn_bwd_dq": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "EXTRAS"),
    "attn_decode": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "PAGE_MODE", "OFFSET32"),
    "attn_decode_paged": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "PAGE_MODE", "OFFSET32"),
    "attn_decode_paged32": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "PAGE_MODE", "OFFSET32"),
    "attn_decode_paged_blocks": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M", "BLOCK_N", "PAGE_MODE", "OFFSET32"),
    "attn_merge": ("BLOCK_M", "BLOCK_N", "BLOCK_P"),
    "attn_cache_append": ("HEAD_DIM_QK", "HEAD_DIM_V", "BLOCK_M"),
    "sel_fwd": ("HEAD_DIM_QK0", "HEAD_DIM_QK1", "HEAD_DIM_V", "BLOCK_G", "BLOCK_SIZE"),
    "sel_bwd_dq": ("HEAD_DIM_QK0", "HEAD_DIM_QK1", "HEAD_DIM_V", "BLOCK_G", "BLOCK_SIZE"),
    "sel_bwd_dkdv": ("HEAD_DIM_QK0", "HEAD_DIM_QK1", "HEAD_DIM_V", "BLOCK_R", "BLOCK_N", "BLOCK_SIZE"),
    "sel_index_zero": ("BLOCK",),
    "sel_index_count": ("ENTRIES",),
    "sel_index_scan": ("BLOCK",),
    "sel_index_scatter": ("ENTRIES",),
    "sel_index_order": ("SORT_TILE", "SCAN_TOKENS"),
    "sel_check_indices": ("BLOCK",),
}


FAMILY_ARCHS = {"attn_fwd_tma": (90,), "attn_fwd_hopper": (90,), "attn_fwd_hopper_wg3": (90,),
                "attn_fwd_hopper_dropout": (90,),
                "attn_fwd_hopper_paged": (90,), "attn_bwd_dkdv_hopper": (90,),
                "attn_bwd_fused_hopper": (90,), "attn_bwd_dkdv_hopper_dropout": (90,),
                "attn_bwd_fused_hopper_dropout": (90,), "attn_bwd_dq_hopper": (90,), "attn_bwd_dq_convert": (90,)}
# Options beyond num_warps and num_stages: the Gluon kernel caps registers at entry so that its
# setmaxnreg split (24 for the producer, 240 for the consumers) takes effect.
FAMILY_OPTIONS = {"attn_fwd_hopper": {"maxnreg": 168}, "attn_fwd_hopper_wg3": {"maxnreg": 128},
                  "attn_fwd_hopper_dropout": {"maxnreg": 168},
                  "attn_fwd_hopper_paged": {"maxnreg": 168},
                  "attn_bwd_dkdv_hopper": {"maxnreg": 168},
                  "attn_bwd_fused_hopper": {"maxnreg": 168}, "attn_bwd_dkdv_hopper_dropout": {"maxnreg": 168},
                  "attn_bwd_fused_hopper_dropout": {"maxnreg": 168}, "attn_bwd_dq_hopper": {"maxnreg": 168}}
# Per head dim, over FAMILY_OPTIONS: the fused d=64 pass runs four warpgroups (two consumers, the dQ
# warpgroup, the producer's), so 128 registers at entry.
HEAD_DIM_OPTIONS = {("attn_bwd_fused_hopper", 64): {"maxnreg": 128},
                    ("attn_bwd_fused_hopper_dropout", 64): {"maxnreg": 128}}


def compile_options(kernel):
    """Triton's compile options beyond num_warps and num_stages for one kernel."""
    return {**FAMILY_OPTIONS.get(kernel.family, {}), **HEAD_DIM_OPTIONS.get((kernel.family, kernel.head_dim_qk), {})}


# Families written in Gluon (compiled from GluonASTSource, their descriptors typed with the shared-memory
# layout the kernel allocates).
GLUON_FAMILIES = ("attn_fwd_hopper", "attn_fwd_hopper_wg3", "attn_fwd_hopper_dropout", "attn_fwd_hopper_paged", "attn_bwd_dkdv_hopper", "attn_bwd_fused_hopper",
                  "attn_bwd_dkdv_hopper_dropout", "attn_bwd_fused_hopper_dropout", "attn_bwd_dq_hopper")


def catalog():
    """Every kernel, in a fixed order (the generated table keeps it)."""
    kernels = []
    for family, (source, function, param_spec, axes) in FAMILIES.items():
        for arch in FAMILY_ARCHS.get(family, ARCHS):
            dtypes = DTYPES if "dtype" in axes else ("",)
            if "sel_dims" in axes:
                dims = SEL_HEAD_DIMS
            elif "dims" in axes:
                dims = ATTN_HEAD_DIMS
            elif "tma_dims" in axes:
                dims = ATTN_TMA_HEAD_DIMS
            elif "hopper_dims" in axes:
                dims = ATTN_HOPPER_HEAD_DIMS
            elif "hopper_bwd_dims" in axes:
                dims = ATTN_HOPPER_BWD_HEAD_DIMS
            elif "hopper_fused_dims" in axes:
                dims = ATTN_HOPPER_BWD_FUSED_HEAD_DIMS
            elif "hopper_dq_dims" in axes:
                dims = ATTN_HOPPER_BWD_DQ_HEAD_DIMS
            elif "hopper_wg3_dims" in axes:
                dims = ATTN_HOPPER_WG3_HEAD_DIMS
            elif "hopper_dropout_dims" in axes:
                dims = ATTN_HOPPER_DROPOUT_HEAD_DIMS
            elif "hopper_bwd_dropout_dims" in axes:
                dims = ATTN_HOPPER_BWD_DROPOUT_HEAD_DIMS
            elif "hopper_paged_dims" in axes:
                dims = ATTN_HOPPER_PAGED_HEAD_DIMS
            elif "dims_v" in axes:
                dims = tuple(sorted({(0, dv) for _, dv in ATTN_HEAD_DIMS}))
            else:
                dims = ((0, 0),)
            for dtype in dtypes:
                for dqk, dv in dims:
                  for block_size in (SEL_BLOCK_SIZES if "sel_block" in axes else (0,)):
                    for aligned in (ALIGNMENTS if "align" in axes else (True,) if ("aligned_only" in axes or "tma_dims" in axes or "hopper_dims" in axes or "hopper_bwd_dims" in axes or "hopper_fused_dims" in axes or "hopper_dq_dims" in axes or "hopper_wg3_dims" in axes or "hopper_dropout_dims" in axes or "hopper_bwd_dropout_dims" in axes or "hopper_paged_dims" in axes) else (False,)):
                        for extras in (EXTRAS if "extras" in axes else (True,) if "extras_only" in axes else (False,)):
                            for min_seqlen, config in _configs(family, arch, dqk, dv, extras, block_size):
                                params = tuple((n, t.format(dtype=dtype, block_m=config.block_m, block_n=config.block_n,
                                                            dqk=dqk, dv=dv, dqk_box=64 if dqk == 192 else dqk,
                                                            box=config.block_p),
                                                   hinted)
                                               for n, t, hinted in param_spec)
                                kernels.append(Kernel(
                                    family=family, source=source, function=function, params=params,
                                    constexprs=_constexprs(CONSTEXPRS[family], dqk, dv, config, extras,
                                                           block_size, DECODE_PAGE_MODES.get(family, 0),
                                                           FAMILY_CONSTEXPRS.get((family, extras), {})),
                                    arch=arch, dtype=dtype, head_dim_qk=dqk, head_dim_v=dv, aligned=aligned,
                                    extras=extras, block_size=block_size, config=config,
                                    min_seqlen=min_seqlen))
    return kernels

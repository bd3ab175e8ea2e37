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

from dataclasses import dataclass

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

    @property
    def tag(self):
        block_n = f"n{self.block_n}" if self.block_n else ""
        return f"m{self.block_m}{block_n}w{self.num_warps}s{self.num_stages}"


# Parameter spec: (name, triton type, hinted in the aligned variant). "{dtype}" is the variant's dtype.
ATTN_FWD_PARAMS = (
    [(name, "*{dtype}", True) for name in ("Q", "K", "V", "Out")]
    + [("Lse", "*fp32", False)]
    + [item for t in "qkvo" for item in ((f"stride_{t}b", "i64", True), (f"stride_{t}s", "i32", True),
                                          (f"stride_{t}h", "i32", True))]
    + [("stride_lb", "i64", False), ("stride_lh", "i32", False)]
    + [(name, "i32", False) for name in ("seqlen_q", "seqlen_k", "heads_q", "group_size", "num_m_blocks")]
    + [("qk_scale_log2", "fp32", False), ("causal", "i32", False), ("write_lse", "i32", False)]
)

# Tuning table: for each (arch, head_dim), configs with the smallest seqlen_q each one is chosen for.
# sm_90 figures are from bench/tune_fwd_jit.py on the H100 (TFLOP/s, bf16, 16k tokens):
#   d=64:  seqlen 512-1024 best with 64x64/4 warps (causal 1024: 305 vs 283 for 128x64/8);
#          from 4096 on 128x64/8 warps/3 stages (456 non-causal, 427 causal at 16k).
#   d=128: seqlen <= 1024 best with 64x64/4 warps (394 at 1024); from 4096 on 128x128/8 warps/3
#          stages (502-520), 128x64/8 is within 5%.
# sm_80 configs are not tuned (no A100 here): they are the FlashAttention-2-sized tiles that fit the
# 99 KiB shared-memory limit of sm_86/sm_89.
ATTN_FWD_TUNING = {
    (90, 64): ((1, TileConfig(64, 64, 4, 3)), (1025, TileConfig(128, 64, 8, 3))),
    (90, 128): ((1, TileConfig(64, 64, 4, 3)), (1025, TileConfig(128, 128, 8, 3))),
    (80, 64): ((1, TileConfig(64, 64, 4, 3)), (1025, TileConfig(128, 64, 4, 3))),
    (80, 128): ((1, TileConfig(64, 64, 4, 3)), (1025, TileConfig(128, 64, 8, 2))),
}
ATTN_HEAD_DIMS = (64, 128)


def _strides(tensors, hinted=True):
    """(b: i64, s: i32, h: i32) strides for each named tensor, in order."""
    return [item for t in tensors for item in ((f"stride_{t}b", "i64", hinted), (f"stride_{t}s", "i32", hinted),
                                               (f"stride_{t}h", "i32", hinted))]


def _pointers(names, triton_type="*{dtype}", hinted=True):
    return [(name, triton_type, hinted) for name in names]


# The backward: a pre-pass stages delta = rowsum(dO * O) and lse * log2(e) in the workspace, in rows
# padded to a multiple of 128 floats, then dK/dV and dQ passes read them. The workspace pointers and the
# padded row stride are aligned in every call (the API requires a 16-byte-aligned workspace and the
# library pads the rows), so they are hinted ALWAYS, not only in the aligned variant.
ALWAYS = "always"
ATTN_BWD_PREPROCESS_PARAMS = (
    _pointers(("Out", "DOut")) + _pointers(("Lse",), "*fp32", False) + _pointers(("Delta", "LseLog2"), "*fp32", ALWAYS)
    + _strides(("o", "d"))
    + [("stride_lb", "i64", False), ("stride_lh", "i32", False)]
    + [(name, "i32", False) for name in ("seqlen_q", "heads_q", "num_m_blocks")]
    + [("stats_stride", "i32", ALWAYS)]
)
ATTN_BWD_DKDV_PARAMS = (
    _pointers(("Q", "K", "V", "DOut")) + _pointers(("LseLog2", "Delta"), "*fp32", ALWAYS) + _pointers(("DK", "DV"))
    + _strides(("q", "k", "v", "do", "dk", "dv"))
    + [(name, "i32", False) for name in ("seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size", "num_n_blocks")]
    + [("stats_stride", "i32", ALWAYS)]
    + [("softmax_scale", "fp32", False), ("qk_scale_log2", "fp32", False), ("causal", "i32", False)]
)
ATTN_BWD_DQ_PARAMS = (
    _pointers(("Q", "K", "V", "DOut")) + _pointers(("LseLog2", "Delta"), "*fp32", ALWAYS) + _pointers(("DQ",))
    + _strides(("q", "k", "v", "do", "dq"))
    + [(name, "i32", False) for name in ("seqlen_q", "seqlen_k", "heads_q", "group_size", "num_m_blocks")]
    + [("stats_stride", "i32", ALWAYS)]
    + [("softmax_scale", "fp32", False), ("qk_scale_log2", "fp32", False), ("causal", "i32", False)]
)

# Backward tuning, from bench/tune_bwd_jit.py on the H100 (ms per kernel, bf16, 16k tokens):
#   dK/dV, d=64: 32x64/4 warps/2 stages best or within 2% everywhere (e.g. 10.8 ms at 16k non-causal vs
#         11.6 for 64x64/4); d=128: 64x64/4/2 up to 2k (0.64 ms at 1k), 64x128/8/3 from 4k (2.21 ms vs 2.31
#         non-causal at 4k, 8.46 vs 8.82 at 16k). The size key of dK/dV is seqlen_k.
#   dQ: 128x64/8 warps/3 stages best or within 4% on every row of both head dims.
# sm_80: untuned picks within the 99 KiB limit, as for the forward.
ATTN_BWD_TUNING = {
    ("attn_bwd_preprocess", 90, 64): ((1, TileConfig(64, 0, 4, 1)),),
    ("attn_bwd_preprocess", 90, 128): ((1, TileConfig(64, 0, 4, 1)),),
    ("attn_bwd_preprocess", 80, 64): ((1, TileConfig(64, 0, 4, 1)),),
    ("attn_bwd_preprocess", 80, 128): ((1, TileConfig(64, 0, 4, 1)),),
    ("attn_bwd_dkdv", 90, 64): ((1, TileConfig(32, 64, 4, 2)),),
    ("attn_bwd_dkdv", 90, 128): ((1, TileConfig(64, 64, 4, 2)), (4096, TileConfig(64, 128, 8, 3))),
    ("attn_bwd_dkdv", 80, 64): ((1, TileConfig(64, 64, 4, 2)),),
    ("attn_bwd_dkdv", 80, 128): ((1, TileConfig(64, 64, 4, 2)),),
    ("attn_bwd_dq", 90, 64): ((1, TileConfig(128, 64, 8, 3)),),
    ("attn_bwd_dq", 90, 128): ((1, TileConfig(128, 64, 8, 3)),),
    ("attn_bwd_dq", 80, 64): ((1, TileConfig(128, 64, 8, 2)),),
    ("attn_bwd_dq", 80, 128): ((1, TileConfig(64, 64, 4, 2)),),
}

# family: (source file, function, parameter spec, tuning, constexprs of a config)
FAMILIES = {
    "attn_fwd": ("attn_fwd.py", "attn_fwd", ATTN_FWD_PARAMS,
                 lambda arch, d: ATTN_FWD_TUNING[(arch, d)], ("HEAD_DIM", "BLOCK_M", "BLOCK_N")),
    "attn_bwd_preprocess": ("attn_bwd.py", "attn_bwd_preprocess", ATTN_BWD_PREPROCESS_PARAMS,
                            lambda arch, d: ATTN_BWD_TUNING[("attn_bwd_preprocess", arch, d)], ("HEAD_DIM", "BLOCK_M")),
    "attn_bwd_dkdv": ("attn_bwd.py", "attn_bwd_dkdv", ATTN_BWD_DKDV_PARAMS,
                      lambda arch, d: ATTN_BWD_TUNING[("attn_bwd_dkdv", arch, d)], ("HEAD_DIM", "BLOCK_M", "BLOCK_N")),
    "attn_bwd_dq": ("attn_bwd.py", "attn_bwd_dq", ATTN_BWD_DQ_PARAMS,
                    lambda arch, d: ATTN_BWD_TUNING[("attn_bwd_dq", arch, d)], ("HEAD_DIM", "BLOCK_M", "BLOCK_N")),
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
    dtype: str
    head_dim: int
    aligned: bool
    config: TileConfig
    min_seqlen: int      # tuning: chosen when the family's size key (seqlen_k for attn_bwd_dkdv, seqlen_q
                         # otherwise) is >= this, and no other config's bound is larger

    @property
    def name(self):
        alignment = "aligned" if self.aligned else "any"
        return f"{self.family}_{self.dtype}_d{self.head_dim}_{alignment}_{self.config.tag}"


def catalog():
    """Every kernel, in a fixed order (the generated table keeps it)."""
    kernels = []
    for family, (source, function, param_spec, tuning, constexpr_names) in FAMILIES.items():
        for arch in ARCHS:
            for dtype in DTYPES:
                for head_dim in ATTN_HEAD_DIMS:
                    for aligned in ALIGNMENTS:
                        for min_seqlen, config in tuning(arch, head_dim):
                            params = tuple((n, t.format(dtype=dtype), hinted) for n, t, hinted in param_spec)
                            values = {"HEAD_DIM": head_dim, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n}
                            kernels.append(Kernel(
                                family=family, source=source, function=function, params=params,
                                constexprs=tuple((n, values[n]) for n in constexpr_names),
                                arch=arch, dtype=dtype, head_dim=head_dim, aligned=aligned, config=config,
                                min_seqlen=min_seqlen))
    return kernels

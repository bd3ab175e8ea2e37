"""The catalog: every kernel aotk compiles, declared as data.

Keep it boring (AOTriton's lesson): a variant axis only where a run-time argument would cost speed.
Causal masking, GQA group size, lengths, strides and the softmax scale are run-time arguments. The axes
that remain are the dtype, the head dim (a tile shape), the alignment assumption (it decides whether
loads are 16 bytes wide: 2.4x, see notes/triton-aot.md) and the tile config, which the tuning table
chooses by problem size.

Each family lists its kernel parameters in order, with the Triton type and whether the aligned variant
promises divisibility by 16 (pointers: 16 bytes; integers: 16 elements). The generator checks this list
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
        return f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}"


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
ATTN_FWD_HEAD_DIMS = (64, 128)


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
    min_seqlen_q: int    # tuning: chosen when seqlen_q >= this (and no other config's bound is larger)

    @property
    def name(self):
        alignment = "aligned" if self.aligned else "any"
        return f"{self.family}_{self.dtype}_d{self.head_dim}_{alignment}_{self.config.tag}"


def catalog():
    """Every kernel, in a fixed order (the generated table keeps it)."""
    kernels = []
    for arch in ARCHS:
        for dtype in DTYPES:
            for head_dim in ATTN_FWD_HEAD_DIMS:
                for aligned in ALIGNMENTS:
                    for min_seqlen_q, config in ATTN_FWD_TUNING[(arch, head_dim)]:
                        params = tuple((n, t.format(dtype=dtype), hinted) for n, t, hinted in ATTN_FWD_PARAMS)
                        kernels.append(Kernel(
                            family="attn_fwd", source="attn_fwd.py", function="attn_fwd", params=params,
                            constexprs=(("HEAD_DIM", head_dim), ("BLOCK_M", config.block_m),
                                        ("BLOCK_N", config.block_n)),
                            arch=arch, dtype=dtype, head_dim=head_dim, aligned=aligned, config=config,
                            min_seqlen_q=min_seqlen_q))
    return kernels

"""Benchmark of aotk's attention kernels against torch SDPA's backends, on the GPU machine.

    python3 bench/bench_attn.py --lib path/to/libaotk.so --out-dir bench/results [--quick] [--features]
    python3 bench/bench_attn.py --lib path/to/libaotk.so --selection   # only the selection rows
    python3 bench/bench_attn.py --self-check          # any machine: no GPU, torch optional

Calls libaotk.so through ctypes (the structs of include/aotk.h are declared below) and times it beside
torch SDPA's flash, cuDNN and memory-efficient backends on the same inputs, in one process, on the grid
of /work/shared/notes/anchors.md: bf16, head_dim 64 and 128, seqlen 512 ... 16384, batch = 16384 / seqlen,
heads = 2048 / head_dim, causal and not. Each row's aotk output (and lse) is checked against SDPA
before anything is timed. Prints a table and writes <out-dir>/<gpu>-<date>.json (see bench/README.md).

Ops: "fwd" (aotk_attn_fwd against SDPA's flash, cuDNN and efficient forwards) and "bwd" (aotk_attn_bwd
against the flash and cuDNN backwards, each timed alone after its own forward); the OPS registry holds them.
"sel_fwd" and "sel_bwd" (--selection runs only these; also in OPS): selection attention (aotk_sel_fwd,
aotk_sel_bwd) on one sequence of 8k ... 64k tokens, heads 64/4, d 128, block 64, 16 slots of random causal
blocks, against the flash and cuDNN backends doing dense causal attention on the same q, k, v, with the
issue's bars (64k: forward >= 7.6x, backward >= 16x FlashAttention-2; 16k: faster), after checks against
float32 references (every token of a 4096-token problem, and sampled tokens of the row itself).
"fwd_gqa" and "bwd_gqa" (issue 11): GQA, 32 query heads over 8 kv heads, d 128, causal, seqlen 8192, batch 2,
against SDPA's flash and cuDNN backends (enable_gqa=True) and FlexAttention. "fwd_varlen" and "bwd_varlen"
(issue 11): 16 documents of 512 (and of 1024) tokens packed with cu_seqlens, d 128 / 64, causal and not: aotk's
varlen kernel against aotk's plain kernel on the same memory as a dense batch of 16 (the 0.8x bar), SDPA on
that batch and FlexAttention with a document mask (to beat). FlexAttention (torch.compile'd, one compile per
shape) is a column on these rows, and on the fwd/bwd grid with --flex.
"fwd_feat" and "bwd_feat" (--features runs only these): issue 4's features (causal alignments, windows,
varlen, softcap, ALiBi, sinks, dropout, head dims 32 ... 256 and 192/128), each counted by the score
pairs it really computes and compared with the plain kernel of its head dim in the same run (the 0.90
bar), after a check against a float32 torch reference with explicit masks.
Importable without a GPU (and without torch): all work happens in main().
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

try:
    import torch
    import torch.nn.functional as F
    import triton
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError as _import_error:  # --self-check and the ctypes declarations need neither
    torch = F = triton = SDPBackend = sdpa_kernel = None
    TORCH_IMPORT_ERROR = _import_error
else:
    TORCH_IMPORT_ERROR = None

# ---------------------------------------------------------------------------------------------------
# include/aotk.h through ctypes
# ---------------------------------------------------------------------------------------------------

AOTK_OK = 0
AOTK_DTYPE_FLOAT16 = 1
AOTK_DTYPE_BFLOAT16 = 2
AOTK_DTYPE_FLOAT32 = 3
AOTK_DTYPE_INT32 = 4
AOTK_DTYPE_INT64 = 5
AOTK_DTYPE_UINT8 = 6
AOTK_TENSOR_MAX_RANK = 6
AOTK_OP_ATTN_FWD = 1
AOTK_OP_ATTN_BWD = 2
AOTK_OP_SEL_FWD = 3
AOTK_OP_SEL_BWD = 4
AOTK_ALIGN_BOTTOM_RIGHT = 0
AOTK_ALIGN_TOP_LEFT = 1
AOTK_FEATURE_NAMES = ["varlen", "causal", "window", "softcap", "alibi", "sinks", "dropout", "padded_head_dim",
                      "extras_kernel", "tma", "warp_specialized", "nondeterministic"]  # AOTK_FEATURE_* bit i

TORCH_TO_AOTK_DTYPE = {
    torch.float16: AOTK_DTYPE_FLOAT16,
    torch.bfloat16: AOTK_DTYPE_BFLOAT16,
    torch.float32: AOTK_DTYPE_FLOAT32,
    torch.int32: AOTK_DTYPE_INT32,
    torch.int64: AOTK_DTYPE_INT64,
    torch.uint8: AOTK_DTYPE_UINT8,
} if torch is not None else {}


# The structs of include/aotk.h, from the Python package's declarations (python/aotk/_capi.py, checked
# against the header by tests/python/test_python_cpu.py and by --self-check here), loaded by path so
# that the package's torch ops are not registered in this process.
def _load_capi():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "aotk", "_capi.py")
    spec = importlib.util.spec_from_file_location("aotk_capi_for_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_capi = _load_capi()
AotkTensor = _capi.AotkTensor
AotkAttnParams = _capi.AotkAttnParams
AotkSelParams = _capi.AotkSelParams
AotkKernelInfo = _capi.AotkKernelInfo
AotkBuildInfo = _capi.AotkBuildInfo


class AotkError(RuntimeError):
    pass


def _decode(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def describe_tensor(t):
    """An aotk_tensor describing torch tensor t (no copy; t must outlive every use of the result)."""
    if t.dtype not in TORCH_TO_AOTK_DTYPE:
        raise ValueError(f"no aotk dtype for {t.dtype}")
    if t.dim() > AOTK_TENSOR_MAX_RANK:
        raise ValueError(f"rank {t.dim()} > {AOTK_TENSOR_MAX_RANK}")
    at = AotkTensor()
    at.data = t.data_ptr()
    at.dtype = TORCH_TO_AOTK_DTYPE[t.dtype]
    at.rank = t.dim()
    for i, (n, s) in enumerate(zip(t.shape, t.stride())):
        at.shape[i] = n
        at.strides[i] = s  # torch strides are in elements, as aotk's are
    return at


def absent_tensor():
    return AotkTensor()  # data NULL: "absent" for optional tensors


class Aotk:
    """libaotk.so, loaded with ctypes, with each function's signature declared."""

    def __init__(self, path):
        lib = ctypes.CDLL(os.path.abspath(path))
        st = ctypes.c_int  # aotk_status: a C enum, int-sized

        lib.aotk_status_name.argtypes = [st]
        lib.aotk_status_name.restype = ctypes.c_char_p
        lib.aotk_status_string.argtypes = [st]
        lib.aotk_status_string.restype = ctypes.c_char_p
        lib.aotk_last_error.argtypes = []
        lib.aotk_last_error.restype = ctypes.c_char_p
        lib.aotk_last_cuda_result.argtypes = []
        lib.aotk_last_cuda_result.restype = ctypes.c_int
        lib.aotk_version_string.argtypes = []
        lib.aotk_version_string.restype = ctypes.c_char_p
        lib.aotk_attn_fwd.argtypes = [ctypes.POINTER(AotkAttnParams), ctypes.c_void_p]
        lib.aotk_attn_fwd.restype = st
        lib.aotk_attn_bwd.argtypes = [ctypes.POINTER(AotkAttnParams), ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_void_p]
        lib.aotk_attn_bwd.restype = st
        lib.aotk_query.argtypes = [ctypes.c_int, ctypes.POINTER(AotkAttnParams), ctypes.POINTER(AotkKernelInfo)]
        lib.aotk_query.restype = st
        lib.aotk_get_build_info.argtypes = [ctypes.POINTER(AotkBuildInfo)]
        lib.aotk_get_build_info.restype = st
        # Selection attention (0.3). Declared only where the library has it, so that the attention rows
        # still run on an older build; the sel_* methods say what is missing.
        self.has_sel = all(hasattr(lib, name) for name in ("aotk_sel_fwd", "aotk_sel_bwd", "aotk_sel_query",
                                                            "aotk_sel_check_indices"))
        if self.has_sel:
            sel = ctypes.POINTER(AotkSelParams)
            lib.aotk_sel_fwd.argtypes = [sel, ctypes.c_void_p]
            lib.aotk_sel_fwd.restype = st
            lib.aotk_sel_bwd.argtypes = [sel, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            lib.aotk_sel_bwd.restype = st
            lib.aotk_sel_query.argtypes = [ctypes.c_int, sel, ctypes.POINTER(AotkKernelInfo)]
            lib.aotk_sel_query.restype = st
            lib.aotk_sel_check_indices.argtypes = [sel, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            lib.aotk_sel_check_indices.restype = st
        self.lib = lib
        self._fwd = lib.aotk_attn_fwd

    def check(self, status, what):
        if status != AOTK_OK:
            name = _decode(self.lib.aotk_status_name(status))
            detail = _decode(self.lib.aotk_last_error())
            raise AotkError(f"{what} failed: {name} ({status}): {detail}")

    def version(self):
        return _decode(self.lib.aotk_version_string())

    def build_info(self):
        info = AotkBuildInfo()
        info.struct_size = ctypes.sizeof(AotkBuildInfo)
        self.check(self.lib.aotk_get_build_info(ctypes.byref(info)), "aotk_get_build_info")
        return {"triton_version": _decode(info.triton_version), "ptxas_version": _decode(info.ptxas_version)}

    @staticmethod
    def _info_dict(info):
        return {"kernel_name": _decode(info.kernel_name), "arch": info.arch, "from_ptx": info.from_ptx,
                "workspace_bytes": info.workspace_bytes, "launches": info.launches,
                "head_dim_qk": info.head_dim_qk, "head_dim_v": info.head_dim_v,
                "features": [n for i, n in enumerate(AOTK_FEATURE_NAMES) if info.features >> i & 1]}

    def query(self, op, params):
        info = AotkKernelInfo()
        info.struct_size = ctypes.sizeof(AotkKernelInfo)
        self.check(self.lib.aotk_query(op, ctypes.byref(params), ctypes.byref(info)), "aotk_query")
        return self._info_dict(info)

    def _need_sel(self, what):
        if not self.has_sel:
            raise AotkError(f"{what}: this libaotk.so ({self.version()}) has no selection attention (0.3 added it)")

    def sel_query(self, op, params):
        """aotk_sel_query: op AOTK_OP_SEL_FWD or AOTK_OP_SEL_BWD (whose workspace_bytes sizes the backward's
        workspace); params: an AotkSelParams."""
        self._need_sel("aotk_sel_query")
        info = AotkKernelInfo()
        info.struct_size = ctypes.sizeof(AotkKernelInfo)
        self.check(self.lib.aotk_sel_query(op, ctypes.byref(params), ctypes.byref(info)), "aotk_sel_query")
        return self._info_dict(info)

    def attn_fwd(self, params_ref, stream):
        """params_ref: ctypes.byref(AotkAttnParams); stream: a CUDA stream handle (int, 0 = legacy)."""
        status = self._fwd(params_ref, stream)
        if status != AOTK_OK:
            self.check(status, "aotk_attn_fwd")


    def attn_bwd(self, params_ref, workspace, workspace_bytes, stream):
        status = self.lib.aotk_attn_bwd(params_ref, workspace, workspace_bytes, stream)
        if status != AOTK_OK:
            self.check(status, "aotk_attn_bwd")

    def sel_fwd(self, params_ref, stream):
        """params_ref: ctypes.byref(AotkSelParams); stream as attn_fwd's."""
        self._need_sel("aotk_sel_fwd")
        status = self.lib.aotk_sel_fwd(params_ref, stream)
        if status != AOTK_OK:
            self.check(status, "aotk_sel_fwd")

    def sel_bwd(self, params_ref, workspace, workspace_bytes, stream):
        self._need_sel("aotk_sel_bwd")
        status = self.lib.aotk_sel_bwd(params_ref, workspace, workspace_bytes, stream)
        if status != AOTK_OK:
            self.check(status, "aotk_sel_bwd")

    def sel_check_indices(self, params_ref, workspace, workspace_bytes, stream):
        """The library's debug check of block_idx (synchronizes the stream); raises AotkError naming the
        first offending (token, kv head, slot)."""
        self._need_sel("aotk_sel_check_indices")
        self.check(self.lib.aotk_sel_check_indices(params_ref, workspace, workspace_bytes, stream),
                   "aotk_sel_check_indices")


def fwd_params(q, k, v, out, lse, causal, softmax_scale=0.0):
    p = AotkAttnParams()
    p.struct_size = ctypes.sizeof(AotkAttnParams)
    p.q = describe_tensor(q)
    p.k = describe_tensor(k)
    p.v = describe_tensor(v)
    p.out = describe_tensor(out)
    p.lse = describe_tensor(lse) if lse is not None else absent_tensor()
    p.softmax_scale = softmax_scale  # 0: 1/sqrt(head_dim), what SDPA uses by default
    p.causal = 1 if causal else 0
    # AOTK_ATTN_PARAMS_INIT's values: a zeroed struct would mean a window of width 0 (each row sees only
    # its diagonal key), not "no window".
    p.window_left = -1
    p.window_right = -1
    return p


# Where the feature rows' tensors live: "cuda", except in --self-check, which runs the feature checks on
# the CPU against a torch stand-in for libaotk.
DEVICE = "cuda"


def current_stream():
    return torch.cuda.current_stream().cuda_stream if DEVICE == "cuda" else 0


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def empty_cache():
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------------

def _sdpa_backend(name):
    return getattr(SDPBackend, name) if SDPBackend is not None else None


SDPA_BACKENDS = [
    ("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")),
    ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION")),
    ("sdpa-efficient", _sdpa_backend("EFFICIENT_ATTENTION")),
]
# "aotk" runs the library's default (params.deterministic = 0: on sm_90 the backward may add dQ in a
# varying order, include/aotk.h); the backward rows also time "aotk-det", the bitwise-deterministic backward.
IMPLS = ["aotk", "aotk-det"] + [name for name, _ in SDPA_BACKENDS]

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
SEQLENS_QUICK = [1024, 4096]
# FlashAttention-3's grid has head dim 256 beside 64 and 128 (issue 11 adds it); --head-dims narrows it.
HEAD_DIMS = [64, 128, 256]
GRID_DTYPES = ["bf16"]  # --dtypes: the grid rows' dtypes (issue 11 asks for fp16 in a smaller run too)
TOTAL_TOKENS = 16384
HIDDEN = 2048

OUT_ATOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2} if torch is not None else {}
LSE_ATOL = 1e-2
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"} if torch is not None else {}


def time_ms(fn):
    """Median of CUDA-event-timed runs after warm-up (L2 flushed before each run by do_bench)."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def max_abs_diff(a, b):
    # NaN anywhere (aotk's outputs are NaN-filled before the check) makes the result NaN, which fails
    # every "< tol" test.
    d = (a.float() - b.float()).abs()
    if torch.isnan(d).any():
        return float("nan")
    return d.max().item()


def note(msg):
    print(f"  note: {msg}", flush=True)


def loud(msg):
    bar = "!" * 100
    print(f"{bar}\n!!! {msg}\n{bar}", flush=True)


# ---------------------------------------------------------------------------------------------------
# op "fwd"
# ---------------------------------------------------------------------------------------------------

def fwd_flops(case):
    f = 4.0 * case["batch"] * case["heads_q"] * case["seqlen_q"] * case["seqlen_k"] * case["head_dim"]
    return f / 2 if case["causal"] else f


def fwd_cases(quick):
    seqlens = SEQLENS_QUICK if quick else SEQLENS
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dtype in (dtypes[name] for name in GRID_DTYPES):
        for d in HEAD_DIMS:
            for causal in (False, True):
                for n in seqlens:
                    h = HIDDEN // d
                    yield {"op": "fwd", "dtype": dtype, "head_dim": d, "causal": causal, "seqlen_q": n,
                           "seqlen_k": n, "batch": TOTAL_TOKENS // n, "heads_q": h, "heads_kv": h}


def fwd_reference(qt, kt, vt, causal):
    """(out [b, h, s, d], lse [b, h, s] or None, name) from the first SDPA backend that runs."""
    for name, be in SDPA_BACKENDS:
        try:
            with sdpa_kernel(be):
                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        except Exception as e:  # noqa: BLE001
            note(f"{name} unavailable as reference: {type(e).__name__}: {str(e)[:200]}")
            continue
        lse = None
        if name == "sdpa-flash":
            try:  # the op SDPA's flash backend runs; it also returns the fp32 natural-log lse [b, h, s]
                res = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, causal)
                lse = res[1]
                if tuple(lse.shape) != tuple(qt.shape[:3]):
                    note(f"flash lse has shape {tuple(lse.shape)}; lse not checked")
                    lse = None
            except Exception as e:  # noqa: BLE001
                note(f"could not get flash's lse ({type(e).__name__}); lse not checked")
        return ref, lse, name
    return None, None, None


def fwd_run_case(case, aotk):
    """Times every impl on one case. Returns ({impl: ms}, failure message or None)."""
    b, n, h, d, causal = case["batch"], case["seqlen_q"], case["heads_q"], case["head_dim"], case["causal"]
    dtype = case["dtype"]
    q = torch.randn(b, n, h, d, device="cuda", dtype=dtype)
    k = torch.randn(b, case["seqlen_k"], case["heads_kv"], d, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # [b, h, s, d] views for SDPA, no copies
    results = {}

    # Correctness first: aotk against SDPA (flash's output, or the first backend that runs).
    ref, ref_lse, ref_name = fwd_reference(qt, kt, vt, causal)
    if ref is None:
        return results, "no SDPA backend ran, so aotk could not be checked"
    params = fwd_params(q, k, v, out, lse, causal)
    params_ref = ctypes.byref(params)
    try:
        info = aotk.query(AOTK_OP_ATTN_FWD, params)
        note(f"aotk kernel {info['kernel_name']} (sm_{info['arch']}{', from PTX' if info['from_ptx'] else ''})")
    except AotkError as e:
        note(str(e))
    aotk_ok = True
    try:
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        aotk.attn_fwd(params_ref, current_stream())
        torch.cuda.synchronize()
    except AotkError as e:
        loud(f"aotk FAILED on {case_label(case)}: {e}")
        aotk_ok = False
        failure = f"aotk raised: {e}"
    if aotk_ok:
        err = max_abs_diff(out, ref.transpose(1, 2))
        tol = OUT_ATOL[dtype]
        if not err < tol:
            msg = f"aotk out differs from {ref_name}: max abs diff {err:.4g} (tolerance {tol})"
            loud(f"ROW ABORTED, {case_label(case)}: {msg}")
            return {}, msg
        lse_err = None
        if ref_lse is not None:
            lse_err = max_abs_diff(lse, ref_lse)
            if not lse_err < LSE_ATOL:
                msg = f"aotk lse differs from sdpa-flash's: max abs diff {lse_err:.4g} (tolerance {LSE_ATOL})"
                loud(f"ROW ABORTED, {case_label(case)}: {msg}")
                return {}, msg
        lse_txt = f", lse {lse_err:.2g}" if lse_err is not None else ""
        note(f"aotk checked against {ref_name}: max abs diff out {err:.2g}{lse_txt}")
        failure = None
    if FLEX_OPTIONS["grid"]:  # --flex: compiled FlexAttention on contiguous [b, h, s, d] copies
        ms = flex_run(to_bhsd(q), to_bhsd(k), to_bhsd(v), flex_block_mask(flex_causal_mask, n) if causal else None,
                      False, ref_out=ref)
        if ms is not None:
            results["flex"] = ms
    del ref, ref_lse

    if aotk_ok:
        try:
            results["aotk"] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        except AotkError as e:
            loud(f"aotk FAILED while timing {case_label(case)}: {e}")
            failure = f"aotk raised while timing: {e}"

    for name, be in SDPA_BACKENDS:
        try:
            with sdpa_kernel(be):
                results[name] = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
        except Exception as e:  # noqa: BLE001
            note(f"{name} skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
    del q, k, v, out, lse, qt, kt, vt, params
    return results, failure


# ---------------------------------------------------------------------------------------------------
# op "bwd": aotk_attn_bwd against the backward of SDPA's flash and cuDNN backends
# ---------------------------------------------------------------------------------------------------

BWD_BACKENDS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
BWD_REL_TOL = 1e-2  # relative L2 error of dq, dk, dv against sdpa-flash's (both bf16: ~3e-3 expected)


def bwd_flops(case):
    return 2.5 * fwd_flops(case)  # anchors.md: backward = 2.5 x forward


def bwd_cases(quick):
    for case in fwd_cases(quick):
        yield dict(case, op="bwd")


def rel_l2(a, b):
    a, b = a.float(), b.float()
    if torch.isnan(a).any():
        return float("nan")
    return ((a - b).norm() / b.norm()).item()


def bwd_run_case(case, aotk):
    """Times the backward alone (the forward's out and lse already computed) for every impl."""
    b, n, h, d, causal = case["batch"], case["seqlen_q"], case["heads_q"], case["head_dim"], case["causal"]
    dtype = case["dtype"]
    q = torch.randn(b, n, h, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, case["seqlen_k"], case["heads_kv"], d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    dout = torch.randn_like(q)
    results = {}
    ref_grads = {}
    for name, be in BWD_BACKENDS:
        try:
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=causal)
                g = dout.transpose(1, 2)
                if name == "sdpa-flash":
                    ref_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(o, (q, k, v), g, retain_graph=True)))
                results[name] = time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
                del o
        except Exception as e:  # noqa: BLE001
            note(f"{name} backward skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
    if not ref_grads:
        return results, "sdpa-flash's backward did not run, so aotk's could not be checked"

    with torch.no_grad():
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        params = fwd_params(q.detach(), k.detach(), v.detach(), out, lse, causal)
        for field, t in (("dout", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
            setattr(params, field, describe_tensor(t))
        params_ref = ctypes.byref(params)
        failure = None
        try:
            aotk.attn_fwd(params_ref, current_stream())
        except AotkError as e:
            loud(f"aotk FAILED on {case_label(case)}: {e}")
            return results, f"aotk raised: {e}"
        # Both modes, each checked and timed: the default (deterministic = 0) and the deterministic one.
        for impl, deterministic in (("aotk", 0), ("aotk-det", 1)):
            params.deterministic = deterministic
            try:
                info = aotk.query(AOTK_OP_ATTN_BWD, params)
                note(f"{impl}: {info['kernel_name']} ({info['launches']} kernels, features "
                     f"{', '.join(info['features']) or 'none'}), workspace {info['workspace_bytes']} bytes")
                workspace = torch.empty(max(info["workspace_bytes"], 16), device="cuda", dtype=torch.uint8)
                for t in (dq, dk, dv):
                    t.fill_(float("nan"))
                aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
                torch.cuda.synchronize()
            except AotkError as e:
                loud(f"{impl} FAILED on {case_label(case)}: {e}")
                return results, f"{impl} raised: {e}"
            errs = {name: rel_l2(t, ref_grads[name]) for name, t in (("dq", dq), ("dk", dk), ("dv", dv))}
            if not all(e_ < BWD_REL_TOL for e_ in errs.values()):
                msg = f"{impl} gradients differ from sdpa-flash's: relative L2 {errs} (tolerance {BWD_REL_TOL})"
                loud(f"ROW ABORTED, {case_label(case)}: {msg}")
                return {}, msg
            note(f"{impl} checked against sdpa-flash: relative L2 "
                 + ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items()))
            try:
                results[impl] = time_ms(lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(),
                                                              info["workspace_bytes"], current_stream()))
            except AotkError as e:
                failure = f"{impl} raised while timing: {e}"
            del workspace
    if FLEX_OPTIONS["grid"]:  # --flex: compiled FlexAttention's backward, checked against flash's gradients
        ms = flex_run(to_bhsd(q), to_bhsd(k), to_bhsd(v), flex_block_mask(flex_causal_mask, n) if causal else None,
                      True, ref_grads={name: g.transpose(1, 2) for name, g in ref_grads.items()}, dout=to_bhsd(dout))
        if ms is not None:
            results["flex"] = ms
    del q, k, v, dout, out, lse, dq, dk, dv, params, ref_grads
    return results, failure


# ---------------------------------------------------------------------------------------------------
# ops "fwd_feat" and "bwd_feat": issue 4's features, each against the plain kernel of its head dim
# ---------------------------------------------------------------------------------------------------
#
# The bar: each feature, its FLOPs counted from the score pairs it really computes, reaches at least
# FEATURE_BAR of the TFLOP/s of the plain (non-causal, dense) kernel of the same head dim, measured in
# the same run at the same grid seqlen. A row is a dict of plain values (no torch), so the case list and
# the pair counts can be checked by --self-check on any machine.

FEATURE_GRID_SEQLENS = [4096, 16384]
FEATURE_GRID_SEQLENS_QUICK = [4096]
FEATURE_HEAD_DIMS = [128]  # head dims the features run at (--feature-head-dims)
# The plain rows, one per head-dim pair (qk, v) aotk accepts in a distinct way: compiled sizes (32, 64,
# 128, 256, 256/128) and padded ones (96 runs in the 128 kernel, 192/128 in the 256/128 one).
PLAIN_HEAD_DIMS = [(64, 64), (128, 128), (32, 32), (96, 96), (192, 128), (256, 256)]
WINDOW_CAUSAL_LEFT = 1024
WINDOW_SYMMETRIC = (512, 512)
VARLEN_SEQS_PER_DENSE_ROW = 16  # each dense sequence of the plain row becomes 16 packed sequences
VARLEN_SEED = 20240
VARLEN_SPREAD = (0.25, 1.75)  # lengths in proportion to draws uniform in this range (max / min <= 7)
SOFTCAP = 30.0
DROPOUT_P = 0.1
FEATURE_BAR = 0.90
FEATURE_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
FEATURE_IMPLS = ["aotk"] + [name for name, _ in FEATURE_ANCHORS]
# The correctness check runs each row on a small version (the float32 reference of a 16384-token row,
# with autograd, would need tens of GB): at most CHECK_TOKENS keys per sequence, CHECK_BATCH sequences
# (CHECK_VARLEN_SEQS for varlen rows) and CHECK_HEADS heads. Windows keep their size, so a window of 1024
# still cuts a 2048-token check.
CHECK_TOKENS = 2048
CHECK_BATCH = 2
CHECK_VARLEN_SEQS = 8
CHECK_HEADS = 8
CHECK_SOFTCAP_Q_SCALE = 5.0  # scores ~N(0, 25) in the softcap check, so tanh bends them (at ~N(0, 1) a
                              # kernel that ignored softcap = 30 would pass)
FWD_ERR_FACTOR = 2.0  # aotk's error may be this many times the error of a reference computed in aotk's
BWD_ERR_FACTOR = 3.0  # dtype (flash-attention's tests: 2x), plus a rounding floor
DROPOUT_KEEP_TOL = 0.01


def varlen_lengths(num_seqs, total, seed):
    """num_seqs positive lengths summing to total, in proportion to draws uniform in VARLEN_SPREAD (then
    rounded); the same for the same arguments on every machine (Python's Mersenne Twister, not torch's)."""
    if total < num_seqs:
        raise ValueError(f"{num_seqs} sequences cannot share {total} tokens")
    rng = random.Random(seed)
    raw = [rng.uniform(*VARLEN_SPREAD) for _ in range(num_seqs)]
    lengths = [max(1, int(r * total / sum(raw))) for r in raw]
    i = 0
    while sum(lengths) != total:  # the rounding remainder, one token at a time, round-robin
        step = 1 if sum(lengths) < total else -1
        if lengths[i % num_seqs] + step >= 1:
            lengths[i % num_seqs] += step
        i += 1
    return lengths


def sequence_pairs(seqlen_q, seqlen_k, causal, causal_align, window_left, window_right):
    """The (i, j) score pairs one head of one sequence computes, exactly, by aotk.h's rule: row i sees
    key j (0 <= j < seqlen_k) when i + diag - window_left <= j <= i + diag + window_right, a bound of -1
    being unbounded, causal meaning window_right = 0, diag = seqlen_k - seqlen_q (bottom-right) or 0
    (top-left). One interval per row: O(seqlen_q)."""
    diag = seqlen_k - seqlen_q if causal_align == AOTK_ALIGN_BOTTOM_RIGHT else 0
    right = 0 if causal else window_right
    pairs = 0
    for i in range(seqlen_q):
        lo = 0 if window_left < 0 else max(0, i + diag - window_left)
        hi = seqlen_k - 1 if right < 0 else min(seqlen_k - 1, i + diag + right)
        if hi >= lo:
            pairs += hi - lo + 1
    return pairs


def spec_pairs(spec):
    """Score pairs of the whole row: every head of every sequence."""
    mask = (spec["causal"], spec["causal_align"], spec["window_left"], spec["window_right"])
    if spec["seqlens_q"] is not None:
        per_head = sum(sequence_pairs(lq, lk, *mask) for lq, lk in zip(spec["seqlens_q"], spec["seqlens_k"]))
    else:
        per_head = spec["batch"] * sequence_pairs(spec["seqlen_q"], spec["seqlen_k"], *mask)
    return per_head * spec["heads_q"]


def spec_full_pairs(spec):
    """The pairs of the same row with no mask: the denominator of the table's density column."""
    if spec["seqlens_q"] is not None:
        per_head = sum(lq * lk for lq, lk in zip(spec["seqlens_q"], spec["seqlens_k"]))
    else:
        per_head = spec["batch"] * spec["seqlen_q"] * spec["seqlen_k"]
    return per_head * spec["heads_q"]


def feature_flops(spec):
    """pairs * 2 * (head_dim_qk + head_dim_v): q.k and p.v per pair, a multiply-add each (for equal head
    dims and no mask this is anchors.md's 4 * b * h * sq * sk * d); the backward is 2.5x the forward."""
    f = 2.0 * spec_pairs(spec) * (spec["head_dim_qk"] + spec["head_dim_v"])
    return 2.5 * f if spec["op"] == "bwd_feat" else f


def feature_spec(op, grid_seqlen, head_dim_qk, head_dim_v, feature, **changes):
    """One row, as the plain row of its group and head dim with `changes` applied."""
    heads = max(1, HIDDEN // head_dim_qk)
    spec = {"op": op, "feature": feature, "role": "feature", "grid_seqlen": grid_seqlen, "dtype": "bf16",
            "head_dim_qk": head_dim_qk, "head_dim_v": head_dim_v,
            "batch": TOTAL_TOKENS // grid_seqlen, "heads_q": heads, "heads_kv": heads,
            "seqlen_q": grid_seqlen, "seqlen_k": grid_seqlen,
            "causal": False, "causal_align": AOTK_ALIGN_BOTTOM_RIGHT, "window_left": -1, "window_right": -1,
            "softcap": 0.0, "alibi": False, "sinks": False, "dropout_p": 0.0,
            "seqlens_q": None, "seqlens_k": None,  # lists of lengths in the varlen layout
            # SDPA's call doing the same work ({"is_causal", "dropout_p"}), or None and the reason why not.
            "anchor": None, "no_anchor": "SDPA has no kernel for this mask or score modifier"}
    spec.update(changes)
    return spec


def varlen_changes(batch, seqlen, seed):
    """The varlen version of a dense [batch, seqlen] row: the same tokens packed as 16 * batch sequences."""
    lengths = varlen_lengths(VARLEN_SEQS_PER_DENSE_ROW * batch, batch * seqlen, seed)
    return {"seqlens_q": lengths, "seqlens_k": list(lengths), "batch": len(lengths),
            "seqlen_q": max(lengths), "seqlen_k": max(lengths),
            "no_anchor": "SDPA's variable-length path (nested tensors) is not timed here"}


def feature_cases(op, grid_seqlens, feature_head_dims):
    """The rows of one op, grouped by grid seqlen; in each group the plain rows come first, so every
    row's baseline is measured before it."""
    for n in grid_seqlens:
        plain_dims = list(PLAIN_HEAD_DIMS) + [(d, d) for d in feature_head_dims if (d, d) not in PLAIN_HEAD_DIMS]
        for dqk, dv in plain_dims:
            yield feature_spec(op, n, dqk, dv, "plain", role="base", anchor={"is_causal": False, "dropout_p": 0.0})
        for d in feature_head_dims:
            batch = TOTAL_TOKENS // n

            def row(feature, **changes):
                return feature_spec(op, n, d, d, feature, **changes)

            everything = dict(causal=True, window_left=WINDOW_CAUSAL_LEFT, window_right=0, softcap=SOFTCAP,
                              alibi=True, sinks=True, dropout_p=DROPOUT_P)
            yield row("causal", causal=True, anchor={"is_causal": True, "dropout_p": 0.0})
            # SDPA's is_causal is top-left; with seqlen_q = seqlen_k / 2 the two alignments differ.
            yield row("causal-top-left", causal=True, causal_align=AOTK_ALIGN_TOP_LEFT, seqlen_q=n // 2,
                      anchor={"is_causal": True, "dropout_p": 0.0})
            yield row(f"window-{WINDOW_CAUSAL_LEFT}-0", causal=True, window_left=WINDOW_CAUSAL_LEFT, window_right=0)
            yield row(f"window-{WINDOW_SYMMETRIC[0]}-{WINDOW_SYMMETRIC[1]}", window_left=WINDOW_SYMMETRIC[0],
                      window_right=WINDOW_SYMMETRIC[1])
            yield row("varlen", **varlen_changes(batch, n, VARLEN_SEED + n))
            # Context for varlen (not under the bar): dense sequences of varlen's mean length.
            yield row("dense-short", role="context", batch=batch * VARLEN_SEQS_PER_DENSE_ROW,
                      seqlen_q=n // VARLEN_SEQS_PER_DENSE_ROW, seqlen_k=n // VARLEN_SEQS_PER_DENSE_ROW,
                      anchor={"is_causal": False, "dropout_p": 0.0})
            yield row("softcap", softcap=SOFTCAP)
            yield row("alibi", alibi=True)
            yield row("sinks", sinks=True)
            yield row("dropout", dropout_p=DROPOUT_P, anchor={"is_causal": False, "dropout_p": DROPOUT_P})
            yield row("all", **everything)
            yield row("all-varlen", **everything, **varlen_changes(batch, n, VARLEN_SEED + n))


def check_spec(spec):
    """The small version of a row that the correctness check runs (same features, fewer tokens)."""
    c = dict(spec)
    c["heads_q"] = min(spec["heads_q"], CHECK_HEADS)
    c["heads_kv"] = max(1, c["heads_q"] * spec["heads_kv"] // spec["heads_q"])
    if spec["seqlens_q"] is not None:  # CHECK_VARLEN_SEQS sequences of mean length CHECK_TOKENS / 4
        lengths = varlen_lengths(CHECK_VARLEN_SEQS, CHECK_VARLEN_SEQS * CHECK_TOKENS // 4, VARLEN_SEED)
        c.update(seqlens_q=lengths, seqlens_k=list(lengths), batch=len(lengths), seqlen_q=max(lengths),
                 seqlen_k=max(lengths))
    else:
        shrink = min(1.0, CHECK_TOKENS / max(spec["seqlen_q"], spec["seqlen_k"]))
        c["batch"] = min(spec["batch"], CHECK_BATCH)
        c["seqlen_q"] = max(1, int(spec["seqlen_q"] * shrink))
        c["seqlen_k"] = max(1, int(spec["seqlen_k"] * shrink))
    return c


def feature_label(spec):
    s = (f"{spec['op']} {spec['dtype']} {spec['feature']} d={spec['head_dim_qk']}"
         + (f"/{spec['head_dim_v']}" if spec["head_dim_v"] != spec["head_dim_qk"] else "")
         + f" grid seqlen {spec['grid_seqlen']}:")
    if spec["seqlens_q"] is not None:
        s += f" varlen {len(spec['seqlens_q'])} seqs, {sum(spec['seqlens_q'])} tokens, max {spec['seqlen_q']}"
    else:
        s += f" batch={spec['batch']} seqlen_q={spec['seqlen_q']} seqlen_k={spec['seqlen_k']}"
    s += f" heads={spec['heads_q']}"
    if spec["causal"]:
        s += " causal" + (" top-left" if spec["causal_align"] == AOTK_ALIGN_TOP_LEFT else "")
    if spec["window_left"] >= 0 or spec["window_right"] >= 0:
        s += f" window=({spec['window_left']}, {spec['window_right']})"
    if spec["softcap"]:
        s += f" softcap={spec['softcap']:g}"
    if spec["alibi"]:
        s += " alibi"
    if spec["sinks"]:
        s += " sinks"
    if spec["dropout_p"]:
        s += f" dropout={spec['dropout_p']:g}"
    return s


# --- tensors, params and the float32 reference (GPU) -----------------------------------------------

def alibi_slopes(heads):
    """The ALiBi paper's slopes, 2^(-8 (h + 1) / heads)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], dtype=torch.float32, device=DEVICE)


def feature_tensors(spec, q_scale=1.0, requires_grad=False):
    """Fresh inputs and output buffers of a row, in aotk's layout (dense [b, s, h, d] or varlen
    [total, h, d]), plus its cu_seqlens, ALiBi slopes, sinks and RNG state as the row needs."""
    dt = torch.bfloat16
    h, hkv, dqk, dv = spec["heads_q"], spec["heads_kv"], spec["head_dim_qk"], spec["head_dim_v"]
    if spec["seqlens_q"] is not None:
        lead_q, lead_k = (sum(spec["seqlens_q"]),), (sum(spec["seqlens_k"]),)
    else:
        lead_q, lead_k = (spec["batch"], spec["seqlen_q"]), (spec["batch"], spec["seqlen_k"])
    t = {"q": torch.randn(*lead_q, h, dqk, device=DEVICE, dtype=dt),
         "k": torch.randn(*lead_k, hkv, dqk, device=DEVICE, dtype=dt),
         "v": torch.randn(*lead_k, hkv, dv, device=DEVICE, dtype=dt)}
    if q_scale != 1.0:
        t["q"].mul_(q_scale)
    if requires_grad:
        for name in ("q", "k", "v"):
            t[name].requires_grad_(True)
    t["out"] = torch.empty(*lead_q, h, dv, device=DEVICE, dtype=dt)
    if spec["seqlens_q"] is not None:
        t["lse"] = torch.empty(h, lead_q[0], device=DEVICE, dtype=torch.float32)
        for side in ("q", "k"):
            offsets = [0]
            for length in spec[f"seqlens_{side}"]:
                offsets.append(offsets[-1] + length)
            t[f"cu_seqlens_{side}"] = torch.tensor(offsets, dtype=torch.int32, device=DEVICE)
    else:
        t["lse"] = torch.empty(spec["batch"], h, spec["seqlen_q"], device=DEVICE, dtype=torch.float32)
    if spec["alibi"]:
        t["alibi_slopes"] = alibi_slopes(h)
    if spec["sinks"]:
        # Around the rows' lse (log(seqlen_k) + 1/2 for unit-variance scores), so each sink takes 12% to 88%
        # of its row's mass: a library that ignored it fails the check (at ~1% it might not).
        lse_estimate = math.log(max(spec["seqlens_k"] or [spec["seqlen_k"]])) + 0.5
        t["sinks"] = lse_estimate + torch.rand(h, device=DEVICE, dtype=torch.float32) * 4.0 - 2.0
    if spec["dropout_p"] > 0:
        t["rng_state"] = torch.tensor([random.getrandbits(62), random.getrandbits(32)], dtype=torch.int64,
                                      device=DEVICE)
    return t


def feature_params(spec, t):
    """aotk_attn_params for a row's forward (the backward's fields are added by the caller)."""
    p = fwd_params(t["q"].detach(), t["k"].detach(), t["v"].detach(), t["out"], t["lse"], spec["causal"])
    p.causal_align = spec["causal_align"]
    p.window_left = spec["window_left"]
    p.window_right = spec["window_right"]
    p.softcap = spec["softcap"]
    p.dropout_p = spec["dropout_p"]
    for field in ("cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "sinks", "rng_state"):
        if field in t:
            setattr(p, field, describe_tensor(t[field]))
    if spec["seqlens_q"] is not None:
        p.max_seqlen_q = max(spec["seqlens_q"])
        p.max_seqlen_k = max(spec["seqlens_k"])
    return p


def reference_mask(seqlen_q, seqlen_k, spec, device):
    """(visible [sq, sk] bool, |i + diag - j| [sq, sk] fp32): aotk.h's mask rule and ALiBi distance."""
    diag = seqlen_k - seqlen_q if spec["causal_align"] == AOTK_ALIGN_BOTTOM_RIGHT else 0
    rows = torch.arange(seqlen_q, device=device)[:, None]
    cols = torch.arange(seqlen_k, device=device)[None, :]
    rel = cols - rows - diag
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    right = 0 if spec["causal"] else spec["window_right"]
    if spec["window_left"] >= 0:
        visible &= rel >= -spec["window_left"]
    if right >= 0:
        visible &= rel <= right
    return visible, rel.abs().float()


def reference_dense(q, k, v, spec, slopes, sinks, keep, compute_dtype):
    """Attention of dense q [b, sq, h, dqk], k [b, sk, hkv, dqk], v [b, sk, hkv, dv] with explicit
    masks and biases. The matmuls run in compute_dtype (float32: the reference; bf16: what that dtype
    can do, the error scale), everything between them in float32. keep: [b, h, sq, sk] dropout keep mask
    or None. Returns (out [b, sq, h, dv] fp32, lse [b, h, sq] fp32). The feature rows have no row that
    sees no key, so the softmax never divides by zero."""
    b, sq, h, dqk = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qh = q.to(compute_dtype).transpose(1, 2)
    kh = k.to(compute_dtype).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    vh = v.to(compute_dtype).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)).float() * (1.0 / math.sqrt(dqk))
    if spec["softcap"] > 0:
        s = spec["softcap"] * torch.tanh(s / spec["softcap"])
    visible, distance = reference_mask(sq, sk, spec, q.device)
    if slopes is not None:
        s = s - slopes.view(1, h, 1, 1) * distance
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:  # a column of sink logits joins the softmax and is dropped after it
        s = torch.cat([s, sinks.view(1, h, 1, 1).expand(b, h, sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))[..., :sk]
    if keep is not None:
        p = p * keep.float() / (1.0 - spec["dropout_p"])
    out = torch.matmul(p.to(compute_dtype), vh).float()
    return out.transpose(1, 2), lse


def reference_attention(t, spec, keep, compute_dtype, leaves=None):
    """reference_dense on a row's tensors t (dense or varlen, one sequence at a time); returns
    (out, lse) in aotk's layout. leaves: {"q", "k", "v", "sinks"} to use instead of t's (autograd)."""
    x = dict(t, **(leaves or {}))
    slopes, sinks = x.get("alibi_slopes"), x.get("sinks")
    if spec["seqlens_q"] is None:
        return reference_dense(x["q"], x["k"], x["v"], spec, slopes, sinks, keep, compute_dtype)
    outs, lses = [], []
    start_q = start_k = 0
    for s, (lq, lk) in enumerate(zip(spec["seqlens_q"], spec["seqlens_k"])):
        seq = {"q": x["q"][None, start_q:start_q + lq], "k": x["k"][None, start_k:start_k + lk],
               "v": x["v"][None, start_k:start_k + lk]}
        keep_s = keep[s:s + 1, :, :lq, :lk] if keep is not None else None
        o, l = reference_dense(seq["q"], seq["k"], seq["v"], spec, slopes, sinks, keep_s, compute_dtype)
        outs.append(o[0])
        lses.append(l[0])
        start_q += lq
        start_k += lk
    return torch.cat(outs, 0), torch.cat(lses, 1)


def bf16_rounding_floor(ref):
    """For outputs aotk writes in bf16: twice the bf16 rounding error at the reference's scale
    (flash-attention's `x + 0.3 - 0.3` floor); aotk cannot be closer than its output's rounding."""
    r = ref.detach().to(torch.bfloat16)
    return 2 * (((r + 0.3) - 0.3).float() - r.float()).abs().max().item()


LSE_FLOOR = 1e-2  # lse (fp32): what tanh.approx's 2^-11 relative error can cost at softcap 30; a missing
                  # sink, ALiBi bias or window moves lse by far more


def relative_floor(ref):
    """For dsinks (fp32, a sum over every row): 1e-3 of its largest magnitude."""
    return 1e-3 * ref.detach().abs().max().item()


def finite_abs_diff(a, b):
    """max |a - b| where equal infinities (lse of a row that sees nothing) count as 0; NaN anywhere
    (poisoned outputs left unwritten) gives NaN."""
    a, b = a.detach().float(), b.detach().float()
    if torch.isnan(a).any() or torch.isnan(b).any():
        return float("nan")
    same = a == b
    d = torch.where(same, torch.zeros_like(a), (a - b).abs())
    return d.max().item() if d.numel() else 0.0


def compare_to_reference(name, got, ref32, ref_same_dtype, factor, floor):
    """(ok, text): got's error against the float32 reference, bounded by factor x the error of a
    reference computed in bf16, plus a floor."""
    err = finite_abs_diff(got, ref32)
    ref_err = finite_abs_diff(ref_same_dtype, ref32)
    bound = factor * ref_err + floor
    ok = err <= bound  # False for NaN
    return ok, f"{name} {err:.2g} (bound {bound:.2g})"


def dropout_mask_shape(spec):
    return (spec["batch"], spec["heads_q"], spec["seqlen_q"], spec["seqlen_k"])  # varlen: max seqlens


def check_dropout_mask(spec, mask):
    """The mask aotk wrote: 0/1 inside every sequence's region (poisoned with 2 before), kept fraction
    near 1 - dropout_p. Returns (failure or None, kept fraction)."""
    if spec["seqlens_q"] is not None:
        regions = [mask[s, :, :lq, :lk] for s, (lq, lk) in enumerate(zip(spec["seqlens_q"], spec["seqlens_k"]))]
    else:
        regions = [mask]
    kept = total = 0
    for region in regions:
        if (region > 1).any():
            return "dropout_mask has elements aotk did not write", None
        kept += region.sum(dtype=torch.int64).item()
        total += region.numel()
    frac = kept / total
    if abs(frac - (1 - spec["dropout_p"])) > DROPOUT_KEEP_TOL:
        return f"dropout_mask keeps {frac:.4f} of the elements; expected {1 - spec['dropout_p']:.4f}", frac
    return None, frac


def feature_check(spec, aotk, backward):
    """Runs aotk on the small version of the row and compares out, lse (and dq, dk, dv, dsinks for the
    backward) with the float32 reference. Dropout rows ask aotk for its dropout_mask in this call (the
    timed calls do not) and apply it in the reference. Returns (failure or None, summary)."""
    c = check_spec(spec)
    q_scale = CHECK_SOFTCAP_Q_SCALE if c["softcap"] > 0 else 1.0
    t = feature_tensors(c, q_scale=q_scale)
    params = feature_params(c, t)
    keep = None
    if c["dropout_p"] > 0:
        t["dropout_mask"] = torch.full(dropout_mask_shape(c), 2, dtype=torch.uint8, device=DEVICE)
        params.dropout_mask = describe_tensor(t["dropout_mask"])
    t["out"].fill_(float("nan"))
    t["lse"].fill_(float("nan"))
    aotk.attn_fwd(ctypes.byref(params), current_stream())
    synchronize()
    texts = []
    if c["dropout_p"] > 0:
        failure, frac = check_dropout_mask(c, t["dropout_mask"])
        if failure:
            return failure, ""
        keep = t["dropout_mask"].bool()
        texts.append(f"kept {frac:.3f}")

    if not backward:
        with torch.no_grad():
            out32, lse32 = reference_attention(t, c, keep, torch.float32)
            out16, lse16 = reference_attention(t, c, keep, torch.bfloat16)
        results = [compare_to_reference("out", t["out"], out32, out16, FWD_ERR_FACTOR, bf16_rounding_floor(out32)),
                   compare_to_reference("lse", t["lse"], lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
    else:
        dout = torch.randn_like(t["out"])
        grads = {"dq": torch.empty_like(t["q"]), "dk": torch.empty_like(t["k"]), "dv": torch.empty_like(t["v"])}
        if c["sinks"]:
            grads["dsinks"] = torch.empty_like(t["sinks"])
        for g in grads.values():
            g.fill_(float("nan"))
        params.dropout_mask = absent_tensor()  # a forward output; the backward refuses it
        params.dout = describe_tensor(dout)
        for name, g in grads.items():
            setattr(params, name, describe_tensor(g))
        params.deterministic = 1
        info = aotk.query(AOTK_OP_ATTN_BWD, params)
        workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
        aotk.attn_bwd(ctypes.byref(params), workspace.data_ptr(), info["workspace_bytes"], current_stream())
        synchronize()
        names = ["q", "k", "v"] + (["sinks"] if c["sinks"] else [])
        ref = {}
        for dtype in (torch.float32, torch.bfloat16):
            leaves = {n: t[n].detach().to(torch.float32 if n == "sinks" else dtype).requires_grad_(True)
                      for n in names}
            out, _ = reference_attention(t, c, keep, dtype, leaves)
            ref[dtype] = dict(zip(["d" + n for n in names],
                                  torch.autograd.grad(out, [leaves[n] for n in names], dout.float())))
        results = []
        for name, got in grads.items():
            ref32 = ref[torch.float32][name]
            floor = relative_floor(ref32) if name == "dsinks" else bf16_rounding_floor(ref32)
            results.append(compare_to_reference(name, got, ref32, ref[torch.bfloat16][name], BWD_ERR_FACTOR, floor))
    texts += [text for _, text in results]
    bad = [text for ok, text in results if not ok]
    summary = "checked on " + feature_label(c).split(":", 1)[1].strip() + " against the float32 reference: " \
        + ", ".join(texts)
    if bad:
        return "aotk differs from the float32 reference: " + ", ".join(bad), summary
    return None, summary


def anchor_matches_reference(spec, backend):
    """Whether SDPA's backend computes the row's mask (its is_causal alignment), on the check size:
    a backend that aligned differently would be timed on different work."""
    c = check_spec(spec)
    t = feature_tensors(c)
    with torch.no_grad():
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(*(t[n].transpose(1, 2) for n in ("q", "k", "v")),
                                                 is_causal=spec["anchor"]["is_causal"])
        ref, _ = reference_attention(t, c, None, torch.float32)
    return finite_abs_diff(out.transpose(1, 2), ref) < OUT_ATOL[torch.bfloat16]


def feature_anchor_times(spec, backward):
    """{impl: ms} of SDPA's flash and cuDNN backends doing the row's work, for rows SDPA can run."""
    results = {}
    a = spec["anchor"]
    t = feature_tensors(spec, requires_grad=backward)
    qt, kt, vt = (t[n].transpose(1, 2) for n in ("q", "k", "v"))  # [b, h, s, d] views, no copies
    dout = torch.randn_like(t["out"]).transpose(1, 2) if backward else None
    for name, be in FEATURE_ANCHORS:
        try:
            if a["dropout_p"] == 0 and not anchor_matches_reference(spec, be):
                note(f"{name} not timed: its output differs from the reference mask (another causal alignment?)")
                continue
            with sdpa_kernel(be):
                if not backward:
                    with torch.no_grad():
                        results[name] = time_ms(lambda: F.scaled_dot_product_attention(
                            qt, kt, vt, is_causal=a["is_causal"], dropout_p=a["dropout_p"]))
                else:
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=a["is_causal"], dropout_p=a["dropout_p"])
                    results[name] = time_ms(lambda: torch.autograd.grad(o, (t["q"], t["k"], t["v"]), dout,
                                                                        retain_graph=True))
                    del o
        except Exception as e:  # noqa: BLE001
            note(f"{name} skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
    return results


def feature_run_case(spec, aotk):
    """feature_run_case_unguarded, with any exception (a bug of this script, a CUDA error) turned into
    the row's failure, so one row cannot end the run."""
    try:
        return feature_run_case_unguarded(spec, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {feature_label(spec)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", None


def feature_run_case_unguarded(spec, aotk):
    """Checks the row on its small version, then times aotk (and SDPA where it can do the same work)
    at full size. Returns ({impl: ms}, failure or None, aotk's kernel info or None)."""
    backward = spec["op"] == "bwd_feat"
    try:
        failure, summary = feature_check(spec, aotk, backward)
    except AotkError as e:
        loud(f"aotk FAILED on {feature_label(spec)}: {e}")
        return {}, f"aotk raised in the check: {e}", None
    if failure:
        loud(f"ROW ABORTED, {feature_label(spec)}: {failure}")
        return {}, failure, None
    note(summary)
    empty_cache()

    results, info = {}, None
    t = feature_tensors(spec)
    params = feature_params(spec, t)
    params_ref = ctypes.byref(params)
    try:
        if not backward:
            info = aotk.query(AOTK_OP_ATTN_FWD, params)
            results["aotk"] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        else:
            aotk.attn_fwd(params_ref, current_stream())  # out and lse for the backward
            t["dout"] = torch.randn_like(t["out"])
            for name in ("q", "k", "v"):
                t["d" + name] = torch.empty_like(t[name])
            if spec["sinks"]:
                t["dsinks"] = torch.empty_like(t["sinks"])
            for name in ("dout", "dq", "dk", "dv", "dsinks"):
                if name in t:
                    setattr(params, name, describe_tensor(t[name]))
            params.deterministic = 1
            info = aotk.query(AOTK_OP_ATTN_BWD, params)
            workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
            results["aotk"] = time_ms(lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"],
                                                            current_stream()))
    except AotkError as e:
        loud(f"aotk FAILED while timing {feature_label(spec)}: {e}")
        return results, f"aotk raised while timing: {e}", info
    note(f"aotk kernel {info['kernel_name']} (runs d={info['head_dim_qk']}/{info['head_dim_v']}, "
         f"{info['launches']} launch(es), features: {', '.join(info['features']) or 'none'})")
    del t, params
    empty_cache()
    if spec["anchor"] is not None:
        results.update(feature_anchor_times(spec, backward))
    else:
        note(f"no SDPA anchor: {spec['no_anchor']}")
    return results, None, info


FEATURE_TABLE_HEAD = (f"{'op':>8} {'seqlen':>6} {'d':>7} {'feature':<16} {'density':>7} {'ms':>8} "
                      f"{'aotk TF/s':>9} {'x plain':>7} {'bar':>5} |"
                      + "".join(f" {name:>10}" for name in FEATURE_IMPLS[1:]) + f" | {'aotk/best':>9}")


def feature_table_line(spec, ms, tfl, ratio, failure):
    dims = f"{spec['head_dim_qk']}" + (f"/{spec['head_dim_v']}" if spec["head_dim_v"] != spec["head_dim_qk"] else "")
    density = spec_pairs(spec) / spec_full_pairs(spec)
    s = f"{spec['op']:>8} {spec['grid_seqlen']:>6} {dims:>7} {spec['feature']:<16} {density:>7.3f} "
    s += f"{ms['aotk']:>8.3f} {tfl['aotk']:>9.1f} " if "aotk" in tfl else f"{'-':>8} {'-':>9} "
    r = ratio.get("aotk")
    s += f"{r:>7.2f} " if r is not None else f"{'-':>7} "
    s += f"{feature_verdict(spec, r):>5} |"
    s += "".join(f" {tfl[name]:>10.1f}" if name in tfl else f" {'-':>10}" for name in FEATURE_IMPLS[1:])
    anchors = [tfl[name] for name in FEATURE_IMPLS[1:] if name in tfl]
    if "aotk" in tfl and anchors:
        s += f" | {tfl['aotk'] / max(anchors):>8.2f}x"
    else:
        s += f" | {'-' if spec['anchor'] is not None else 'no anchor':>9}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def feature_verdict(spec, ratio):
    """'base' for the plain rows, 'ctx' for context rows, else 'ok' / 'LOW' against FEATURE_BAR."""
    if spec["role"] == "base":
        return "base"
    if spec["role"] == "context":
        return "ctx"
    if ratio is None:
        return "-"
    return "ok" if ratio >= FEATURE_BAR else "LOW"


def run_feature_op(op, grid_seqlens, feature_head_dims, aotk):
    """Runs one feature op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures = [], [], []
    plain = {}  # (grid seqlen, head_dim_qk, head_dim_v, impl) -> TFLOP/s of the plain row
    passed, low, missing = [], [], []
    for spec in feature_cases(op, grid_seqlens, feature_head_dims):
        print(f"\n{feature_label(spec)}", flush=True)
        ms, failure, info = feature_run_case(spec, aotk)
        empty_cache()
        pairs, flops = spec_pairs(spec), feature_flops(spec)
        tfl = {impl: flops / ms[impl] / 1e9 for impl in FEATURE_IMPLS if impl in ms}
        key = (spec["grid_seqlen"], spec["head_dim_qk"], spec["head_dim_v"])
        if spec["role"] == "base":
            for impl, value in tfl.items():
                plain[key + (impl,)] = value
        ratio = {impl: value / plain[key + (impl,)] for impl, value in tfl.items() if key + (impl,) in plain}
        for impl, value in tfl.items():
            row = {"op": op, "impl": impl, "dtype": spec["dtype"], "feature": spec["feature"], "role": spec["role"],
                   "head_dim": spec["head_dim_qk"], "head_dim_qk": spec["head_dim_qk"],
                   "head_dim_v": spec["head_dim_v"], "causal": bool(spec["causal"]),
                   "causal_align": "top-left" if spec["causal_align"] == AOTK_ALIGN_TOP_LEFT else "bottom-right",
                   "window_left": spec["window_left"], "window_right": spec["window_right"],
                   "softcap": spec["softcap"], "alibi": spec["alibi"], "sinks": spec["sinks"],
                   "dropout_p": spec["dropout_p"], "varlen": spec["seqlens_q"] is not None,
                   "grid_seqlen": spec["grid_seqlen"], "seqlen_q": spec["seqlen_q"], "seqlen_k": spec["seqlen_k"],
                   "batch": spec["batch"], "heads_q": spec["heads_q"], "heads_kv": spec["heads_kv"],
                   "pairs": pairs, "flops": flops, "ms": ms[impl], "tflops": round(value, 2),
                   "ratio_to_plain": round(ratio[impl], 4) if impl in ratio else None}
            if spec["seqlens_q"] is not None:
                row["seqlens_q"] = spec["seqlens_q"]
                row["seqlens_k"] = spec["seqlens_k"]
            if impl == "aotk" and info is not None:
                row["kernel"] = info["kernel_name"]
                row["kernel_features"] = info["features"]
            rows.append(row)
        if failure:
            failures.append(f"{feature_label(spec)}: {failure}")
        verdict = feature_verdict(spec, ratio.get("aotk"))
        name = f"{op} seqlen {spec['grid_seqlen']} d={spec['head_dim_qk']} {spec['feature']}"
        if verdict == "ok":
            passed.append(name)
        elif verdict == "LOW":
            low.append(f"{name}: {ratio['aotk']:.2f}x plain")
        elif verdict == "-":
            missing.append(name)
        line = feature_table_line(spec, ms, tfl, ratio, failure)
        lines.append(line)
        print(FEATURE_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bar (aotk >= {FEATURE_BAR:.2f}x the plain row of its head dim, same grid seqlen, same run): "
           f"{len(passed)} of {len(passed) + len(low) + len(missing)} feature rows pass"]
    bar += [f"  below: {x}" for x in low]
    bar += [f"  not measured: {x}" for x in missing]
    return rows, lines, failures, bar


# ---------------------------------------------------------------------------------------------------
# ops "sel_fwd" and "sel_bwd": selection attention (NSA's selected-blocks branch) against dense causal
# attention on the same q, k, v
# ---------------------------------------------------------------------------------------------------
#
# One sequence of N tokens per row (batch 1), bf16, q [N, 64, 128], k and v [N, 4, 128] (aotk.h's packed
# layout, no cu_seqlens), key blocks of 64, 16 slots. Indices as in the public NSA benchmarks: for each
# token t and kv head h, min(16, t // 64 + 1) distinct blocks drawn uniformly among the causal ones
# 0 .. t // 64, the other slots -1, all 16 slots in random order (so -1 slots sit between valid ones:
# aotk.h reads every slot). aotk's time is compared with SDPA's flash (FlashAttention-2) and cuDNN
# backends doing dense causal attention on the same q, k, v: what selection attention replaces.
# seqlen_q = seqlen_k, so SDPA's top-left is_causal is the same mask as aotk.h's bottom-right.

SEL_OPS = ("sel_fwd", "sel_bwd")
SEL_SEQLENS = [8192, 16384, 32768, 65536]
SEL_SEQLENS_QUICK = [8192, 16384]
SEL_HEADS_Q = 64
SEL_HEADS_KV = 4
SEL_HEAD_DIM = 128
SEL_BLOCK_SIZE = 64
SEL_SLOTS = 16
SEL_INDEX_SEED = 20250  # + the row's token count: each size has its own fixed draw
SEL_INDEX_DISTRIBUTION = "uniform-causal"  # issue 5's draw; its bars are defined on it
# Issue 12's distributions, the selections NSA really makes (each row records its `index_distribution`):
#   uniform-causal  min(16, t / 64 + 1) distinct causal blocks, uniformly at random (sel_block_indices);
#   nsa-fixed       the first block and the two local blocks (the token's own and the one before) always,
#                   then distinct causal blocks uniformly at random up to the slots (NSA's fixed picks);
#   nsa-topk        block 0, then 15 distinct blocks uniformly over ALL blocks (the top 16 of random scores
#                   with block 0 forced), future blocks dropped to -1: about half the slots valid (the
#                   public NSA Triton repository's own benchmark).
SEL_INDEX_DISTRIBUTIONS = ("uniform-causal", "nsa-fixed", "nsa-topk")
SEL_INDEX_CHUNK_TOKENS = 4096  # the draw's scores are [chunk, heads_kv, num_blocks] fp32: 64 MiB at 64k
# The bars, aotk's speedup over sdpa-flash (dense causal FlashAttention-2) on the same q, k, v:
# (op, tokens) -> (speedup, strict). 64k: the public selection kernel's figures (anchors.md); 16k: faster.
SEL_BARS = {("sel_fwd", 65536): (7.6, False), ("sel_bwd", 65536): (16.0, False),
            ("sel_fwd", 16384): (1.0, True), ("sel_bwd", 16384): (1.0, True)}
SEL_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
SEL_IMPLS = ["aotk"] + [name for name, _ in SEL_ANCHORS]
# The checks, before anything is timed: every token of a problem of SEL_FULL_CHECK_TOKENS tokens (the
# row's heads, head dim, block size and slots; all of out and lse, or dq, dk and dv) against a masked dense
# reference, chunked by SEL_REFERENCE_CHUNK queries; then, on the row's own tensors, SEL_SAMPLE_TOKENS
# tokens (every head) against a reference that gathers each token's selected key rows.
SEL_FULL_CHECK_TOKENS = 4096
SEL_REFERENCE_CHUNK = 256
SEL_SAMPLE_TOKENS = 64
SEL_SAMPLE_SEED = 7


SEL_OPTIONS = {"distributions": list(SEL_INDEX_DISTRIBUTIONS)}  # --sel-distributions


def sel_cases(op, quick):
    for dist in SEL_OPTIONS["distributions"]:
        for n in (SEL_SEQLENS_QUICK if quick else SEL_SEQLENS):
            yield {"op": op, "dtype": "bf16", "seqlen": n, "heads_q": SEL_HEADS_Q, "heads_kv": SEL_HEADS_KV,
                   "head_dim": SEL_HEAD_DIM, "block_size": SEL_BLOCK_SIZE, "slots": SEL_SLOTS,
                   "index_distribution": dist}


def sel_label(case):
    return (f"{case['op']} {case['dtype']} tokens={case['seqlen']} heads_q={case['heads_q']} "
            f"heads_kv={case['heads_kv']} d={case['head_dim']} block={case['block_size']} slots={case['slots']} "
            f"indices={case.get('index_distribution', SEL_INDEX_DISTRIBUTION)}")


def sel_num_blocks(seqlen_k, block_size):
    return -(-seqlen_k // block_size)


def sel_key_positions(blocks, position, block_size, seqlen_k):
    """J(t, h) by aotk.h's rule, as a list of key positions in slot order: each listed block b with
    0 <= b < ceil(seqlen_k / block_size) and b * block_size <= position, cut at position (and seqlen_k).
    Slots outside that (-1, out of range, after the diagonal) are skipped; a block listed twice counts twice."""
    keys = []
    for b in blocks:
        if 0 <= b < sel_num_blocks(seqlen_k, block_size) and b * block_size <= position:
            keys.extend(range(b * block_size, min((b + 1) * block_size, position + 1, seqlen_k)))
    return keys


def sel_brute_force_key_count(blocks, position, block_size, seqlen_k):
    """|J(t, h)| by testing every key position against the rule as aotk.h words it (self-check only)."""
    n = 0
    for j in range(seqlen_k):
        if j <= position:
            n += sum(1 for b in blocks if 0 <= b and b * block_size <= position and j // block_size == b)
    return n


def sel_expected_keys(seqlen, block_size, slots):
    """E[sum over tokens of |J(t, h)|] for one kv head under SEL_INDEX_DISTRIBUTION, seqlen_q = seqlen_k:
    token t has n = t // block_size + 1 causal blocks; with n <= slots it sees all t + 1 keys; otherwise
    each block is chosen with probability slots / n, the n - 1 full ones bringing block_size keys and the
    diagonal one t % block_size + 1."""
    total = 0.0
    for t in range(seqlen):
        n = t // block_size + 1
        if n <= slots:
            total += t + 1
        else:
            total += slots / n * ((n - 1) * block_size + t % block_size + 1)
    return total


def sel_block_indices(seqlen, heads_kv, slots, block_size, seed, device):
    """block_idx int32 [seqlen, heads_kv, slots] of SEL_INDEX_DISTRIBUTION, drawn on `device` with a
    generator seeded by `seed`: per (token, kv head) the top-min(slots, causal blocks) of uniform scores
    over the causal blocks (a uniformly random subset), padded with -1, then the slots shuffled. Chunked
    over tokens so the scores stay SEL_INDEX_CHUNK_TOKENS x heads_kv x num_blocks."""
    num_blocks = sel_num_blocks(seqlen, block_size)
    picks = min(slots, num_blocks)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    idx = torch.empty(seqlen, heads_kv, slots, dtype=torch.int32, device=device)
    blocks = torch.arange(num_blocks, device=device)
    for t0 in range(0, seqlen, SEL_INDEX_CHUNK_TOKENS):
        t1 = min(seqlen, t0 + SEL_INDEX_CHUNK_TOKENS)
        last_causal = torch.arange(t0, t1, device=device) // block_size
        score = torch.rand(t1 - t0, heads_kv, num_blocks, generator=gen, device=device)
        score.masked_fill_((blocks[None, :] > last_causal[:, None])[:, None, :], -1.0)  # rand is in [0, 1)
        top_score, top_block = score.topk(picks, dim=-1)
        chosen = torch.where(top_score >= 0, top_block, torch.full_like(top_block, -1))
        if picks < slots:
            chosen = torch.cat([chosen, chosen.new_full((t1 - t0, heads_kv, slots - picks), -1)], dim=-1)
        order = torch.rand(t1 - t0, heads_kv, slots, generator=gen, device=device).argsort(dim=-1)
        idx[t0:t1] = chosen.gather(-1, order).to(torch.int32)
    return idx


def sel_nsa_block_rows(distribution, seqlen, heads_kv, slots, block_size, seed):
    """block_idx of an NSA distribution (SEL_INDEX_DISTRIBUTIONS) as nested lists [seqlen][heads_kv][slots],
    -1 for an empty slot, drawn with Python's Mersenne Twister seeded by `seed` (the same on every machine,
    no torch: the self-check runs it). Both sort a row's blocks ascending with the -1 slots last, as the
    public repository's benchmark does (torch.sort of its top-k). nsa-fixed: block 0, the token's own
    block and the one before (distinct, causal), then distinct causal blocks uniformly at random up to the
    slots. nsa-topk, that benchmark's draw: `slots` distinct blocks uniformly over all of the sequence's
    blocks (the top-k of random scores), sorted, the first replaced by block 0, and each one after the
    token's own block replaced by -1."""
    if distribution not in ("nsa-fixed", "nsa-topk"):
        raise ValueError(f"unknown NSA index distribution {distribution!r}")
    rng = random.Random(seed)
    num_blocks = sel_num_blocks(seqlen, block_size)
    rows = []
    for t in range(seqlen):
        own = t // block_size
        heads = []
        for _ in range(heads_kv):
            if distribution == "nsa-fixed":
                fixed = {b for b in (0, own, own - 1) if b >= 0}
                rest = range(1, max(1, own - 1))  # the causal blocks not fixed
                picks = sorted(fixed | set(rng.sample(rest, min(len(rest), slots - len(fixed)))))
            else:
                picks = sorted(rng.sample(range(num_blocks), min(num_blocks, slots)))
                picks[0] = 0
                picks = [b for b in picks if b <= own]
            heads.append(picks + [-1] * (slots - len(picks)))
        rows.append(heads)
    return rows


def sel_nsa_distribution_problems():
    """Self-check of sel_nsa_block_rows (no torch): what each NSA distribution promises, on 2048 tokens
    (32 blocks of 64) and heads_kv 2; and that sel_cases gives every distribution its rows."""
    problems = []
    n, h, s, bs = 2048, 2, SEL_SLOTS, SEL_BLOCK_SIZE
    nb = sel_num_blocks(n, bs)
    fixed = sel_nsa_block_rows("nsa-fixed", n, h, s, bs, 11)
    topk = sel_nsa_block_rows("nsa-topk", n, h, s, bs, 11)
    if (fixed != sel_nsa_block_rows("nsa-fixed", n, h, s, bs, 11)
            or topk != sel_nsa_block_rows("nsa-topk", n, h, s, bs, 11)):
        problems.append("not repeatable")
    if fixed == sel_nsa_block_rows("nsa-fixed", n, h, s, bs, 12):
        problems.append("nsa-fixed ignores its seed")
    valid_topk = 0
    for t in range(n):
        own = t // bs
        for hh in range(h):
            f, k = fixed[t][hh], topk[t][hh]
            if len(f) != s or len(k) != s:
                problems.append(f"({t}, {hh}): not {s} slots")
                return problems
            fv = [b for b in f if b >= 0]
            want = min(s, own + 1)
            if len(fv) != want or len(set(fv)) != len(fv) or any(b > own for b in fv):
                problems.append(f"nsa-fixed ({t}, {hh}): {f} is not {want} distinct causal blocks")
                return problems
            must = {b for b in (0, own, own - 1) if b >= 0}
            if not must <= set(fv) or fv != sorted(fv):
                problems.append(f"nsa-fixed ({t}, {hh}): {f} lacks the fixed blocks {sorted(must)} or is not sorted")
                return problems
            if f[len(fv):] != [-1] * (s - len(fv)):
                problems.append(f"nsa-fixed ({t}, {hh}): -1 slots before valid ones")
                return problems
            kv = [b for b in k if b >= 0]
            if (k[0] != 0 or len(set(kv)) != len(kv) or any(b > own for b in kv) or any(b >= nb for b in kv)
                    or kv != sorted(kv) or k[len(kv):] != [-1] * (s - len(kv))):
                problems.append(f"nsa-topk ({t}, {hh}): {k}")
                return problems
            valid_topk += len(kv)
    # 16 of the 32 blocks (block 0 forced): at token t about 1 + 15 * own / 31 valid, ~8.3 on average here.
    mean = valid_topk / (n * h)
    if not 7.5 < mean < 9.0:
        problems.append(f"nsa-topk: {mean:.2f} valid slots per row, expected about 8.3")
    cases = list(sel_cases("sel_fwd", True))
    if sorted({c["index_distribution"] for c in cases}) != sorted(SEL_INDEX_DISTRIBUTIONS):
        problems.append("sel_cases does not give every distribution its rows")
    return problems


def sel_block_indices_for(case, seed, device):
    """block_idx int32 [seqlen, heads_kv, slots] of the case's index_distribution."""
    dist = case.get("index_distribution", SEL_INDEX_DISTRIBUTION)
    n, hkv, slots, bs = case["seqlen"], case["heads_kv"], case["slots"], case["block_size"]
    if dist == "uniform-causal":
        return sel_block_indices(n, hkv, slots, bs, seed, device)
    return torch.tensor(sel_nsa_block_rows(dist, n, hkv, slots, bs, seed), dtype=torch.int32, device=device)


def sel_valid_slots(idx, positions, block_size, seqlen_k):
    """Which slots of idx [c, H, S] (int64) count for tokens at key positions [c]: aotk.h's B(t, h)."""
    return (idx >= 0) & (idx < sel_num_blocks(seqlen_k, block_size)) & (idx * block_size <= positions[:, None, None])


def sel_selected_keys(block_idx, block_size, seqlen_k):
    """|J(t, h)| int64 [seqlen_q, heads_kv] from block_idx (one sequence, bottom-right aligned)."""
    seqlen_q = block_idx.shape[0]
    counts = torch.empty(block_idx.shape[:2], dtype=torch.int64, device=block_idx.device)
    for t0 in range(0, seqlen_q, SEL_INDEX_CHUNK_TOKENS):
        t1 = min(seqlen_q, t0 + SEL_INDEX_CHUNK_TOKENS)
        b = block_idx[t0:t1].long()
        p = torch.arange(t0, t1, device=b.device) + (seqlen_k - seqlen_q)
        hi = torch.clamp(torch.minimum((b + 1) * block_size, p[:, None, None] + 1), max=seqlen_k)
        keys = (hi - b * block_size).clamp(min=0) * sel_valid_slots(b, p, block_size, seqlen_k)
        counts[t0:t1] = keys.sum(-1)
    return counts


def sel_sample_tokens(seqlen, block_size, count, seed):
    """count tokens spread over the sequence: the edges (0, 1, the last of the first block, the first of
    the second, the last token) and one random token in each of the remaining equal strata."""
    rng = random.Random(seed + seqlen)
    edges = sorted({t for t in (0, 1, block_size - 1, block_size, seqlen - 1) if 0 <= t < seqlen})
    strata = max(1, count - len(edges))
    picks = [rng.randrange(i * seqlen // strata, max(i * seqlen // strata + 1, (i + 1) * seqlen // strata))
             for i in range(strata)]
    return sorted(set(edges + [t for t in picks if t < seqlen]))


def sel_tensors(case, backward):
    """A row's inputs and outputs in aotk.h's packed layout, one sequence of case['seqlen'] tokens."""
    n, hq, hkv, d = case["seqlen"], case["heads_q"], case["heads_kv"], case["head_dim"]
    dt = torch.bfloat16
    t = {"q": torch.randn(n, hq, d, device=DEVICE, dtype=dt),
         "k": torch.randn(n, hkv, d, device=DEVICE, dtype=dt),
         "v": torch.randn(n, hkv, d, device=DEVICE, dtype=dt),
         "out": torch.empty(n, hq, d, device=DEVICE, dtype=dt),
         "lse": torch.empty(n, hq, device=DEVICE, dtype=torch.float32),
         "block_idx": sel_block_indices_for(case, SEL_INDEX_SEED + n, DEVICE)}
    if backward:
        t["dout"] = torch.randn_like(t["out"])
        for name in ("q", "k", "v"):
            t["d" + name] = torch.empty_like(t[name])
    return t


def sel_params(case, t):
    """aotk_sel_params for the row's tensors t (the backward's fields where t has them). No cu_seqlens:
    q and k form one sequence; block_cnt absent: every slot is read."""
    p = AotkSelParams()
    p.struct_size = ctypes.sizeof(AotkSelParams)
    for name in ("q", "k", "v", "out", "lse", "block_idx", "dout", "dq", "dk", "dv"):
        if name in t:
            setattr(p, name, describe_tensor(t[name].detach()))
    p.max_seqlen_k = t["k"].shape[0]  # ignored without cu_seqlens
    p.block_size = case["block_size"]
    p.softmax_scale = 0.0  # 1/sqrt(head_dim), as the references and SDPA use
    return p


def sel_reference_masked(x, block_idx, block_size, compute_dtype, dout=None, cut_at_diagonal=True):
    """Selection attention over every token of x = {"q" [T, HQ, Dqk], "k" [Tk, H, Dqk], "v" [Tk, H, Dv]}
    as dense attention with a mask: for each chunk of SEL_REFERENCE_CHUNK queries, the [HQ, chunk, Tk]
    scores of all keys, masked to the union of each token's valid blocks (aotk.h's B(t, h)) cut at its
    position; no gathering. Matmuls in compute_dtype, the rest in float32. Returns (out [T, HQ, Dv],
    lse [T, HQ], grads): float32; grads {"dq", "dk", "dv"} (float32, through autograd chunk by chunk) when
    dout is given, else None. A token that sees no key gets out 0, lse -inf and no gradient.
    cut_at_diagonal=False is a wrong kernel (the whole diagonal block), for the self-check's mutant."""
    seqlen_q, heads_q, head_dim = x["q"].shape
    seqlen_k, heads_kv = x["k"].shape[:2]
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(head_dim)
    num_blocks = sel_num_blocks(seqlen_k, block_size)
    device = x["q"].device
    grad = dout is not None
    leaves = {n: x[n].detach().float().requires_grad_(grad) for n in ("q", "k", "v")}
    keys = torch.arange(seqlen_k, device=device)
    outs, lses = [], []
    with torch.set_grad_enabled(grad):
        for t0 in range(0, seqlen_q, SEL_REFERENCE_CHUNK):
            t1 = min(seqlen_q, t0 + SEL_REFERENCE_CHUNK)
            b = block_idx[t0:t1].long()
            p = torch.arange(t0, t1, device=device) + (seqlen_k - seqlen_q)
            valid = sel_valid_slots(b, p, block_size, seqlen_k)
            hits = torch.zeros(t1 - t0, heads_kv, num_blocks, dtype=torch.int32, device=device)
            hits.scatter_add_(2, b.clamp(0, num_blocks - 1), valid.to(torch.int32))
            visible = (hits > 0).repeat_interleave(block_size, dim=2)[:, :, :seqlen_k]
            if cut_at_diagonal:
                visible &= keys[None, None, :] <= p[:, None, None]
            visible = visible.repeat_interleave(group, dim=1).transpose(0, 1)  # [HQ, chunk, Tk]
            qc = leaves["q"][t0:t1].to(compute_dtype).transpose(0, 1)
            kh = leaves["k"].to(compute_dtype).transpose(0, 1).repeat_interleave(group, dim=0)
            vh = leaves["v"].to(compute_dtype).transpose(0, 1).repeat_interleave(group, dim=0)
            s = torch.matmul(qc, kh.transpose(-1, -2)).float() * scale
            s = s.masked_fill(~visible, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            finite_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
            prob = torch.exp(s - finite_lse.unsqueeze(-1))
            out = torch.matmul(prob.to(compute_dtype), vh).float().transpose(0, 1)
            if grad:
                torch.autograd.backward(out, dout[t0:t1].float())
            outs.append(out.detach())
            lses.append(lse.detach().transpose(0, 1))
    grads = {"d" + n: leaves[n].grad for n in ("q", "k", "v")} if grad else None
    return torch.cat(outs, 0), torch.cat(lses, 0), grads


def sel_reference_gathered(x, block_idx, tokens, block_size, compute_dtype, dout=None):
    """Selection attention for the listed tokens only, literally: per (token, kv head) the key rows of
    J(t, h) (sel_key_positions) gathered, softmax in float32. Matmuls in compute_dtype. Returns out
    [n, HQ, Dv], lse [n, HQ] and, with dout [n, HQ, Dv], dq [n, HQ, Dqk] through autograd (a token's dq
    depends on its own row only, so the sample's dq is exact); float32."""
    seqlen_q, heads_q, head_dim = x["q"].shape
    seqlen_k, heads_kv = x["k"].shape[:2]
    head_dim_v = x["v"].shape[2]
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(head_dim)
    device = x["q"].device
    rows = block_idx[torch.tensor(tokens, device=block_idx.device)].tolist()
    q_leaf = x["q"][torch.tensor(tokens, device=device)].detach().float().requires_grad_(dout is not None)
    outs, lses = [], []
    with torch.set_grad_enabled(dout is not None):
        for i, t in enumerate(tokens):
            for h in range(heads_kv):
                positions = sel_key_positions(rows[i][h], t + seqlen_k - seqlen_q, block_size, seqlen_k)
                qg = q_leaf[i, h * group:(h + 1) * group].to(compute_dtype)
                if not positions:  # out 0, lse -inf, dq 0 (0 * q keeps q in the graph for autograd.grad)
                    outs.append(torch.zeros(group, head_dim_v, device=device) + 0 * qg.float().sum())
                    lses.append(torch.full((group,), float("-inf"), device=device))
                    continue
                j = torch.tensor(positions, device=device)
                kj = x["k"][j, h].detach().to(compute_dtype)
                vj = x["v"][j, h].detach().to(compute_dtype)
                s = torch.matmul(qg, kj.t()).float() * scale
                lse = torch.logsumexp(s, dim=-1)
                outs.append(torch.matmul(torch.exp(s - lse[:, None]).to(compute_dtype), vj).float())
                lses.append(lse.detach())
        out = torch.stack(outs).view(len(tokens), heads_q, head_dim_v)
        lse = torch.stack(lses).view(len(tokens), heads_q)
        dq = torch.autograd.grad(out, q_leaf, dout.float())[0] if dout is not None else None
    return out.detach(), lse, dq


def sel_unselected_key_rows(block_idx, block_size, seqlen_k):
    """bool [heads_kv, seqlen_k]: key rows that no token's valid slot selects (their dk, dv must be 0)."""
    num_blocks = sel_num_blocks(seqlen_k, block_size)
    seqlen_q, heads_kv = block_idx.shape[:2]
    hits = torch.zeros(heads_kv, num_blocks, dtype=torch.int64, device=block_idx.device)
    for t0 in range(0, seqlen_q, SEL_INDEX_CHUNK_TOKENS):
        t1 = min(seqlen_q, t0 + SEL_INDEX_CHUNK_TOKENS)
        b = block_idx[t0:t1].long()
        p = torch.arange(t0, t1, device=b.device) + (seqlen_k - seqlen_q)
        valid = sel_valid_slots(b, p, block_size, seqlen_k)
        hits.scatter_add_(1, b.clamp(0, num_blocks - 1).transpose(0, 1).reshape(heads_kv, -1),
                          valid.transpose(0, 1).reshape(heads_kv, -1).long())
    return (hits == 0)[:, torch.arange(seqlen_k, device=block_idx.device) // block_size]


def sel_check_full(case, aotk, backward):
    """Every token of a SEL_FULL_CHECK_TOKENS-token problem (the row's heads, head dim, block size, slots
    and index distribution): aotk's out and lse (sel_bwd: dq, dk, dv) against sel_reference_masked in
    float32, within FWD_ERR_FACTOR (BWD_ERR_FACTOR) x the same reference's error in bf16 plus a rounding
    floor. Outputs NaN-poisoned first. Returns (failure or None, summary)."""
    c = dict(case, seqlen=min(case["seqlen"], SEL_FULL_CHECK_TOKENS))
    t = sel_tensors(c, backward)
    params = sel_params(c, t)
    t["out"].fill_(float("nan"))
    t["lse"].fill_(float("nan"))
    aotk.sel_fwd(ctypes.byref(params), current_stream())
    if backward:
        for name in ("dq", "dk", "dv"):
            t[name].fill_(float("nan"))
        info = aotk.sel_query(AOTK_OP_SEL_BWD, params)
        workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
        aotk.sel_bwd(ctypes.byref(params), workspace.data_ptr(), info["workspace_bytes"], current_stream())
    synchronize()
    x = {n: t[n] for n in ("q", "k", "v")}
    bs = c["block_size"]
    if not backward:
        out32, lse32, _ = sel_reference_masked(x, t["block_idx"], bs, torch.float32)
        out16, lse16, _ = sel_reference_masked(x, t["block_idx"], bs, torch.bfloat16)
        results = [compare_to_reference("out", t["out"], out32, out16, FWD_ERR_FACTOR, bf16_rounding_floor(out32)),
                   compare_to_reference("lse", t["lse"], lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
    else:
        _, _, g32 = sel_reference_masked(x, t["block_idx"], bs, torch.float32, dout=t["dout"])
        _, _, g16 = sel_reference_masked(x, t["block_idx"], bs, torch.bfloat16, dout=t["dout"])
        results = [compare_to_reference(n, t[n], g32[n], g16[n], BWD_ERR_FACTOR, bf16_rounding_floor(g32[n]))
                   for n in ("dq", "dk", "dv")]
    texts = [text for _, text in results]
    bad = [text for ok, text in results if not ok]
    summary = f"all {c['seqlen']} tokens against the masked float32 reference: " + ", ".join(texts)
    if bad:
        return "aotk differs from the masked float32 reference on every token of " \
            f"{c['seqlen']}: " + ", ".join(bad), summary
    return None, summary


def sel_check_row(case, aotk, backward, t, params):
    """On the row's own tensors: the library's index check (aotk_sel_check_indices), then aotk's sel_fwd
    (and sel_bwd) with NaN-poisoned outputs: every element written; out and lse (sel_bwd: dq) of
    SEL_SAMPLE_TOKENS tokens against sel_reference_gathered; sel_bwd: dk and dv exactly 0 on the key rows
    no token selected. Leaves out and lse (the backward's inputs) computed. Returns (failure or None, summary)."""
    params_ref = ctypes.byref(params)
    workspace = torch.empty(16, device=DEVICE, dtype=torch.uint8)
    try:
        aotk.sel_check_indices(params_ref, workspace.data_ptr(), 16, current_stream())
    except AotkError as e:
        return f"the library rejects the benchmark's indices: {e}", ""
    outputs = ["out", "lse"] + (["dq", "dk", "dv"] if backward else [])
    for name in outputs:
        t[name].fill_(float("nan"))
    aotk.sel_fwd(params_ref, current_stream())
    if backward:
        info = aotk.sel_query(AOTK_OP_SEL_BWD, params)
        workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
        aotk.sel_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
    synchronize()
    unwritten = [name for name in outputs if torch.isnan(t[name]).any().item()]
    if unwritten:
        return f"aotk left NaN (poison) in {', '.join(unwritten)}", ""
    tokens = sel_sample_tokens(case["seqlen"], case["block_size"], SEL_SAMPLE_TOKENS, SEL_SAMPLE_SEED)
    rows = torch.tensor(tokens, device=DEVICE)
    x = {n: t[n] for n in ("q", "k", "v")}
    bs = case["block_size"]
    if not backward:
        out32, lse32, _ = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.float32)
        out16, lse16, _ = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.bfloat16)
        results = [compare_to_reference("out", t["out"][rows], out32, out16, FWD_ERR_FACTOR,
                                        bf16_rounding_floor(out32)),
                   compare_to_reference("lse", t["lse"][rows], lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
    else:
        dout = t["dout"][rows]
        _, _, dq32 = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.float32, dout=dout)
        _, _, dq16 = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.bfloat16, dout=dout)
        results = [compare_to_reference("dq", t["dq"][rows], dq32, dq16, BWD_ERR_FACTOR, bf16_rounding_floor(dq32))]
        unselected = sel_unselected_key_rows(t["block_idx"], bs, t["k"].shape[0])
        for name in ("dk", "dv"):
            stray = t[name].transpose(0, 1)[unselected].abs().max().item() if unselected.any() else 0.0
            results.append((stray == 0, f"{name} on {int(unselected.sum())} unselected key rows {stray:.2g}"))
    texts = [text for _, text in results]
    bad = [text for ok, text in results if not ok]
    summary = f"{len(tokens)} sampled tokens against the gathered float32 reference: " + ", ".join(texts)
    if bad:
        return f"aotk differs from the gathered float32 reference on {len(tokens)} sampled tokens: " \
            + ", ".join(bad), summary
    return None, summary


def sel_anchor_times(t, backward):
    """({impl: ms}, {impl: layout}): SDPA's flash and cuDNN backends doing dense causal attention on the
    row's q, k, v (sdpa_anchor_times on [1, N, heads, d] views)."""
    dout = t["dout"][None] if backward else None
    return sdpa_anchor_times(t["q"][None], t["k"][None], t["v"][None], True, dout, SEL_ANCHORS)


# The public NSA Triton kernel (XunhaoLai/native-sparse-attention-triton, Apache-2.0,
# native_sparse_attention/ops/triton/topk_sparse_attention.py), issue 12's anchor: --nsa-path names a
# checkout of that repository in a folder git ignores (its code is never committed here). Only aotk's rows
# and the ratios are recorded.
NSA_OPTIONS = {"path": None, "fn": None}
NSA_CHECK_TOL = 2e-2  # relative L2 between its out / dq, dk, dv and aotk's (both bf16 with fp32 softmax)


def load_public_nsa(path):
    """topk_sparse_attention from the checkout at `path`: its two modules loaded by file, under their own
    names, without the package __init__ (which imports modules that need flash_attn)."""
    import importlib.util
    import types
    base = os.path.join(path, "native_sparse_attention", "ops", "triton")
    for name in ("native_sparse_attention", "native_sparse_attention.ops", "native_sparse_attention.ops.triton"):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package
    for short in ("utils", "topk_sparse_attention"):
        full = "native_sparse_attention.ops.triton." + short
        spec = importlib.util.spec_from_file_location(full, os.path.join(base, short + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules["native_sparse_attention.ops.triton.topk_sparse_attention"].topk_sparse_attention


def sel_public_nsa(case, t, backward, aotk_out, aotk_grads):
    """Times the public kernel on the row's q, k, v and indices (its layout: topk_idx [heads_kv, N, slots],
    cu_seqlens [0, N]) after checking its out (and dq, dk, dv) against aotk's. Returns (ms or None, note)."""
    fn = NSA_OPTIONS["fn"]
    n = case["seqlen"]
    # The public kernel reads a row's valid slots first (it counts them, then walks that many slots), as its
    # own selection produces them: each row's blocks ascending with -1 last, the same set of blocks (the
    # uniform-causal draw shuffles its -1 slots among the blocks; the NSA draws are already sorted).
    idx = t["block_idx"]
    ordered = torch.where(idx < 0, torch.full_like(idx, 2 ** 30), idx).sort(dim=-1).values
    topk_idx = torch.where(ordered == 2 ** 30, torch.full_like(ordered, -1), ordered).permute(1, 0, 2).contiguous()
    cu = torch.tensor([0, n], dtype=torch.int32, device=DEVICE)
    q, k, v = (t[x].detach().clone().requires_grad_(backward) for x in ("q", "k", "v"))
    out = fn(q, k, v, topk_idx, case["block_size"], cu)
    errs = {"out": rel_l2(out, aotk_out)}
    if backward:
        grads = torch.autograd.grad(out, (q, k, v), t["dout"], retain_graph=True)
        errs.update({name: rel_l2(g, aotk_grads[name]) for name, g in zip(("dq", "dk", "dv"), grads)})
    text = ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items())
    if not all(e_ < NSA_CHECK_TOL for e_ in errs.values()):
        return None, f"the public NSA kernel differs from aotk (relative L2 {text}): not timed"
    if backward:
        ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), t["dout"], retain_graph=True))
    else:
        with torch.no_grad():
            ms = time_ms(lambda: fn(q, k, v, topk_idx, case["block_size"], cu))
    return ms, f"public NSA kernel checked against aotk: relative L2 {text}"


def sel_run_case(case, aotk):
    """sel_run_case_unguarded, with any exception turned into the row's failure."""
    try:
        return sel_run_case_unguarded(case, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {sel_label(case)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", {}


def sel_run_case_unguarded(case, aotk):
    """Checks aotk (sel_check_full, then sel_check_row on the row's tensors), times it, then times the
    dense causal anchors on the same q, k, v. Returns ({impl: ms}, failure or None, facts): facts has
    keys_selected (sum of |J(t, h)|), aotk's kernel info and the anchors' layouts."""
    backward = case["op"] == "sel_bwd"
    facts = {}
    for check in ("full", "row"):
        if check == "row":
            t = sel_tensors(case, backward)
            facts["keys_selected"] = int(sel_selected_keys(t["block_idx"], case["block_size"], case["seqlen"]).sum())
            params = sel_params(case, t)
        try:
            if check == "full":
                failure, summary = sel_check_full(case, aotk, backward)
            else:
                failure, summary = sel_check_row(case, aotk, backward, t, params)
        except AotkError as e:
            loud(f"aotk FAILED on {sel_label(case)}: {e}")
            return {}, f"aotk raised in the check: {e}", facts
        if failure:
            loud(f"ROW ABORTED, {sel_label(case)}: {failure}")
            return {}, failure, facts
        note(summary)
        empty_cache()

    results = {}
    params_ref = ctypes.byref(params)
    try:
        if not backward:
            info = aotk.sel_query(AOTK_OP_SEL_FWD, params)
            results["aotk"] = time_ms(lambda: aotk.sel_fwd(params_ref, current_stream()))
        else:  # out and lse: the forward's, from sel_check_row
            info = aotk.sel_query(AOTK_OP_SEL_BWD, params)
            workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
            results["aotk"] = time_ms(lambda: aotk.sel_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"],
                                                           current_stream()))
            del workspace
    except AotkError as e:
        loud(f"aotk FAILED while timing {sel_label(case)}: {e}")
        return results, f"aotk raised while timing: {e}", facts
    facts["info"] = info
    note(f"aotk kernel {info['kernel_name']} (sm_{info['arch']}{', from PTX' if info['from_ptx'] else ''}, "
         f"{info['launches']} launch(es)" + (f", workspace {info['workspace_bytes']} bytes" if backward else "") + ")")
    if NSA_OPTIONS["fn"] is not None:
        # aotk's out (and gradients) from the check are the reference the public kernel must match.
        ms, text = sel_public_nsa(case, t, backward, t["out"], {name: t[name] for name in ("dq", "dk", "dv")
                                                                if name in t})
        note(text)
        if ms is not None:
            results["nsa-triton"] = ms
        empty_cache()
    for name in ("out", "lse", "dq", "dk", "dv", "block_idx"):
        t.pop(name, None)
    del params, params_ref
    empty_cache()
    anchor_ms, facts["anchor_layouts"] = sel_anchor_times(t, backward)
    results.update(anchor_ms)
    del t
    return results, None, facts


def sel_work(case, keys_selected):
    """(pairs, flops) of aotk's selection: pairs = (heads_q / heads_kv) x sum of |J(t, h)| score pairs;
    FLOPs = 4 x pairs x head_dim (q.k and p.v, a multiply-add each: 4 * tokens * heads_q * keys * d), 2.5x
    that for the backward."""
    pairs = keys_selected * (case["heads_q"] // case["heads_kv"])
    flops = 4.0 * pairs * case["head_dim"]
    return pairs, (2.5 * flops if case["op"] == "sel_bwd" else flops)


def sel_dense_work(case):
    """(pairs, flops) of the dense causal anchors: the exact causal pairs, and anchors.md's FLOP count
    (4 * heads * N^2 * d, halved for causal; 2.5x for the backward), as the grid rows count."""
    n, h, d = case["seqlen"], case["heads_q"], case["head_dim"]
    flops = 4.0 * h * n * n * d / 2
    return h * n * (n + 1) // 2, (2.5 * flops if case["op"] == "sel_bwd" else flops)


def sel_gathered_bytes(case, keys_selected):
    """The forward's bytes if every gathered K/V row came from memory: q read, out and lse written, the
    indices read, (head_dim_qk + head_dim_v) bf16 per key of each (token, kv head) (its G query heads share
    one gather). Neighbouring tokens share blocks, so the DRAM traffic can be lower (L2 hits)."""
    n, hq, hkv, d = case["seqlen"], case["heads_q"], case["heads_kv"], case["head_dim"]
    return 2 * n * hq * d * 2 + n * hq * 4 + n * hkv * case["slots"] * 4 + keys_selected * 2 * d * 2


def sel_verdict(op, seqlen, speedup, distribution=SEL_INDEX_DISTRIBUTION):
    """None where no bar applies (issue 5's bars are on its own draw, uniform-causal); '-' when not
    measured; else 'ok' / 'LOW' against SEL_BARS."""
    bar = SEL_BARS.get((op, seqlen)) if distribution == SEL_INDEX_DISTRIBUTION else None
    if bar is None:
        return None
    if speedup is None:
        return "-"
    minimum, strict = bar
    return "ok" if (speedup > minimum if strict else speedup >= minimum) else "LOW"


def sel_bar_text(op, seqlen, distribution=SEL_INDEX_DISTRIBUTION):
    bar = SEL_BARS.get((op, seqlen)) if distribution == SEL_INDEX_DISTRIBUTION else None
    return "-" if bar is None else f"{'>' if bar[1] else '>='}{bar[0]:g}x"


SEL_TABLE_HEAD = (f"{'op':>7} {'indices':>14} {'tokens':>6} {'keys/q':>7} | {'aotk ms':>8} {'TF/s':>6} | "
                  f"{'flash ms':>9} {'cudnn ms':>9} | {'x FA2':>6} {'x cuDNN':>7} {'x NSA':>6} | {'bar':>6} {'verdict':>7}")


def sel_table_line(case, ms, keys_selected, speedup, failure):
    keys_per_query = keys_selected / (case["seqlen"] * case["heads_kv"]) if keys_selected else None
    dist = case.get("index_distribution", SEL_INDEX_DISTRIBUTION)
    s = (f"{case['op']:>7} {dist:>14} {case['seqlen']:>6} "
         + (f"{keys_per_query:>7.1f}" if keys_per_query else f"{'-':>7}"))
    if "aotk" in ms:
        s += f" | {ms['aotk']:>8.3f} {sel_work(case, keys_selected)[1] / ms['aotk'] / 1e9:>6.1f}"
    else:
        s += f" | {'-':>8} {'-':>6}"
    s += " | " + " ".join(f"{ms[name]:>9.2f}" if name in ms else f"{'-':>9}" for name in SEL_IMPLS[1:])
    s += " | " + " ".join(f"{speedup[name]:>{w - 1}.2f}x" if speedup.get(name) else f"{'-':>{w}}"
                          for name, w in (("sdpa-flash", 6), ("sdpa-cudnn", 7), ("nsa-triton", 6)))
    s += (f" | {sel_bar_text(case['op'], case['seqlen'], dist):>6} "
          f"{sel_verdict(case['op'], case['seqlen'], speedup.get('sdpa-flash'), dist) or '':>7}")
    if failure:
        s += f"   FAILED: {failure}"
    return s


def run_sel_op(op, quick, aotk):
    """Runs one selection op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures = [], [], []
    verdicts = []
    for case in sel_cases(op, quick):
        print(f"\n{sel_label(case)}", flush=True)
        ms, failure, facts = sel_run_case(case, aotk)
        empty_cache()
        keys_selected = facts.get("keys_selected")
        speedup = {name: ms[name] / ms["aotk"] for name in SEL_IMPLS[1:] + ["nsa-triton"]
                   if name in ms and "aotk" in ms}
        common = {"op": op, "dtype": case["dtype"], "head_dim": case["head_dim"], "head_dim_qk": case["head_dim"],
                  "head_dim_v": case["head_dim"], "causal": True, "seqlen_q": case["seqlen"],
                  "seqlen_k": case["seqlen"], "batch": 1, "heads_q": case["heads_q"], "heads_kv": case["heads_kv"],
                  "block_size": case["block_size"], "slots": case["slots"],
                  "index_distribution": case["index_distribution"], "index_seed": SEL_INDEX_SEED + case["seqlen"]}
        for impl in SEL_IMPLS:
            if impl not in ms:
                continue
            if impl == "aotk":
                pairs, flops = sel_work(case, keys_selected)
                row = dict(common, impl=impl, work="selection", keys_selected=keys_selected,
                           keys_per_query=round(keys_selected / (case["seqlen"] * case["heads_kv"]), 2),
                           pairs=pairs, flops=flops, ms=ms[impl], tflops=round(flops / ms[impl] / 1e9, 2),
                           speedup_vs_flash=round(speedup["sdpa-flash"], 3) if "sdpa-flash" in speedup else None,
                           speedup_vs_cudnn=round(speedup["sdpa-cudnn"], 3) if "sdpa-cudnn" in speedup else None)
                # Issue 12's anchor: only the ratio is recorded (the public kernel's own row is not).
                if "nsa-triton" in speedup:
                    row["speedup_vs_nsa_triton"] = round(speedup["nsa-triton"], 3)
                bar = (SEL_BARS.get((op, case["seqlen"])) if case["index_distribution"] == SEL_INDEX_DISTRIBUTION
                       else None)
                row["bar_vs_flash"] = None if bar is None else {"speedup": bar[0], "strict": bar[1]}
                row["verdict"] = sel_verdict(op, case["seqlen"], speedup.get("sdpa-flash"), case["index_distribution"])
                if op == "sel_fwd":
                    row["gathered_bytes"] = sel_gathered_bytes(case, keys_selected)
                    row["gbps"] = round(row["gathered_bytes"] / ms[impl] / 1e6, 1)
                info = facts.get("info")
                if info is not None:
                    row["kernel"] = info["kernel_name"]
                    row["launches"] = info["launches"]
                    if op == "sel_bwd":
                        row["workspace_bytes"] = info["workspace_bytes"]
            else:
                pairs, flops = sel_dense_work(case)
                row = dict(common, impl=impl, work="dense causal", gqa=facts.get("anchor_layouts", {}).get(impl),
                           pairs=pairs, flops=flops, ms=ms[impl], tflops=round(flops / ms[impl] / 1e9, 2))
            rows.append(row)
        if failure:
            failures.append(f"{sel_label(case)}: {failure}")
        verdict = sel_verdict(op, case["seqlen"], speedup.get("sdpa-flash"), case["index_distribution"])
        if verdict is not None:
            got = f"{speedup['sdpa-flash']:.2f}x" if "sdpa-flash" in speedup else "not measured"
            verdicts.append((verdict, f"{op} {case['seqlen']} tokens: {got} (bar {sel_bar_text(op, case['seqlen'])}): "
                                      + {"ok": "ok", "LOW": "LOW", "-": "not measured"}[verdict]))
        line = sel_table_line(case, ms, keys_selected, speedup, failure)
        lines.append(line)
        print(SEL_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bars (aotk's speedup over sdpa-flash's dense causal attention on the same q, k, v): "
           f"{sum(1 for v_, _ in verdicts if v_ == 'ok')} of {len(verdicts)} pass"]
    bar += [f"  {text}" for _, text in verdicts]
    return rows, lines, failures, bar


def print_sel_table(lines, bar_lines):
    print(f"\nSelection rows: one sequence, heads {SEL_HEADS_Q}/{SEL_HEADS_KV}, d {SEL_HEAD_DIM}, block "
          f"{SEL_BLOCK_SIZE}, {SEL_SLOTS} slots, indices as the column says (issue 5's bars on uniform-causal "
          f"only); keys/q = mean |J(t, h)|; aotk's "
          f"TF/s counts the pairs it computes (4 * pairs * d, backward 2.5x); flash and cudnn run dense causal "
          f"attention on the same q, k, v; 'x FA2' / 'x cuDNN' = their time / aotk's")
    print(SEL_TABLE_HEAD)
    print("-" * len(SEL_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------------
# FlexAttention (torch.nn.attention.flex_attention) as a column: the new rows below, and the grid with --flex
# ---------------------------------------------------------------------------------------------------
#
# flex_attention is wrapped once with torch.compile(dynamic=False): Dynamo compiles it again for each new
# (shape, mask, grad mode) the process meets, as a model with fixed shapes would, so every row gets kernels
# specialized to its sizes (no dynamic-shape kernel whose speed would depend on the order of the rows).
# The compile happens in the row's check call, before anything of flex is timed, and its time is printed.
# Flex gets contiguous [b, h, s, d] copies of the row's q, k, v (its native layout; made outside the
# timing) and a block mask made once per row by create_block_mask (128 x 128 blocks). Its output (the
# backward: its dq, dk, dv) is compared with the row's reference before it is timed, so a mask written
# wrong is reported, not timed on different work.

FLEX_RECOMPILE_LIMIT = 512  # one compile per (shape, mask, grad mode): the grid with --flex needs ~150
FLEX_OPTIONS = {"rows": True, "grid": False}  # --no-flex clears "rows"; --flex sets "grid"
_FLEX = {}


def flex_module():
    """(flex_attention under torch.compile, create_block_mask); raises where torch has no FlexAttention."""
    if "fn" not in _FLEX:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        cfg = torch._dynamo.config
        limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, limit, max(getattr(cfg, limit), FLEX_RECOMPILE_LIMIT))
        if hasattr(cfg, "accumulated_recompile_limit"):
            cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 8 * FLEX_RECOMPILE_LIMIT)
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        _FLEX["create_block_mask"] = create_block_mask
    return _FLEX["fn"], _FLEX["create_block_mask"]


def flex_causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx  # seqlen_q = seqlen_k wherever it is used: aotk's bottom-right = SDPA's top-left


def flex_document_mask(doc_ids, causal):
    """mask_mod of packed documents: a query sees the keys of its own document (doc_ids int32 [tokens]),
    and with causal only those at or before it."""
    if causal:
        def mask_mod(b, h, q_idx, kv_idx):
            return (doc_ids[q_idx] == doc_ids[kv_idx]) & (q_idx >= kv_idx)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return doc_ids[q_idx] == doc_ids[kv_idx]
    return mask_mod


def flex_block_mask(mask_mod, tokens):
    _, create_block_mask = flex_module()
    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=tokens, KV_LEN=tokens, device=DEVICE)


def to_bhsd(x):
    """A contiguous [b, h, s, d] copy of aotk's [b, s, h, d] (or packed [tokens, h, d] as b = 1)."""
    if x.dim() == 3:
        x = x.unsqueeze(0)
    return x.detach().transpose(1, 2).contiguous()


def flex_run(q, k, v, block_mask, backward, ref_out=None, ref_grads=None, dout=None):
    """Checks FlexAttention on the row (q, k, v contiguous [b, h, s, d]; k, v may have fewer heads: GQA),
    then times it. Forward: its output against ref_out ([b, h, s, d]) within the grid's tolerance;
    backward (dout [b, h, s, d]): its dq, dk, dv against ref_grads ({"dq", "dk", "dv"}, [b, h, s, d])
    within the grid's relative L2 tolerance, then torch.autograd.grad of its output is timed, as SDPA's
    backwards are. Returns ms, or None (with a note) where flex cannot run the row or differs."""
    gqa = q.shape[1] != k.shape[1]
    try:
        fn, _ = flex_module()
        start = time.perf_counter()
        if not backward:
            with torch.no_grad():
                out = fn(q, k, v, block_mask=block_mask, enable_gqa=gqa)
                synchronize()
                compile_s = time.perf_counter() - start
                err = max_abs_diff(out, ref_out)
                del out
                if not err < OUT_ATOL[q.dtype]:
                    note(f"flex not timed: its output differs from the reference by {err:.4g} "
                         f"(tolerance {OUT_ATOL[q.dtype]})")
                    return None
                note(f"flex checked: max abs diff out {err:.2g} (first call, compile included, {compile_s:.1f} s)")
                return time_ms(lambda: fn(q, k, v, block_mask=block_mask, enable_gqa=gqa))
        leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
        out = fn(*leaves, block_mask=block_mask, enable_gqa=gqa)
        grads = torch.autograd.grad(out, leaves, dout, retain_graph=True)
        synchronize()
        compile_s = time.perf_counter() - start
        errs = {name: rel_l2(g, ref_grads[name]) for name, g in zip(("dq", "dk", "dv"), grads)}
        del grads
        if not all(e < BWD_REL_TOL for e in errs.values()):
            note(f"flex not timed: its gradients differ from the reference: relative L2 {errs} "
                 f"(tolerance {BWD_REL_TOL})")
            return None
        note("flex checked: relative L2 " + ", ".join(f"{n} {e:.2g}" for n, e in errs.items())
             + f" (first call, compile included, {compile_s:.1f} s)")
        ms = time_ms(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True))
        del out, leaves
        return ms
    except Exception as e:  # noqa: BLE001
        note(f"flex skipped (cannot run this row here?): {type(e).__name__}: {str(e)[:300]}")
        return None
    finally:
        empty_cache()


# ---------------------------------------------------------------------------------------------------
# ops "fwd_gqa" and "bwd_gqa": grouped-query attention, 32 query heads over 8 kv heads (issue 11's bar)
# ---------------------------------------------------------------------------------------------------
#
# Kept under their own op names, so the grid's rows (heads_q = heads_kv), its geomeans and its table stay
# what they were. bf16, head dim 128, causal, seqlen 8192, batch 2 (the grid's 16384 tokens per row).
# aotk takes k, v [b, s, 8, d] as they are (query head h reads kv head h // 4). SDPA's flash and cuDNN
# backends get the same tensors with enable_gqa=True (torch 2.11: both accept it, forward and backward,
# and read the 8 kv heads); a backend that refuses it gets k and v expanded to 32 heads beforehand
# (repeat_interleave, outside the timing), and the row's "gqa" field says which ("enable_gqa" or
# "expanded"). FlexAttention: causal block mask, enable_gqa=True.
# Checks, the grid's: the forward's out and lse against sdpa-flash on k, v expanded to 32 heads (the same
# math), the backward's dq, dk, dv against sdpa-flash's through autograd on the expansion (so dk, dv are
# summed over each group of 4, as GQA's are).

GQA_OPS = ("fwd_gqa", "bwd_gqa")
GQA_HEADS_Q = 32
GQA_HEADS_KV = 8
GQA_HEAD_DIM = 128
GQA_SEQLEN = 8192
GQA_CAUSAL = [True]
GQA_BAR = 1.0  # aotk's TFLOP/s over sdpa-cudnn's, forward and backward
GQA_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
GQA_IMPLS = ["aotk"] + [name for name, _ in GQA_ANCHORS] + ["flex"]


def gqa_cases(op, quick=False):
    """The rows of one GQA op (--quick runs the same: there is one)."""
    for causal in GQA_CAUSAL:
        yield {"op": op, "dtype": "bf16", "head_dim": GQA_HEAD_DIM, "causal": causal, "seqlen_q": GQA_SEQLEN,
               "seqlen_k": GQA_SEQLEN, "batch": TOTAL_TOKENS // GQA_SEQLEN, "heads_q": GQA_HEADS_Q,
               "heads_kv": GQA_HEADS_KV}


def gqa_label(case):
    return (f"{case['op']} {case['dtype']} d={case['head_dim']} causal={int(case['causal'])} "
            f"seqlen={case['seqlen_q']} batch={case['batch']} heads={case['heads_q']}/{case['heads_kv']}")


def gqa_flops(case):
    """The grid's count with heads_q (every query head does its own products): 4 b hq sq sk d, halved for
    causal, 2.5x for the backward."""
    return fwd_flops(case) * (2.5 if case["op"] == "bwd_gqa" else 1.0)


def sdpa_anchor_times(q, k, v, causal, dout, anchors):
    """({impl: ms}, {impl: layout}) of SDPA's backends (`anchors`: [(name, backend)]) on q [b, s, hq, d],
    k, v [b, s, hkv, d] ([b, h, s, d] views of them, no copies), forward or (dout given) backward. GQA
    through enable_gqa=True (the backend reads the kv heads); a backend that refuses it gets k and v
    expanded to hq heads beforehand ("expanded", outside the timing). The selection and GQA rows share it."""
    results, layouts = {}, {}
    backward = dout is not None
    group = q.shape[2] // k.shape[2]
    dout_t = dout.transpose(1, 2) if backward else None
    for name, be in anchors:
        for layout in ("enable_gqa", "expanded"):
            kx = vx = leaves = qt = kt = vt = None
            try:
                if layout == "enable_gqa":
                    kx, vx = k.detach(), v.detach()
                else:
                    kx, vx = (y.detach().repeat_interleave(group, dim=2) for y in (k, v))
                leaves = [q.detach().requires_grad_(backward), kx.requires_grad_(backward),
                          vx.requires_grad_(backward)]
                qt, kt, vt = (y.transpose(1, 2) for y in leaves)
                gqa = layout == "enable_gqa"
                with sdpa_kernel(be):
                    if not backward:
                        with torch.no_grad():
                            results[name] = time_ms(lambda: F.scaled_dot_product_attention(
                                qt, kt, vt, is_causal=causal, enable_gqa=gqa))
                    else:
                        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)
                        results[name] = time_ms(lambda: torch.autograd.grad(o, leaves, dout_t, retain_graph=True))
                        del o
                layouts[name] = layout
                break
            except Exception as e:  # noqa: BLE001
                note(f"{name} ({layout}) skipped: {type(e).__name__}: {str(e)[:200]}")
            finally:
                kx = vx = leaves = qt = kt = vt = None
                empty_cache()
    return results, layouts


def gqa_run_case(case, aotk):
    """gqa_run_case_unguarded, with any exception turned into the row's failure."""
    try:
        return gqa_run_case_unguarded(case, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {gqa_label(case)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", {}


def gqa_run_case_unguarded(case, aotk):
    """Checks aotk (the grid's check), times it, then the SDPA anchors and flex on the same q, k, v.
    Returns ({impl: ms}, failure or None, facts): aotk's kernel info and the anchors' layouts."""
    backward = case["op"] == "bwd_gqa"
    b, n, h, hkv, d, causal = (case["batch"], case["seqlen_q"], case["heads_q"], case["heads_kv"], case["head_dim"],
                               case["causal"])
    group = h // hkv
    dt = torch.bfloat16
    q = torch.randn(b, n, h, d, device=DEVICE, dtype=dt)
    k = torch.randn(b, case["seqlen_k"], hkv, d, device=DEVICE, dtype=dt)
    v = torch.randn_like(k)
    dout = torch.randn_like(q) if backward else None
    facts = {"layouts": {}}
    out = torch.empty_like(q)
    lse = torch.empty(b, h, n, device=DEVICE, dtype=torch.float32)
    params = fwd_params(q, k, v, out, lse, causal)
    params_ref = ctypes.byref(params)

    # The reference: sdpa-flash (or the first backend that runs) on k, v expanded to heads_q.
    ref = ref_lse = None
    ref_grads = {}
    if not backward:
        kx, vx = (y.repeat_interleave(group, dim=2).transpose(1, 2) for y in (k, v))
        ref, ref_lse, ref_name = fwd_reference(q.transpose(1, 2), kx, vx, causal)  # [b, h, s, d]
        del kx, vx
        if ref is None:
            return {}, "no SDPA backend ran, so aotk could not be checked", facts
    else:
        try:
            leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
            with sdpa_kernel(_sdpa_backend("FLASH_ATTENTION")):
                o = F.scaled_dot_product_attention(
                    leaves[0].transpose(1, 2), *(y.repeat_interleave(group, dim=2).transpose(1, 2) for y in leaves[1:]),
                    is_causal=causal)
            ref_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(o, leaves, dout.transpose(1, 2))))
            del o, leaves
        except Exception as e:  # noqa: BLE001
            return {}, f"sdpa-flash's backward did not run ({type(e).__name__}), so aotk's could not be checked", facts
    empty_cache()

    results = {}
    try:
        if not backward:
            facts["info"] = aotk.query(AOTK_OP_ATTN_FWD, params)
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
            aotk.attn_fwd(params_ref, current_stream())
            synchronize()
            err = max_abs_diff(out, ref.transpose(1, 2))
            if not err < OUT_ATOL[dt]:
                msg = f"aotk out differs from {ref_name}: max abs diff {err:.4g} (tolerance {OUT_ATOL[dt]})"
                loud(f"ROW ABORTED, {gqa_label(case)}: {msg}")
                return {}, msg, facts
            lse_txt = ""
            if ref_lse is not None:
                lse_err = max_abs_diff(lse, ref_lse)
                if not lse_err < LSE_ATOL:
                    msg = f"aotk lse differs from sdpa-flash's: max abs diff {lse_err:.4g} (tolerance {LSE_ATOL})"
                    loud(f"ROW ABORTED, {gqa_label(case)}: {msg}")
                    return {}, msg, facts
                lse_txt = f", lse {lse_err:.2g}"
            note(f"aotk checked against {ref_name} on k, v expanded to {h} heads: max abs diff out {err:.2g}{lse_txt}")
            results["aotk"] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        else:
            grads = {"dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
            params.dout = describe_tensor(dout)
            for name, g in grads.items():
                setattr(params, name, describe_tensor(g))
            params.deterministic = 0  # the library's default, as the grid's "aotk" column
            aotk.attn_fwd(params_ref, current_stream())  # out and lse for the backward
            info = facts["info"] = aotk.query(AOTK_OP_ATTN_BWD, params)
            workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
            for g in grads.values():
                g.fill_(float("nan"))
            aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
            synchronize()
            errs = {name: rel_l2(g, ref_grads[name]) for name, g in grads.items()}
            if not all(e_ < BWD_REL_TOL for e_ in errs.values()):
                msg = f"aotk gradients differ from sdpa-flash's: relative L2 {errs} (tolerance {BWD_REL_TOL})"
                loud(f"ROW ABORTED, {gqa_label(case)}: {msg}")
                return {}, msg, facts
            note("aotk checked against sdpa-flash (autograd through k, v expanded): relative L2 "
                 + ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items()))
            results["aotk"] = time_ms(lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"],
                                                            current_stream()))
            del workspace, grads
    except AotkError as e:
        loud(f"aotk FAILED on {gqa_label(case)}: {e}")
        return results, f"aotk raised: {e}", facts
    info = facts["info"]
    note(f"aotk kernel {info['kernel_name']} (sm_{info['arch']}{', from PTX' if info['from_ptx'] else ''}, "
         f"{info['launches']} launch(es))")
    del out, lse, params, params_ref
    empty_cache()

    anchor_ms, facts["layouts"] = sdpa_anchor_times(q, k, v, causal, dout, GQA_ANCHORS)
    results.update(anchor_ms)
    if FLEX_OPTIONS["rows"]:
        block_mask = flex_block_mask(flex_causal_mask, n) if causal else None  # None: no mask
        qb, kb, vb = to_bhsd(q), to_bhsd(k), to_bhsd(v)
        ms = flex_run(qb, kb, vb, block_mask, backward, ref_out=ref,
                      ref_grads={name: g.transpose(1, 2) for name, g in ref_grads.items()},
                      dout=to_bhsd(dout) if backward else None)
        if ms is not None:
            results["flex"] = ms
            facts["layouts"]["flex"] = "enable_gqa"
        del qb, kb, vb, block_mask
    return results, None, facts


GQA_TABLE_HEAD = (f"{'op':>7} {'d':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} {'heads':>6} |"
                  + "".join(f" {name:>10}" for name in GQA_IMPLS)
                  + f" | {'x flash':>7} {'x cudnn':>7} {'x flex':>7} | {'bar':>7}")


def gqa_table_line(case, tfl, failure):
    s = (f"{case['op']:>7} {case['head_dim']:>4} {('yes' if case['causal'] else 'no'):>6} {case['seqlen_q']:>6} "
         f"{case['batch']:>5} {str(case['heads_q']) + '/' + str(case['heads_kv']):>6} |")
    s += "".join(f" {tfl[name]:>10.1f}" if name in tfl else f" {'-':>10}" for name in GQA_IMPLS)
    r = {name: tfl["aotk"] / tfl[name] for name in GQA_IMPLS[1:] if name in tfl and "aotk" in tfl}
    s += " | " + " ".join(f"{r[name]:>6.2f}x" if name in r else f"{'-':>7}" for name in GQA_IMPLS[1:])
    s += f" | {gqa_verdict(r.get('sdpa-cudnn')):>7}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def gqa_verdict(ratio_cudnn):
    if ratio_cudnn is None:
        return "-"
    return "ok" if ratio_cudnn >= GQA_BAR else "LOW"


def run_gqa_op(op, quick, aotk):
    """Runs one GQA op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures, verdicts = [], [], [], []
    for case in gqa_cases(op, quick):
        print(f"\n{gqa_label(case)}", flush=True)
        ms, failure, facts = gqa_run_case(case, aotk)
        empty_cache()
        flops = gqa_flops(case)
        tfl = {impl: flops / ms[impl] / 1e9 for impl in GQA_IMPLS if impl in ms}
        for impl in GQA_IMPLS:
            if impl not in ms:
                continue
            row = {"op": op, "impl": impl, "dtype": case["dtype"], "head_dim": case["head_dim"],
                   "causal": bool(case["causal"]), "seqlen_q": case["seqlen_q"], "seqlen_k": case["seqlen_k"],
                   "batch": case["batch"], "heads_q": case["heads_q"], "heads_kv": case["heads_kv"],
                   "flops": flops, "ms": ms[impl], "tflops": round(tfl[impl], 2)}
            if impl == "aotk":
                for other in GQA_IMPLS[1:]:
                    if other in tfl:
                        row[f"ratio_to_{other.replace('sdpa-', '')}"] = round(tfl["aotk"] / tfl[other], 4)
                info = facts.get("info")
                if info is not None:
                    row["kernel"] = info["kernel_name"]
            else:
                row["gqa"] = facts.get("layouts", {}).get(impl)
            rows.append(row)
        if failure:
            failures.append(f"{gqa_label(case)}: {failure}")
        r_cudnn = tfl["aotk"] / tfl["sdpa-cudnn"] if "aotk" in tfl and "sdpa-cudnn" in tfl else None
        verdicts.append(f"  {gqa_label(case)}: "
                        + (f"{r_cudnn:.2f}x cuDNN: {gqa_verdict(r_cudnn)}" if r_cudnn else "not measured"))
        line = gqa_table_line(case, tfl, failure)
        lines.append(line)
        print(GQA_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bar (aotk >= {GQA_BAR:.1f}x sdpa-cudnn's TFLOP/s, same q, k, v, same run):"] + verdicts
    return rows, lines, failures, bar


def print_gqa_table(lines, bar_lines):
    print(f"\nGQA rows: heads {GQA_HEADS_Q} over {GQA_HEADS_KV}, d {GQA_HEAD_DIM}, bf16; TFLOP/s = 4*b*hq*s*s*d, "
          f"halved for causal (backward: 2.5x); SDPA with enable_gqa (JSON 'gqa' says if k, v were expanded "
          f"instead); flex: compiled flex_attention, causal block mask; 'x flash' / 'x cudnn' / 'x flex' = "
          f"aotk's TFLOP/s over theirs")
    print(GQA_TABLE_HEAD)
    print("-" * len(GQA_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------------
# ops "fwd_varlen" and "bwd_varlen": packed documents (issue 11's varlen bar)
# ---------------------------------------------------------------------------------------------------
#
# 16 documents of 512 tokens, and (another row) 16 of 1024, packed into one sequence: aotk's varlen layout
# q, k, v [16 L, heads, d] with cu_seqlens 0, L, 2L, ..., 16L; bf16; d 128 with 16 heads, d 64 with 32
# (heads = 2048 / d, as the grid); causal (within each document) and not. Each row times, on the same
# tensors:
#   aotk        aotk_attn_fwd / _bwd in the varlen layout;
#   aotk-plain  aotk's plain dense kernel on the same memory viewed as a batch of 16 sequences of L
#               ([16, L, heads, d]: the same work, since the documents have equal lengths);
#   sdpa-flash, sdpa-cudnn   SDPA on that dense batch (SDPA's own varlen path, nested tensors, is not timed);
#   flex        FlexAttention on the packed [1, heads, 16 L, d] with a document block mask from the
#               document ids (causal within the document where causal).
# FLOPs count only the pairs computed, the grid's way: 4 * 16 * heads * L * L * d, halved for causal
# (2.5x for the backward), the same count for every implementation. The bars: aotk (varlen) at least 0.8x
# the TFLOP/s of aotk-plain, and faster than flex.
# Checks, before anything of the row is timed: aotk's varlen and dense outputs (out, lse; backward: dq, dk,
# dv), NaN-poisoned first, against the feature rows' float32 reference (explicit masks, one document at a
# time, at the row's full size) within their bound (2x, backward 3x, the error of the same reference in
# bf16, plus the rounding floor).

DOC_OPS = ("fwd_varlen", "bwd_varlen")
DOC_COUNT = 16
DOC_LENS = [512, 1024]
DOC_HEAD_DIMS = [128, 64]
DOC_PLAIN_BAR = 0.8  # aotk varlen TFLOP/s over aotk-plain's
DOC_FLEX_BAR = 1.0   # aotk varlen over flex: faster (strictly)
DOC_REF_CHUNK = 4    # documents per reference call (the float32 scores of 4 documents: 4 x 32 x 1024^2 x 4 B)
DOC_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
DOC_IMPLS = ["aotk", "aotk-plain"] + [name for name, _ in DOC_ANCHORS] + ["flex"]
DOC_LAYOUTS = {"aotk": "varlen", "aotk-plain": "dense batch", "sdpa-flash": "dense batch",
               "sdpa-cudnn": "dense batch", "flex": "packed, document block mask"}


def doc_spec(op, doc_len, head_dim, causal, docs=DOC_COUNT, heads=None):
    """A row, as a feature-row spec (so feature_tensors and feature_params build its varlen tensors)."""
    return feature_spec(op, docs * doc_len, head_dim, head_dim, f"docs-{docs}x{doc_len}",
                        heads_q=heads or max(1, HIDDEN // head_dim), heads_kv=heads or max(1, HIDDEN // head_dim),
                        batch=docs, seqlen_q=doc_len, seqlen_k=doc_len, seqlens_q=[doc_len] * docs,
                        seqlens_k=[doc_len] * docs, causal=causal, docs=docs, doc_len=doc_len)


def doc_cases(op, quick=False):
    """The rows of one varlen-documents op (--quick runs the same: 8 rows)."""
    for doc_len in DOC_LENS:
        for d in DOC_HEAD_DIMS:
            for causal in (False, True):
                yield doc_spec(op, doc_len, d, causal)


def doc_label(spec):
    return (f"{spec['op']} bf16 d={spec['head_dim_qk']} heads={spec['heads_q']} {spec['docs']} documents of "
            f"{spec['doc_len']} packed ({spec['docs'] * spec['doc_len']} tokens)" + (" causal" if spec["causal"] else ""))


def doc_flops(spec):
    f = 4.0 * spec["docs"] * spec["heads_q"] * spec["doc_len"] * spec["doc_len"] * spec["head_dim_qk"]
    f = f / 2 if spec["causal"] else f
    return 2.5 * f if spec["op"] == "bwd_varlen" else f


def doc_dense(spec, x):
    """The [docs, L, ...] view of a packed [docs * L, ...] tensor (no copy)."""
    return x.view(spec["docs"], spec["doc_len"], *x.shape[1:])


def doc_to_bhsd(x):
    """[docs, L, h, d] as the packed [1, h, docs * L, d] that flex computes (a view)."""
    return x.reshape(1, -1, *x.shape[2:]).transpose(1, 2)


def doc_lse_dense(spec, lse):
    """The varlen lse [heads, docs * L] as [docs, heads, L] (a view)."""
    return lse.view(lse.shape[0], spec["docs"], spec["doc_len"]).transpose(0, 1)


def doc_reference(spec, t, compute_dtype, dout=None):
    """The feature rows' reference (reference_dense, explicit masks) on the documents as a dense batch,
    DOC_REF_CHUNK documents at a time: (out [docs, L, h, d] fp32, lse [docs, h, L] fp32, grads) where grads
    is None, or with dout (packed, like out) {"dq", "dk", "dv"} in [docs, L, h, d] through autograd."""
    q, k, v = (doc_dense(spec, t[n].detach()) for n in ("q", "k", "v"))
    outs, lses, grads = [], [], {"dq": [], "dk": [], "dv": []}
    for i in range(0, spec["docs"], DOC_REF_CHUNK):
        chunk = [x[i:i + DOC_REF_CHUNK] for x in (q, k, v)]
        if dout is None:
            with torch.no_grad():
                o, l = reference_dense(*chunk, spec, None, None, None, compute_dtype)
            outs.append(o)
            lses.append(l)
        else:
            leaves = [x.to(compute_dtype, copy=True).requires_grad_(True) for x in chunk]
            o, l = reference_dense(*leaves, spec, None, None, None, compute_dtype)
            g = torch.autograd.grad(o, leaves, doc_dense(spec, dout)[i:i + DOC_REF_CHUNK].float())
            for name, gi in zip(("dq", "dk", "dv"), g):
                grads[name].append(gi.float())
            outs.append(o.detach())
            lses.append(l.detach())
    return torch.cat(outs), torch.cat(lses), ({n: torch.cat(g) for n, g in grads.items()} if dout is not None else None)


def doc_plain_tensors(spec, t):
    """aotk-plain's tensors: the row's q, k, v (and dout) viewed as [docs, L, h, d], its own outputs."""
    p = {n: doc_dense(spec, t[n].detach()) for n in ("q", "k", "v")}
    p["out"] = torch.empty_like(p["q"])
    p["lse"] = torch.empty(spec["docs"], spec["heads_q"], spec["doc_len"], device=DEVICE, dtype=torch.float32)
    if "dout" in t:
        p["dout"] = doc_dense(spec, t["dout"])
    return p


def attach_backward(params, t):
    """Adds dout and fresh dq, dk, dv (t["dq"] ...) to a forward's params, with the library's default
    deterministic = 0 as the grid's "aotk" column (varlen and padded batches run deterministic kernels
    either way today)."""
    for name in ("q", "k", "v"):
        t["d" + name] = torch.empty_like(t[name])
    for name in ("dout", "dq", "dk", "dv"):
        setattr(params, name, describe_tensor(t[name]))
    params.deterministic = 0


def aotk_backward_call(aotk, params):
    """(callable running aotk_attn_bwd with its workspace, kernel info)."""
    info = aotk.query(AOTK_OP_ATTN_BWD, params)
    workspace = torch.empty(max(info["workspace_bytes"], 16), device=DEVICE, dtype=torch.uint8)
    params_ref = ctypes.byref(params)
    return (lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())), info


def doc_check(spec, aotk, backward, t, plain):
    """Runs aotk in the varlen layout (t, from feature_tensors) and the plain kernel (plain, from
    doc_plain_tensors) with NaN-poisoned outputs, and compares out and lse (backward: dq, dk, dv) of both
    with doc_reference. Leaves the params in t["params"] and plain["params"] (forward done, backward fields
    attached for the backward) and the float32 reference in t["ref"] ({"out"}, or {"dq", "dk", "dv"}; [docs, L,
    h, d]). Returns (failure or None, summary, {"aotk": info, "aotk-plain": info})."""
    t["params"] = feature_params(spec, t)
    plain["params"] = fwd_params(plain["q"], plain["k"], plain["v"], plain["out"], plain["lse"], spec["causal"])
    infos = {}
    if backward:
        dout = t["dout"]
        ref32 = doc_reference(spec, t, torch.float32, dout)[2]
        ref16 = doc_reference(spec, t, torch.bfloat16, dout)[2]
        t["ref"] = ref32
    else:
        out32, lse32, _ = doc_reference(spec, t, torch.float32)
        out16, lse16, _ = doc_reference(spec, t, torch.bfloat16)
        t["ref"] = {"out": out32}
    texts, bad = [], []
    for impl, x in (("aotk", t), ("aotk-plain", plain)):
        params = x["params"]
        x["out"].fill_(float("nan"))
        x["lse"].fill_(float("nan"))
        aotk.attn_fwd(ctypes.byref(params), current_stream())
        if not backward:
            infos[impl] = aotk.query(AOTK_OP_ATTN_FWD, params)
            synchronize()
            out = doc_dense(spec, x["out"]) if impl == "aotk" else x["out"]
            lse = doc_lse_dense(spec, x["lse"]) if impl == "aotk" else x["lse"]
            results = [compare_to_reference("out", out, out32, out16, FWD_ERR_FACTOR, bf16_rounding_floor(out32)),
                       compare_to_reference("lse", lse, lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
        else:
            attach_backward(params, x)
            for name in ("dq", "dk", "dv"):
                x[name].fill_(float("nan"))
            run, infos[impl] = aotk_backward_call(aotk, params)
            x["bwd"] = run
            run()
            synchronize()
            results = []
            for name in ("dq", "dk", "dv"):
                got = doc_dense(spec, x[name]) if impl == "aotk" else x[name]
                results.append(compare_to_reference(name, got, ref32[name], ref16[name], BWD_ERR_FACTOR,
                                                    bf16_rounding_floor(ref32[name])))
        texts.append(f"{impl}: " + ", ".join(text for _, text in results))
        bad += [f"{impl} {text}" for ok, text in results if not ok]
    summary = "checked against the float32 reference: " + "; ".join(texts)
    if bad:
        return "aotk differs from the float32 reference: " + ", ".join(bad), summary, infos
    return None, summary, infos


def doc_anchor_times(spec, plain, backward):
    """{impl: ms} of SDPA's flash and cuDNN backends on the dense batch (views of the row's tensors)."""
    results = {}
    dout_t = plain["dout"].transpose(1, 2) if backward else None
    for name, be in DOC_ANCHORS:
        try:
            leaves = [plain[n].detach().requires_grad_(backward) for n in ("q", "k", "v")]
            qt, kt, vt = (y.transpose(1, 2) for y in leaves)
            with sdpa_kernel(be):
                if not backward:
                    with torch.no_grad():
                        results[name] = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt,
                                                                                       is_causal=spec["causal"]))
                else:
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=spec["causal"])
                    results[name] = time_ms(lambda: torch.autograd.grad(o, leaves, dout_t, retain_graph=True))
                    del o
        except Exception as e:  # noqa: BLE001
            note(f"{name} skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
        finally:
            leaves = qt = kt = vt = None
            empty_cache()
    return results


def doc_run_case(spec, aotk):
    """doc_run_case_unguarded, with any exception turned into the row's failure."""
    try:
        return doc_run_case_unguarded(spec, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {doc_label(spec)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", {}


def doc_run_case_unguarded(spec, aotk):
    """Checks aotk (varlen and plain), times both, then the SDPA anchors and flex on the same tensors.
    Returns ({impl: ms}, failure or None, {impl: aotk kernel info})."""
    backward = spec["op"] == "bwd_varlen"
    t = feature_tensors(spec)
    if backward:
        t["dout"] = torch.randn_like(t["out"])
    plain = doc_plain_tensors(spec, t)
    try:
        failure, summary, infos = doc_check(spec, aotk, backward, t, plain)
    except AotkError as e:
        loud(f"aotk FAILED on {doc_label(spec)}: {e}")
        return {}, f"aotk raised in the check: {e}", {}
    if failure:
        loud(f"ROW ABORTED, {doc_label(spec)}: {failure}")
        return {}, failure, infos
    note(summary)
    for impl, info in infos.items():
        note(f"{impl} kernel {info['kernel_name']} ({info['launches']} launch(es), features: "
             f"{', '.join(info['features']) or 'none'})")
    empty_cache()

    results = {}
    for impl, x in (("aotk", t), ("aotk-plain", plain)):
        try:
            if backward:  # out and lse: the forward's, from the check
                results[impl] = time_ms(x["bwd"])
            else:
                params_ref = ctypes.byref(x["params"])
                results[impl] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        except AotkError as e:
            loud(f"aotk FAILED while timing {doc_label(spec)} ({impl}): {e}")
            return results, f"aotk raised while timing ({impl}): {e}", infos
    results.update(doc_anchor_times(spec, plain, backward))

    if FLEX_OPTIONS["rows"]:
        tokens = spec["docs"] * spec["doc_len"]
        doc_ids = torch.arange(tokens, device=DEVICE, dtype=torch.int32) // spec["doc_len"]
        block_mask = flex_block_mask(flex_document_mask(doc_ids, spec["causal"]), tokens)
        qb, kb, vb = (to_bhsd(t[n]) for n in ("q", "k", "v"))
        ref = {n: doc_to_bhsd(x) for n, x in t.pop("ref").items()}  # the float32 reference of the check
        ref_out = ref.get("out")
        ref_grads = None if not backward else ref
        ms = flex_run(qb, kb, vb, block_mask, backward, ref_out=ref_out, ref_grads=ref_grads,
                      dout=to_bhsd(t["dout"]) if backward else None)
        if ms is not None:
            results["flex"] = ms
        del qb, kb, vb, block_mask, ref, ref_out, ref_grads
    del t, plain
    return results, None, infos


DOC_TABLE_HEAD = (f"{'op':>10} {'d':>4} {'heads':>5} {'causal':>6} {'docs':>8} |"
                  + "".join(f" {name:>10}" for name in DOC_IMPLS)
                  + f" | {'x plain':>7} {'x flex':>7} {'x cudnn':>7} | {'bar':>7}")


def doc_ratios(tfl):
    """aotk (varlen) over aotk-plain, flex and sdpa-cudnn (None where missing)."""
    return {other: tfl["aotk"] / tfl[other] if "aotk" in tfl and other in tfl else None
            for other in ("aotk-plain", "flex", "sdpa-cudnn", "sdpa-flash")}


def doc_verdict(r):
    """'ok' when aotk is >= DOC_PLAIN_BAR x plain and faster than flex, 'LOW' when either fails, '-' when
    either is not measured."""
    if r["aotk-plain"] is None or r["flex"] is None:
        return "-"
    return "ok" if r["aotk-plain"] >= DOC_PLAIN_BAR and r["flex"] > DOC_FLEX_BAR else "LOW"


def doc_table_line(spec, tfl, failure):
    s = (f"{spec['op']:>10} {spec['head_dim_qk']:>4} {spec['heads_q']:>5} {('yes' if spec['causal'] else 'no'):>6} "
         f"{str(spec['docs']) + 'x' + str(spec['doc_len']):>8} |")
    s += "".join(f" {tfl[name]:>10.1f}" if name in tfl else f" {'-':>10}" for name in DOC_IMPLS)
    r = doc_ratios(tfl)
    s += " | " + " ".join(f"{r[name]:>6.2f}x" if r[name] else f"{'-':>7}" for name in ("aotk-plain", "flex", "sdpa-cudnn"))
    s += f" | {doc_verdict(r):>7}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def run_doc_op(op, quick, aotk):
    """Runs one varlen-documents op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures, verdicts = [], [], [], []
    for spec in doc_cases(op, quick):
        print(f"\n{doc_label(spec)}", flush=True)
        ms, failure, infos = doc_run_case(spec, aotk)
        empty_cache()
        flops = doc_flops(spec)
        tfl = {impl: flops / ms[impl] / 1e9 for impl in DOC_IMPLS if impl in ms}
        r = doc_ratios(tfl)
        for impl in DOC_IMPLS:
            if impl not in ms:
                continue
            row = {"op": op, "impl": impl, "dtype": "bf16", "head_dim": spec["head_dim_qk"],
                   "causal": bool(spec["causal"]), "seqlen_q": spec["doc_len"], "seqlen_k": spec["doc_len"],
                   "batch": spec["docs"], "heads_q": spec["heads_q"], "heads_kv": spec["heads_kv"],
                   "docs": spec["docs"], "doc_len": spec["doc_len"], "tokens": spec["docs"] * spec["doc_len"],
                   "layout": DOC_LAYOUTS[impl], "flops": flops, "ms": ms[impl], "tflops": round(tfl[impl], 2)}
            if impl == "aotk":
                for other, value in r.items():
                    if value is not None:
                        row["ratio_to_" + other.replace("sdpa-", "").replace("aotk-", "")] = round(value, 4)
            if impl in infos:
                row["kernel"] = infos[impl]["kernel_name"]
                row["kernel_features"] = infos[impl]["features"]
            rows.append(row)
        if failure:
            failures.append(f"{doc_label(spec)}: {failure}")
        v = doc_verdict(r)
        got = ", ".join(f"{r[o]:.2f}x {o}" for o in ("aotk-plain", "flex") if r[o] is not None) or "not measured"
        verdicts.append(f"  {doc_label(spec)}: {got}: {v}")
        line = doc_table_line(spec, tfl, failure)
        lines.append(line)
        print(DOC_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bars (aotk varlen >= {DOC_PLAIN_BAR:.1f}x aotk-plain's TFLOP/s, and faster than flex's "
           f"document mask; same tensors, same run): {sum(1 for x in verdicts if x.endswith(': ok'))} of "
           f"{len(verdicts)} pass"] + verdicts
    return rows, lines, failures, bar


def print_doc_table(lines, bar_lines):
    print(f"\nVarlen document rows: {DOC_COUNT} documents of L tokens packed (cu_seqlens), bf16; TFLOP/s = "
          f"4*docs*h*L*L*d, halved for causal (backward: 2.5x), the same count for every column; aotk = varlen "
          f"layout; aotk-plain and sdpa-* = the same memory as a dense batch [{DOC_COUNT}, L]; flex = packed "
          f"with a document block mask; 'x plain' / 'x flex' / 'x cudnn' = aotk's TFLOP/s over theirs")
    print(DOC_TABLE_HEAD)
    print("-" * len(DOC_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()


# The op registry. A grid op says how to enumerate its cases, run one case, and count its FLOPs (main's
# loop builds its rows and table, and its geomeans: only the grid ops fwd and bwd are of that kind); an op
# with "run_op" runs all its rows itself, because what a row records depends on what the run drew (the
# selection's FLOPs are counted from its indices) or has columns of its own (GQA's layouts, the varlen
# rows' plain kernel and flex), and "print" prints its own table and bars at the end. The feature ops
# (fwd_feat, bwd_feat) have their own path in main.
OPS = {
    "fwd": {"cases": fwd_cases, "run": fwd_run_case, "flops": fwd_flops},
    "bwd": {"cases": bwd_cases, "run": bwd_run_case, "flops": bwd_flops},
    "fwd_gqa": {"cases": gqa_cases, "run_op": run_gqa_op, "print": print_gqa_table},
    "bwd_gqa": {"cases": gqa_cases, "run_op": run_gqa_op, "print": print_gqa_table},
    "fwd_varlen": {"cases": doc_cases, "run_op": run_doc_op, "print": print_doc_table},
    "bwd_varlen": {"cases": doc_cases, "run_op": run_doc_op, "print": print_doc_table},
    "sel_fwd": {"cases": sel_cases, "run_op": run_sel_op, "print": print_sel_table},
    "sel_bwd": {"cases": sel_cases, "run_op": run_sel_op, "print": print_sel_table},
}


# ---------------------------------------------------------------------------------------------------
# Table and output
# ---------------------------------------------------------------------------------------------------

def case_label(case):
    return (f"{case['op']} {DTYPE_NAMES[case['dtype']]} d={case['head_dim']} causal={int(case['causal'])} "
            f"seqlen={case['seqlen_q']} batch={case['batch']} heads={case['heads_q']}")


def ratios(tfl):
    """aotk / sdpa-flash and aotk / best SDPA backend, from a {impl: tflops} dict (None when missing)."""
    a = tfl.get("aotk")
    flash = tfl.get("sdpa-flash")
    sdpa = [tfl[name] for name, _ in SDPA_BACKENDS if name in tfl]
    r_flash = a / flash if a is not None and flash else None
    r_best = a / max(sdpa) if a is not None and sdpa else None
    return r_flash, r_best


def table_head():
    """The grid table's head: IMPLS (flex only with --flex) and the ratios (aotk/flex only with --flex)."""
    return (f"{'op':>4} {'d':>4} {'causal':>6} {'seqlen':>6} |" + "".join(f" {name:>14}" for name in IMPLS)
            + f" | {'aotk/flash':>10} {'aotk/best':>10}" + (f" {'aotk/flex':>10}" if "flex" in IMPLS else ""))


def table_line(case, tfl, failure):
    s = (f"{case['op']:>4} {case['head_dim']:>4} {('yes' if case['causal'] else 'no'):>6} "
         f"{case['seqlen_q']:>6} |")
    s += "".join(f" {tfl[name]:>14.1f}" if name in tfl else f" {'-':>14}" for name in IMPLS)
    r_flash, r_best = ratios(tfl)
    s += " | " + (f"{r_flash:>9.2f}x" if r_flash else f"{'-':>10}") + " " + (
        f"{r_best:>9.2f}x" if r_best else f"{'-':>10}")
    if "flex" in IMPLS:
        s += f" {tfl['aotk'] / tfl['flex']:>9.2f}x" if "aotk" in tfl and "flex" in tfl else f" {'-':>10}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def print_table(lines, summary):
    print("\nTFLOP/s (forward: 4*b*h*sq*sk*d, halved for causal; backward: 2.5 x forward); ratios are aotk's "
          "TFLOP/s over the SDPA one's" + (" (aotk/flex: over compiled FlexAttention's; not in the geomeans)"
                                          if "flex" in IMPLS else ""))
    print(table_head())
    print("-" * len(table_head()))
    for line in lines:
        print(line)
    for line in summary:
        print(line)
    sys.stdout.flush()


def print_feature_table(lines, bar_lines):
    print(f"\nFeature rows, TFLOP/s = score pairs computed x 2 x (head_dim_qk + head_dim_v) / time (backward: "
          f"2.5x that); 'x plain' = aotk's TFLOP/s over the plain row of the same head dim and grid seqlen in "
          f"this run (bar: >= {FEATURE_BAR:.2f}); density = pairs computed / pairs of the unmasked row; "
          f"the SDPA columns are anchors where SDPA can do the same work")
    print(FEATURE_TABLE_HEAD)
    print("-" * len(FEATURE_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def gpu_slug(name):
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in name.lower())


# ---------------------------------------------------------------------------------------------------
# --self-check: what can be checked with no GPU (and no torch)
# ---------------------------------------------------------------------------------------------------

def brute_force_pairs(seqlen_q, seqlen_k, causal, causal_align, window_left, window_right):
    """Every (i, j) tested against aotk.h's rule as written, one at a time."""
    diag = seqlen_k - seqlen_q if causal_align == AOTK_ALIGN_BOTTOM_RIGHT else 0
    right = 0 if causal else window_right
    n = 0
    for i in range(seqlen_q):
        for j in range(seqlen_k):
            if window_left >= 0 and not i + diag - window_left <= j:
                continue
            if right >= 0 and not j <= i + diag + right:
                continue
            n += 1
    return n


def ctypes_layout_problems():
    """Compiles a probe of include/aotk.h's offsets and sizes and compares them with the ctypes
    structs. Returns a list of mismatches, or None when no C compiler or header is at hand."""
    header_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include")
    cc = os.environ.get("CC", "cc")
    if not os.path.exists(os.path.join(header_dir, "aotk.h")):
        return None
    structs = [("aotk_tensor", AotkTensor), ("aotk_attn_params", AotkAttnParams),
               ("aotk_sel_params", AotkSelParams), ("aotk_kernel_info", AotkKernelInfo),
               ("aotk_build_info", AotkBuildInfo)]
    src = ["#include <stdio.h>", "#include <stddef.h>", '#include "aotk.h"', "int main(void) {"]
    for cname, cls in structs:
        src.append(f'  printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        src += [f'  printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));' for f, _ in cls._fields_]
    src.append("  return 0;\n}")
    with tempfile.TemporaryDirectory() as tmp:
        c_path, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(c_path, "w") as f:
            f.write("\n".join(src) + "\n")
        try:
            subprocess.run([cc, "-std=c11", "-I", header_dir, c_path, "-o", exe], check=True, capture_output=True)
            out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
    c_values = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        c_values[(cname, field)] = int(value)
    problems = []
    for cname, cls in structs:
        if c_values[(cname, "sizeof")] != ctypes.sizeof(cls):
            problems.append(f"sizeof({cname}) = {c_values[(cname, 'sizeof')]}, ctypes {ctypes.sizeof(cls)}")
        for f, _ in cls._fields_:
            if c_values[(cname, f)] != getattr(cls, f).offset:
                problems.append(f"offsetof({cname}, {f}) = {c_values[(cname, f)]}, ctypes {getattr(cls, f).offset}")
    return problems


def tensor_from_aotk(at):
    """A torch view of the CPU memory an aotk_tensor describes (the stand-in's way to read its args)."""
    dtype = {v: k for k, v in TORCH_TO_AOTK_DTYPE.items()}[at.dtype]
    shape, strides = list(at.shape[:at.rank]), list(at.strides[:at.rank])
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    itemsize = torch.empty((), dtype=dtype).element_size()
    flat = torch.frombuffer((ctypes.c_char * (span * itemsize)).from_address(at.data), dtype=dtype, count=span)
    return flat.as_strided(shape, strides)


class TorchStandIn:
    """aotk_attn_fwd / aotk_attn_bwd in torch on the CPU, reading everything from the params struct
    (--self-check only). With drop = a feature name, that feature is ignored (in `drop_in`: "fwd",
    "bwd" or both), as a broken library would: the check must then fail."""

    def __init__(self, drop=None, drop_in=("fwd", "bwd")):
        self.drop, self.drop_in = drop, drop_in

    def query(self, op, params):
        return {"kernel_name": "torch stand-in", "arch": 0, "from_ptx": 0, "workspace_bytes": 0, "launches": 1,
                "head_dim_qk": params.q.shape[params.q.rank - 1], "head_dim_v": params.v.shape[params.v.rank - 1],
                "features": []}

    def _problem(self, p, call):
        spec = {"causal": bool(p.causal), "causal_align": p.causal_align, "window_left": p.window_left,
                "window_right": p.window_right, "softcap": p.softcap, "dropout_p": p.dropout_p,
                "seqlens_q": None, "seqlens_k": None}
        t = {name: tensor_from_aotk(getattr(p, name)) for name in ("q", "k", "v")}
        if p.cu_seqlens_q.data:
            for side in ("q", "k"):
                cu = tensor_from_aotk(getattr(p, f"cu_seqlens_{side}")).tolist()
                spec[f"seqlens_{side}"] = [b - a for a, b in zip(cu, cu[1:])]
            keep_shape = (len(spec["seqlens_q"]), t["q"].shape[1], p.max_seqlen_q, p.max_seqlen_k)
        else:
            keep_shape = (t["q"].shape[0], t["q"].shape[2], t["q"].shape[1], t["k"].shape[1])
        for field in ("alibi_slopes", "sinks"):
            if getattr(p, field).data:
                t[field] = tensor_from_aotk(getattr(p, field))
        keep = None
        if p.dropout_p > 0:  # a keep mask that depends only on the RNG state, so the backward gets the forward's
            seed, offset = tensor_from_aotk(p.rng_state).tolist()
            g = torch.Generator().manual_seed((seed ^ offset) & (2 ** 63 - 1))
            keep = torch.rand(keep_shape, generator=g) >= p.dropout_p
            if p.dropout_mask.data:
                tensor_from_aotk(p.dropout_mask).copy_(keep)
        if self.drop is not None and call in self.drop_in:
            d = self.drop
            if d == "softcap":
                spec["softcap"] = 0.0
            elif d in ("alibi", "sinks"):
                t.pop("alibi_slopes" if d == "alibi" else "sinks", None)
            elif d == "window":
                spec["window_left"] = -1
            elif d == "align":
                spec["causal_align"] = 1 - spec["causal_align"]
            elif d == "causal":
                spec["causal"] = False
            elif d == "dropout":
                keep = None
            elif d == "varlen" and spec["seqlens_q"] is not None:  # one sequence across the packed ones
                # (the keep mask no longer fits: dropped); a dense call is left as it is
                spec["seqlens_q"], spec["seqlens_k"] = [sum(spec["seqlens_q"])], [sum(spec["seqlens_k"])]
                keep = None
        return spec, t, keep

    def attn_fwd(self, params_ref, stream):
        p = params_ref._obj
        spec, t, keep = self._problem(p, "fwd")
        with torch.no_grad():
            out, lse = reference_attention(t, spec, keep, torch.float32)
        tensor_from_aotk(p.out).copy_(out)
        if p.lse.data:
            tensor_from_aotk(p.lse).copy_(lse)

    def attn_bwd(self, params_ref, workspace, workspace_bytes, stream):
        p = params_ref._obj
        spec, t, keep = self._problem(p, "bwd")
        names = ["q", "k", "v"] + (["sinks"] if "sinks" in t else [])
        leaves = {n: t[n].float().requires_grad_(True) for n in names}
        out, _ = reference_attention(t, spec, keep, torch.float32, leaves)
        grads = torch.autograd.grad(out, [leaves[n] for n in names], tensor_from_aotk(p.dout).float())
        for n, g in zip(names, grads):
            if n != "sinks" or p.dsinks.data:
                tensor_from_aotk(getattr(p, "d" + n)).copy_(g)


# The feature each row's stand-in mutant ignores: its check must fail.
STAND_IN_MUTANTS = {"causal": "causal", "causal-top-left": "align", f"window-{WINDOW_CAUSAL_LEFT}-0": "window",
                    f"window-{WINDOW_SYMMETRIC[0]}-{WINDOW_SYMMETRIC[1]}": "window", "varlen": "varlen",
                    "softcap": "softcap", "alibi": "alibi", "sinks": "sinks", "dropout": "dropout", "all": "window",
                    "all-varlen": "varlen"}


def stand_in_checks(report):
    """feature_check of every feature row (at d = 64) against the stand-in, then against the mutant
    that ignores the row's feature (in the backward only, for bwd rows). On the CPU, so the checks run
    at 512 tokens with 2 heads, and windows shrink by the same factor 4 to keep cutting the rows."""
    global DEVICE, CHECK_TOKENS, CHECK_HEADS, CHECK_BATCH, CHECK_VARLEN_SEQS
    saved = DEVICE, CHECK_TOKENS, CHECK_HEADS, CHECK_BATCH, CHECK_VARLEN_SEQS
    DEVICE, CHECK_TOKENS, CHECK_HEADS, CHECK_BATCH, CHECK_VARLEN_SEQS = "cpu", saved[1] // 4, 2, 1, 4
    torch.manual_seed(0)
    try:
        for op in ("fwd_feat", "bwd_feat"):
            backward = op == "bwd_feat"
            for spec in feature_cases(op, [4096], [64]):
                if spec["role"] == "base" and spec["head_dim_qk"] != 64:
                    continue
                spec = dict(spec, **{side: spec[side] // 4 if spec[side] > 0 else spec[side]
                                     for side in ("window_left", "window_right")})
                failure, summary = feature_check(spec, TorchStandIn(), backward)
                report(failure is None, f"{op} {spec['feature']}: the stand-in passes the check"
                       + (f"; {failure}" if failure else ""))
                drop = STAND_IN_MUTANTS.get(spec["feature"])
                if drop:
                    mutant = TorchStandIn(drop, ("bwd",) if backward else ("fwd",))
                    failure, _ = feature_check(spec, mutant, backward)
                    report(failure is not None, f"{op} {spec['feature']}: a stand-in ignoring {drop} fails the check"
                           + (f" ({failure[:90]})" if failure else ""))
    finally:
        DEVICE, CHECK_TOKENS, CHECK_HEADS, CHECK_BATCH, CHECK_VARLEN_SEQS = saved


class TorchSelStandIn:
    """aotk_sel_* in torch on the CPU, reading everything from the AotkSelParams struct through
    sel_reference_masked (--self-check only). With drop = "causal-cut" (the diagonal block's keys after the
    token are kept) or "packed-slots" (a row's slots after its first -1 are not read), in the calls named
    by drop_in, it is a broken library: the checks must then fail."""

    def __init__(self, drop=None, drop_in=("fwd", "bwd")):
        self.drop, self.drop_in = drop, drop_in

    def sel_query(self, op, params):
        return {"kernel_name": "torch stand-in", "arch": 0, "from_ptx": 0, "launches": 1,
                "workspace_bytes": 16 if op == AOTK_OP_SEL_BWD else 0,
                "head_dim_qk": params.q.shape[2], "head_dim_v": params.v.shape[2], "features": []}

    def _problem(self, p, call):
        x = {name: tensor_from_aotk(getattr(p, name)) for name in ("q", "k", "v")}
        idx = tensor_from_aotk(p.block_idx)
        cut = True
        if self.drop is not None and call in self.drop_in:
            if self.drop == "causal-cut":
                cut = False
            elif self.drop == "packed-slots":
                idx = idx.masked_fill(torch.cumsum((idx < 0).to(torch.int32), dim=-1) > 0, -1)
        return x, idx, cut

    def sel_check_indices(self, params_ref, workspace, workspace_bytes, stream):
        p = params_ref._obj
        idx = tensor_from_aotk(p.block_idx).long()
        num_blocks = sel_num_blocks(p.k.shape[0], p.block_size)
        if ((idx < -1) | (idx >= num_blocks)).any():
            raise AotkError("aotk_sel_check_indices failed: AOTK_ERROR_INVALID_INDICES: a block id out of range")
        ordered = idx.sort(dim=-1).values
        if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
            raise AotkError("aotk_sel_check_indices failed: AOTK_ERROR_INVALID_INDICES: a block listed twice")

    def sel_fwd(self, params_ref, stream):
        p = params_ref._obj
        x, idx, cut = self._problem(p, "fwd")
        out, lse, _ = sel_reference_masked(x, idx, p.block_size, torch.float32, cut_at_diagonal=cut)
        tensor_from_aotk(p.out).copy_(out)
        if p.lse.data:
            tensor_from_aotk(p.lse).copy_(lse)

    def sel_bwd(self, params_ref, workspace, workspace_bytes, stream):
        p = params_ref._obj
        x, idx, cut = self._problem(p, "bwd")
        _, _, grads = sel_reference_masked(x, idx, p.block_size, torch.float32, dout=tensor_from_aotk(p.dout),
                                           cut_at_diagonal=cut)
        for name, g in grads.items():
            tensor_from_aotk(getattr(p, name)).copy_(g)


# A small selection problem for the CPU: 32 blocks of 32 at 1024 tokens, 4 slots (sparse past token 128),
# heads 8/2 (G = 4), d 64; the full check at 256 tokens (8 blocks, still sparse).
SEL_STAND_IN_CASE = {"dtype": "bf16", "seqlen": 1024, "heads_q": 8, "heads_kv": 2, "head_dim": 64,
                     "block_size": 32, "slots": 4}
SEL_STAND_IN_FULL_CHECK_TOKENS = 256


def sel_stand_in_checks(report):
    """The selection pieces that need torch, on the CPU: the index draw, the key count, and both checks
    against the stand-in (must pass) and its mutants (must fail)."""
    global DEVICE, SEL_FULL_CHECK_TOKENS
    saved = DEVICE, SEL_FULL_CHECK_TOKENS
    DEVICE, SEL_FULL_CHECK_TOKENS = "cpu", SEL_STAND_IN_FULL_CHECK_TOKENS
    torch.manual_seed(0)
    try:
        # The draw: distinct causal blocks, min(slots, causal blocks) of them, -1 elsewhere, -1 slots between
        # valid ones somewhere, the same for the same seed; the key count against sel_key_positions.
        n, h, s, bs = 2048, SEL_HEADS_KV, SEL_SLOTS, SEL_BLOCK_SIZE
        idx = sel_block_indices(n, h, s, bs, SEL_INDEX_SEED + n, "cpu")
        problems = []
        if not torch.equal(idx, sel_block_indices(n, h, s, bs, SEL_INDEX_SEED + n, "cpu")):
            problems.append("not repeatable")
        last = (torch.arange(n) // bs)[:, None, None]
        valid = idx >= 0
        if ((idx < -1) | (valid & (idx > last))).any():
            problems.append("a block out of range or after the diagonal")
        if not torch.equal(valid.sum(-1), torch.clamp(last[:, :, 0] + 1, max=s).expand(n, h)):
            problems.append("wrong number of blocks per row")
        ordered = idx.sort(dim=-1).values
        if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
            problems.append("a block listed twice")
        if not (valid[..., 1:] & ~valid[..., :-1]).any():
            problems.append("the -1 slots are never before a valid one (slots not shuffled)")
        counts = sel_selected_keys(idx, bs, n)
        rng = random.Random(3)
        for _ in range(200):
            t, hh = rng.randrange(n), rng.randrange(h)
            if counts[t, hh].item() != len(sel_key_positions(idx[t, hh].tolist(), t, bs, n)):
                problems.append(f"sel_selected_keys at ({t}, {hh})")
                break
        expected = h * sel_expected_keys(n, bs, s)
        if abs(counts.sum().item() / expected - 1) > 0.01:
            problems.append(f"{counts.sum().item()} keys selected, expected about {expected:.0f}")
        report(not problems, f"selection indices at {n} tokens: causal, distinct, min({s}, t // {bs} + 1) per row, "
               f"shuffled, repeatable; key counts ({counts.sum().item()} vs {expected:.0f} expected)"
               + ("; " + "; ".join(problems) if problems else ""))

        # The references agree with each other (masked dense vs gathered), forward and dq.
        c = dict(SEL_STAND_IN_CASE, op="sel_bwd")
        t = sel_tensors(c, True)
        x = {name: t[name] for name in ("q", "k", "v")}
        tokens = sel_sample_tokens(c["seqlen"], c["block_size"], SEL_SAMPLE_TOKENS, SEL_SAMPLE_SEED)
        out_m, lse_m, g_m = sel_reference_masked(x, t["block_idx"], c["block_size"], torch.float32, dout=t["dout"])
        rows = torch.tensor(tokens)
        out_g, lse_g, dq_g = sel_reference_gathered(x, t["block_idx"], tokens, c["block_size"], torch.float32,
                                                    dout=t["dout"][rows])
        errs = [finite_abs_diff(out_m[rows], out_g), finite_abs_diff(lse_m[rows], lse_g),
                finite_abs_diff(g_m["dq"][rows], dq_g)]
        report(max(errs) < 1e-4, f"selection references agree (masked dense vs gathered, {len(tokens)} tokens): "
               f"out {errs[0]:.2g}, lse {errs[1]:.2g}, dq {errs[2]:.2g}")

        # The checks: the stand-in passes; each mutant fails each check it should.
        for op in SEL_OPS:
            backward = op == "sel_bwd"
            c = dict(SEL_STAND_IN_CASE, op=op)
            for drop in (None, "causal-cut", "packed-slots"):
                lib = TorchSelStandIn(drop, ("bwd",) if backward else ("fwd",))
                for check in ("full", "row"):
                    if check == "full":
                        failure, _ = sel_check_full(c, lib, backward)
                    else:
                        t = sel_tensors(c, backward)
                        failure, _ = sel_check_row(c, lib, backward, t, sel_params(c, t))
                    what = f"{op} {check} check: " + ("the stand-in passes" if drop is None
                                                      else f"a stand-in ignoring the {drop} rule fails")
                    report((failure is None) == (drop is None),
                           what + (f" ({failure[:110]})" if failure else ""))
        # A drawn index listed twice: the library's index check must refuse the row.
        c = dict(SEL_STAND_IN_CASE, op="sel_fwd")
        t = sel_tensors(c, False)
        t["block_idx"][-1, 0, :2] = t["block_idx"][-1, 0, 2]
        failure, _ = sel_check_row(c, TorchSelStandIn(), False, t, sel_params(c, t))
        report(failure is not None and "indices" in failure,
               "sel_fwd row check: indices the library's check refuses fail the row")
    finally:
        DEVICE, SEL_FULL_CHECK_TOKENS = saved


def sel_case_problems():
    """The selection rows' invariants that need no torch: every bar has its row, sizes fit the kernel's
    contract, the FLOP counts are the brief's."""
    problems = []
    for op in SEL_OPS:
        cases = list(sel_cases(op, False))
        for dist in SEL_INDEX_DISTRIBUTIONS:
            seqlens = [c["seqlen"] for c in cases if c["index_distribution"] == dist]
            if seqlens != SEL_SEQLENS:
                problems.append(f"{op} {dist}: tokens {seqlens}")
        seqlens = [c["seqlen"] for c in cases if c["index_distribution"] == SEL_INDEX_DISTRIBUTION]
        for (bar_op, n) in SEL_BARS:
            if bar_op == op and n not in seqlens:
                problems.append(f"{op}: the bar at {n} tokens has no {SEL_INDEX_DISTRIBUTION} row")
        for c in cases:
            if c["heads_q"] % c["heads_kv"] or c["block_size"] not in (32, 64, 128):
                problems.append(f"{sel_label(c)}: not a shape aotk.h accepts")
            if sel_num_blocks(c["seqlen"], c["block_size"]) < c["slots"]:
                problems.append(f"{sel_label(c)}: fewer blocks than slots")
            keys = c["seqlen"] * c["heads_kv"] * 1000
            pairs, flops = sel_work(c, keys)
            want = 4.0 * c["seqlen"] * c["heads_q"] * 1000 * c["head_dim"] * (2.5 if op == "sel_bwd" else 1.0)
            if pairs != keys * c["heads_q"] // c["heads_kv"] or flops != want:
                problems.append(f"{sel_label(c)}: FLOPs {flops} vs 4 * tokens * heads_q * keys * d = {want}")
            if sel_dense_work(c)[1] != fwd_flops({"batch": 1, "heads_q": c["heads_q"], "seqlen_q": c["seqlen"],
                                                  "seqlen_k": c["seqlen"], "head_dim": c["head_dim"],
                                                  "causal": True}) * (2.5 if op == "sel_bwd" else 1.0):
                problems.append(f"{sel_label(c)}: the anchors' FLOPs are not the grid's count")
    for op in SEL_OPS:
        if not any(o == op and n in SEL_SEQLENS_QUICK for o, n in SEL_BARS):
            problems.append(f"{op}: --quick runs no row with a bar")
    return problems


def new_rows_problems():
    """The GQA and varlen-document rows' invariants that need no torch: shapes, token counts, FLOP counts
    (against the exact pair count of the mask), and that --ops can select them."""
    problems = []
    for op in GQA_OPS:
        cases = list(gqa_cases(op))
        if not cases:
            problems.append(f"{op}: no rows")
        for c in cases:
            if c["heads_q"] % c["heads_kv"] or c["heads_q"] == c["heads_kv"]:
                problems.append(f"{gqa_label(c)}: not a GQA shape")
            if c["batch"] * c["seqlen_q"] != TOTAL_TOKENS:
                problems.append(f"{gqa_label(c)}: {c['batch'] * c['seqlen_q']} tokens, the grid has {TOTAL_TOKENS}")
            n, d = c["seqlen_q"], c["head_dim"]
            want = 4.0 * c["batch"] * c["heads_q"] * n * n * d / (2 if c["causal"] else 1)
            if gqa_flops(c) != want * (2.5 if op == "bwd_gqa" else 1.0):
                problems.append(f"{gqa_label(c)}: FLOPs {gqa_flops(c)}, the grid's count {want}")
    for op in DOC_OPS:
        specs = list(doc_cases(op))
        keys = [(s["doc_len"], s["head_dim_qk"], s["causal"]) for s in specs]
        if len(set(keys)) != len(keys) or len(keys) != 2 * len(DOC_LENS) * len(DOC_HEAD_DIMS) \
                or not {512, 1024} <= {k[0] for k in keys} or not {64, 128} <= {k[1] for k in keys}:
            problems.append(f"{op}: rows {keys} (issue 11's: 512 and 1024 tokens, d 64 and 128, causal and not)")
        for s in specs:
            tokens = sum(s["seqlens_q"])
            if tokens != s["docs"] * s["doc_len"] or len(s["seqlens_q"]) != DOC_COUNT or s["batch"] != DOC_COUNT:
                problems.append(f"{doc_label(s)}: lengths {s['seqlens_q']}")
            if s["heads_q"] * s["head_dim_qk"] != HIDDEN or s["heads_kv"] != s["heads_q"]:
                problems.append(f"{doc_label(s)}: heads {s['heads_q']}/{s['heads_kv']}")
            # The exact pairs (each document within itself; causal: L (L + 1) / 2 per document) against
            # the grid's count that doc_flops uses (causal: half of L^2).
            pairs = spec_pairs(s)
            exact = 2.0 * pairs * 2 * s["head_dim_qk"] * (2.5 if op == "bwd_varlen" else 1.0)
            L = s["doc_len"]
            want = exact * (L / (L + 1) if s["causal"] else 1.0)
            if abs(doc_flops(s) / want - 1) > 1e-12:
                problems.append(f"{doc_label(s)}: FLOPs {doc_flops(s)} vs {want} from {pairs} pairs")
    for op in GQA_OPS + DOC_OPS:
        if op not in OPS or op not in ALL_OPS:
            problems.append(f"{op}: not selectable by --ops")
    return problems


# The varlen-document check on the CPU: 4 documents of 64 tokens, 2 heads, d 32.
DOC_STAND_IN = {"doc_len": 64, "head_dim": 32, "docs": 4, "heads": 2}


def doc_stand_in_checks(report):
    """doc_check against the torch stand-in (must pass) and against stand-ins that treat the packing as
    one sequence (varlen) or drop causal (must fail), forward and backward; then the flex document mask:
    its pairs are the rows' exact pairs, and (eager flex_attention on the CPU, where this torch has it) its
    output through the block mask and the layout conversions equals the reference's."""
    global DEVICE
    saved = DEVICE
    DEVICE = "cpu"
    torch.manual_seed(0)
    try:
        c = DOC_STAND_IN
        for op in DOC_OPS:
            backward = op == "bwd_varlen"
            for causal in (False, True):
                spec = doc_spec(op, c["doc_len"], c["head_dim"], causal, docs=c["docs"], heads=c["heads"])
                drops = [None, "varlen"] + (["causal"] if causal else [])
                for drop in drops:
                    lib = TorchStandIn(drop, ("bwd",) if backward else ("fwd",))
                    t = feature_tensors(spec)
                    if backward:
                        t["dout"] = torch.randn_like(t["out"])
                    failure, _, _ = doc_check(spec, lib, backward, t, doc_plain_tensors(spec, t))
                    what = f"{op} causal={int(causal)}: " + ("the stand-in passes the check" if drop is None
                                                               else f"a stand-in ignoring {drop} fails the check")
                    report((failure is None) == (drop is None), what + (f" ({failure[:100]})" if failure else ""))
        # The flex document mask, evaluated on every (q, kv) pair.
        for causal in (False, True):
            spec = doc_spec("fwd_varlen", c["doc_len"], c["head_dim"], causal, docs=c["docs"], heads=c["heads"])
            tokens = c["docs"] * c["doc_len"]
            doc_ids = torch.arange(tokens, dtype=torch.int32) // c["doc_len"]
            idx = torch.arange(tokens)
            mask = flex_document_mask(doc_ids, causal)(0, 0, idx[:, None], idx[None, :])
            report(int(mask.sum()) * spec["heads_q"] == spec_pairs(spec),
                   f"flex document mask causal={int(causal)}: {int(mask.sum())} pairs per head = the row's exact count")
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            print(f"  skip   flex on the CPU (no FlexAttention in this torch: {e})")
            return
        for causal in (False, True):
            spec = doc_spec("fwd_varlen", c["doc_len"], c["head_dim"], causal, docs=c["docs"], heads=c["heads"])
            tokens = c["docs"] * c["doc_len"]
            doc_ids = torch.arange(tokens, dtype=torch.int32) // c["doc_len"]
            t = feature_tensors(spec)
            try:
                bm = create_block_mask(flex_document_mask(doc_ids, causal), B=None, H=None, Q_LEN=tokens,
                                       KV_LEN=tokens, device="cpu", BLOCK_SIZE=32)
                with warnings.catch_warnings():  # "called without torch.compile": meant here
                    warnings.simplefilter("ignore")
                    out = flex_attention(*(to_bhsd(t[n]).float() for n in ("q", "k", "v")), block_mask=bm)
            except Exception as e:  # noqa: BLE001
                print(f"  skip   eager flex on the CPU causal={int(causal)} ({type(e).__name__}: {str(e)[:120]})")
                continue
            ref, _, _ = doc_reference(spec, t, torch.float32)
            err = max_abs_diff(out, doc_to_bhsd(ref))
            report(err < 1e-4, f"eager flex with the document block mask causal={int(causal)} = the reference "
                               f"(max abs diff {err:.2g})")
    finally:
        DEVICE = saved


def self_check():
    """Checks what needs no GPU. Without torch: the ctypes layout, the pair counts, the case list.
    With torch (CPU): also the reference's mask, and every feature row's check against a stand-in."""
    passed = failed = skipped = 0

    def report(ok, what):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(f"  {'ok    ' if ok else 'FAILED'} {what}", flush=True)

    # 1. The ctypes structs against the C header.
    problems = ctypes_layout_problems()
    if problems is None:
        skipped += 1
        print("  skip   ctypes layout (no C compiler or include/aotk.h here)")
    else:
        report(not problems, "ctypes structs match include/aotk.h (sizes and every offset)"
               + (": " + "; ".join(problems) if problems else ""))

    # 2. sequence_pairs against the brute-force count, on small sizes with every mask kind.
    rng = random.Random(1)
    configs = []
    for _ in range(1500):
        sq, sk = rng.randint(1, 24), rng.randint(1, 24)
        causal = rng.random() < 0.4
        align = rng.choice([AOTK_ALIGN_BOTTOM_RIGHT, AOTK_ALIGN_TOP_LEFT])
        wl = rng.choice([-1, -1, 0, 1, 2, 3, 5, 8, 30])
        wr = rng.choice([-1, 0]) if causal else rng.choice([-1, -1, 0, 1, 2, 4, 7, 30])
        configs.append((sq, sk, causal, align, wl, wr))
    bad = [c for c in configs if sequence_pairs(*c) != brute_force_pairs(*c)]
    report(not bad, f"sequence_pairs = brute-force count on {len(configs)} random small masks"
           + (f"; first mismatch {bad[0]}: {sequence_pairs(*bad[0])} vs {brute_force_pairs(*bad[0])}" if bad else ""))

    # 3. Closed forms at the benchmark's sizes.
    n, w = 16384, WINDOW_CAUSAL_LEFT
    closed = [
        ("plain 16384^2", (n, n, False, 0, -1, -1), n * n),
        ("causal square", (n, n, True, 0, -1, -1), n * (n + 1) // 2),
        ("causal top-left, 8192 q over 16384 k", (n // 2, n, True, AOTK_ALIGN_TOP_LEFT, -1, -1),
         (n // 2) * (n // 2 + 1) // 2),
        ("causal bottom-right, 8192 q over 16384 k", (n // 2, n, True, 0, -1, -1),
         (n // 2) * (n // 2) + (n // 2) * (n // 2 + 1) // 2),
        (f"causal window {w} at 16384", (n, n, True, 0, w, 0), w * (w + 1) // 2 + (n - w) * (w + 1)),
        ("window (512, 512) at 16384", (n, n, False, 0, 512, 512),
         n * 1025 - 2 * (512 * 513 // 2)),  # 1025 keys per row, minus what the two edges cut off
    ]
    for name, args, expected in closed:
        got = sequence_pairs(*args)
        report(got == expected, f"{name}: {got} pairs (closed form {expected})")

    # 4. Varlen lengths.
    for num_seqs, total, seed in ((16, 16384, VARLEN_SEED + 16384), (64, 16384, VARLEN_SEED + 4096),
                                  (CHECK_VARLEN_SEQS, CHECK_VARLEN_SEQS * CHECK_TOKENS // 4, VARLEN_SEED)):
        lengths = varlen_lengths(num_seqs, total, seed)
        spread = VARLEN_SPREAD[1] / VARLEN_SPREAD[0]
        ok = (len(lengths) == num_seqs and sum(lengths) == total and min(lengths) >= 1
              and lengths == varlen_lengths(num_seqs, total, seed)
              and max(lengths) - 1 <= spread * (min(lengths) + 1))
        report(ok, f"varlen_lengths({num_seqs}, {total}): sum, spread, repeatable "
                   f"(min {min(lengths)}, max {max(lengths)})")

    # 5. The feature rows: baselines first, FLOPs, check sizes.
    for op in ("fwd_feat", "bwd_feat"):
        specs = list(feature_cases(op, FEATURE_GRID_SEQLENS, FEATURE_HEAD_DIMS + [64]))
        problems, seen_base = [], set()
        for spec in specs:
            key = (spec["grid_seqlen"], spec["head_dim_qk"], spec["head_dim_v"])
            if spec["role"] == "base":
                seen_base.add(key)
                anchors_count = 4.0 * spec["batch"] * spec["heads_q"] * spec["seqlen_q"] * spec["seqlen_k"] * \
                    (spec["head_dim_qk"] + spec["head_dim_v"]) / 2
                if feature_flops(spec) != anchors_count * (2.5 if op == "bwd_feat" else 1.0):
                    problems.append(f"{feature_label(spec)}: FLOPs {feature_flops(spec)} vs anchors.md {anchors_count}")
            elif key not in seen_base:
                problems.append(f"{feature_label(spec)}: no plain row of its head dim before it")
            if not 0 < spec_pairs(spec) <= spec_full_pairs(spec):
                problems.append(f"{feature_label(spec)}: pairs {spec_pairs(spec)}")
            if spec["seqlens_q"] is not None and sum(spec["seqlens_q"]) != TOTAL_TOKENS:
                problems.append(f"{feature_label(spec)}: varlen tokens {sum(spec['seqlens_q'])} != {TOTAL_TOKENS}")
            if spec["causal"] and spec["window_right"] > 0:
                problems.append(f"{feature_label(spec)}: causal with window_right > 0 (aotk refuses it)")
            c = check_spec(spec)
            if max(c["seqlen_q"], c["seqlen_k"]) > CHECK_TOKENS or c["heads_q"] > CHECK_HEADS:
                problems.append(f"{feature_label(spec)}: check size {c['seqlen_q']}x{c['seqlen_k']}x{c['heads_q']}")
            if (c["feature"], c["causal"], c["causal_align"], c["window_left"], c["softcap"], c["alibi"], c["sinks"],
                    c["dropout_p"], c["seqlens_q"] is None) != (spec["feature"], spec["causal"], spec["causal_align"],
                                                                spec["window_left"], spec["softcap"], spec["alibi"],
                                                                spec["sinks"], spec["dropout_p"],
                                                                spec["seqlens_q"] is None):
                problems.append(f"{feature_label(spec)}: the check's version lost a feature")
        names = [(s["grid_seqlen"], s["head_dim_qk"], s["head_dim_v"], s["feature"]) for s in specs]
        if len(set(names)) != len(names):
            problems.append("two rows share (grid seqlen, head dims, feature)")
        report(not problems, f"{op}: {len(specs)} rows, baselines first, FLOPs, check sizes"
               + ("; " + "; ".join(problems[:5]) if problems else ""))

    # 6. The selection rows: the key-count rule against a brute-force count, the case list and bars.
    rng = random.Random(2)
    bad = []
    for _ in range(500):
        block_size, seqlen_k = rng.choice([4, 8, 32]), rng.randint(1, 200)
        blocks = [rng.randint(-2, seqlen_k // block_size + 1) for _ in range(rng.randint(1, 6))]
        position = rng.randint(0, seqlen_k - 1)
        if len(sel_key_positions(blocks, position, block_size, seqlen_k)) != \
                sel_brute_force_key_count(blocks, position, block_size, seqlen_k):
            bad.append((blocks, position, block_size, seqlen_k))
    report(not bad, "sel_key_positions = brute-force count of aotk.h's J(t, h) on 500 random rows"
           + (f"; first mismatch {bad[0]}" if bad else ""))
    problems = sel_case_problems()
    report(not problems, f"selection rows: {len(SEL_SEQLENS)} per op, bars at "
           f"{sorted({n for _, n in SEL_BARS})} tokens, FLOP counts" + ("; " + "; ".join(problems) if problems else ""))
    expected = {n: SEL_HEADS_KV * sel_expected_keys(n, SEL_BLOCK_SIZE, SEL_SLOTS) for n in SEL_SEQLENS}
    print("         expected keys per query: " + ", ".join(
        f"{n // 1024}k {e / (n * SEL_HEADS_KV):.0f} (density {e / (SEL_HEADS_KV * n * (n + 1) / 2):.3f})"
        for n, e in expected.items()))

    # 7. With torch (CPU is enough): the reference's mask keeps exactly the pairs counted.
    if torch is None:
        skipped += 1
        print("  skip   reference mask vs pair count (torch not installed here)")
    else:
        bad = []
        for sq, sk, causal, align, wl, wr in configs[:300]:
            spec = {"causal": causal, "causal_align": align, "window_left": wl, "window_right": wr}
            visible, _ = reference_mask(sq, sk, spec, "cpu")
            if int(visible.sum()) != sequence_pairs(sq, sk, causal, align, wl, wr):
                bad.append((sq, sk, causal, align, wl, wr))
        report(not bad, "reference_mask keeps exactly sequence_pairs pairs on 300 small masks"
               + (f"; first mismatch {bad[0]}" if bad else ""))

    # 8. With torch: the feature checks against a torch stand-in for libaotk (must pass) and against
    # stand-ins that each ignore one feature (must fail); the same for the selection rows' checks.
    if torch is not None:
        stand_in_checks(report)
        sel_stand_in_checks(report)

    # 8b. Issue 12's NSA index distributions (pure Python): their rules, one row at a time.
    problems = sel_nsa_distribution_problems()
    report(not problems, f"selection index distributions {', '.join(SEL_INDEX_DISTRIBUTIONS[1:])}: fixed blocks, "
           f"distinct causal picks, the topk draw's dropped future blocks, repeatable, rows per distribution"
           + ("; " + "; ".join(problems[:5]) if problems else ""))

    # 9. The GQA and varlen-document rows (issue 11): shapes, tokens, FLOPs against exact pair counts, --ops.
    problems = new_rows_problems()
    report(not problems, f"GQA rows ({', '.join(GQA_OPS)}) and varlen document rows ({', '.join(DOC_OPS)}): "
           f"shapes, tokens, FLOP counts, selectable by --ops" + ("; " + "; ".join(problems[:5]) if problems else ""))
    # 10. With torch: the varlen-document check against the stand-in and its mutants, the flex document mask.
    if torch is None:
        skipped += 1
        print("  skip   varlen document checks against the stand-in (torch not installed here)")
    else:
        doc_stand_in_checks(report)

    print(f"self-check: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


def write_results(path, doc, ops_run):
    """Writes doc to path. Rows of ops this run did not run are kept from the file already there (same
    GPU, same day), so `--features` after a grid run, or the reverse, leaves one file with both; so are
    grid rows of dtypes this run did not run."""
    kept = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
            # The grid's rows of a dtype this run left out stay too (--dtypes fp16 after a bf16 run).
            kept = [r for r in old.get("rows", []) if r.get("op") not in ops_run
                    or (r.get("op") in ("fwd", "bwd") and r.get("dtype") not in GRID_DTYPES)]
        except (OSError, ValueError) as e:
            note(f"could not read the earlier {path} ({e}); its rows are not kept")
    if kept:
        note(f"kept {len(kept)} rows of op(s) {', '.join(sorted({r['op'] for r in kept}))} from the earlier run")
    doc = dict(doc, rows=kept + doc["rows"])
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return len(doc["rows"])


ALL_OPS = list(OPS) + ["fwd_feat", "bwd_feat"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", help="path to libaotk.so (required except with --self-check)")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                    help="where <gpu>-<date>.json goes (default bench/results)")
    ap.add_argument("--head-dims", default=",".join(str(d) for d in HEAD_DIMS),
                    help="head dims of the fwd and bwd grid rows (default: %(default)s)")
    ap.add_argument("--dtypes", default=",".join(GRID_DTYPES),
                    help="dtypes of the fwd and bwd grid rows, of bf16, fp16 (default: %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="grid: only seqlen 1024 and 4096; features: only grid seqlen 4096; selection: only 8k "
                         "and 16k tokens (smoke test)")
    ap.add_argument("--ops", default=",".join(ALL_OPS), help=f"comma-separated ops to run, of: {', '.join(ALL_OPS)}")
    ap.add_argument("--features", action="store_true", help="run only the feature rows (--ops fwd_feat,bwd_feat)")
    ap.add_argument("--selection", action="store_true",
                    help="run only the selection-attention rows (--ops sel_fwd,sel_bwd)")
    ap.add_argument("--feature-head-dims", default=",".join(str(d) for d in FEATURE_HEAD_DIMS),
                    help="head dims the feature rows run at (default %(default)s; the plain rows of every head "
                         "dim run regardless)")
    ap.add_argument("--flex", action="store_true",
                    help="grid rows (fwd, bwd): also time FlexAttention (torch.compile'd, one compile per shape and "
                         "mask: minutes over the whole grid); the GQA and varlen rows time it regardless")
    ap.add_argument("--varlen-doc-lens", default=",".join(str(n) for n in DOC_LENS),
                    help="document lengths of the varlen rows (fwd_varlen, bwd_varlen), 16 documents each "
                         "(default: %(default)s)")
    ap.add_argument("--varlen-head-dims", default=",".join(str(d) for d in DOC_HEAD_DIMS),
                    help="head dims of the varlen rows, heads = 2048 / head dim (default: %(default)s)")
    ap.add_argument("--sel-distributions", default=",".join(SEL_INDEX_DISTRIBUTIONS),
                    help="index distributions of the selection rows (sel_fwd, sel_bwd), of: "
                         + ", ".join(SEL_INDEX_DISTRIBUTIONS) + " (default: all)")
    ap.add_argument("--nsa-path", default=None,
                    help="selection rows: a checkout of XunhaoLai/native-sparse-attention-triton (in a folder git "
                         "ignores); its topk_sparse_attention is checked against aotk and timed on the same inputs, "
                         "and aotk's rows record the ratio (issue 12's anchor)")
    ap.add_argument("--no-flex", action="store_true",
                    help="GQA and varlen rows: leave FlexAttention out (no torch.compile in the run)")
    ap.add_argument("--self-check", action="store_true",
                    help="no GPU, no torch: check the pair counts, the feature rows and the ctypes layout, then exit")
    args = ap.parse_args(argv)

    if args.self_check:
        return self_check()
    if args.flex and args.no_flex:
        ap.error("--flex and --no-flex contradict each other")
    FLEX_OPTIONS["grid"] = args.flex
    FLEX_OPTIONS["rows"] = not args.no_flex
    if args.flex and "flex" not in IMPLS:
        IMPLS.append("flex")
    if args.features and args.selection:
        ap.error("--features and --selection each choose the ops: give one, or --ops fwd_feat,bwd_feat,sel_fwd,sel_bwd")
    if args.features:
        ops = ["fwd_feat", "bwd_feat"]
    elif args.selection:
        ops = list(SEL_OPS)
    else:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in ALL_OPS:
            ap.error(f"unknown op {o!r}; known: {', '.join(ALL_OPS)}")
    try:
        feature_head_dims = [int(x) for x in args.feature_head_dims.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--feature-head-dims {args.feature_head_dims!r}: give comma-separated integers")
    GRID_DTYPES[:] = [x.strip() for x in args.dtypes.split(",") if x.strip()]
    if not GRID_DTYPES or any(x not in ("bf16", "fp16") for x in GRID_DTYPES):
        ap.error(f"--dtypes {args.dtypes!r}: give bf16, fp16 or both")
    try:
        HEAD_DIMS[:] = [int(x) for x in args.head_dims.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--head-dims {args.head_dims!r}: give comma-separated integers")
    for name, target in (("varlen_doc_lens", DOC_LENS), ("varlen_head_dims", DOC_HEAD_DIMS)):
        try:
            target[:] = [int(x) for x in getattr(args, name).split(",") if x.strip()]
        except ValueError:
            target[:] = []
        if not target or min(target) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)!r}: give comma-separated positive integers")
    SEL_OPTIONS["distributions"] = [x.strip() for x in args.sel_distributions.split(",") if x.strip()]
    if not SEL_OPTIONS["distributions"] or any(x not in SEL_INDEX_DISTRIBUTIONS for x in SEL_OPTIONS["distributions"]):
        ap.error(f"--sel-distributions {args.sel_distributions!r}: give some of {', '.join(SEL_INDEX_DISTRIBUTIONS)}")
    if args.lib is None:
        ap.error("--lib is required (except with --self-check)")
    if torch is None:
        sys.exit(f"bench_attn.py needs torch and triton ({TORCH_IMPORT_ERROR}); --self-check runs without them")
    if not torch.cuda.is_available():
        sys.exit("bench_attn.py needs a CUDA GPU (torch.cuda.is_available() is False)")

    if args.nsa_path is not None:
        try:
            NSA_OPTIONS["path"], NSA_OPTIONS["fn"] = args.nsa_path, load_public_nsa(args.nsa_path)
        except Exception as e:  # noqa: BLE001
            sys.exit(f"--nsa-path {args.nsa_path!r}: cannot load topk_sparse_attention: {type(e).__name__}: {e}")
    aotk = Aotk(args.lib)
    try:
        aotk_triton = aotk.build_info()["triton_version"]
    except (AotkError, AttributeError) as e:
        note(f"no build info: {e}")
        aotk_triton = None
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    print(f"gpu {gpu}, torch {torch.__version__}, triton {triton.__version__}, "
          f"aotk {aotk.version()} (kernels compiled by triton {aotk_triton})", flush=True)

    torch.manual_seed(0)
    random.seed(0)
    rows, lines, failures = [], [], []
    feature_lines, bar_lines = [], []
    op_tables = {}  # an op's "print" -> (its table lines, its bar lines), in the order the ops ran
    # Geomeans per grid op and dtype (a run of several reports each apart, never one mixed figure).
    r_flash_all, r_best_all, r_det_all = {}, {}, {}
    # Issue 11's bar range: head dims 64 and 128 from 1024 rows on (geomean and lowest row).
    r_bar = {}
    for op in ops:
        if op in ("fwd_feat", "bwd_feat"):
            seqlens = FEATURE_GRID_SEQLENS_QUICK if args.quick else FEATURE_GRID_SEQLENS
            f_rows, f_lines, f_failures, f_bar = run_feature_op(op, seqlens, feature_head_dims, aotk)
            rows += f_rows
            feature_lines += f_lines
            failures += f_failures
            bar_lines += f_bar
            continue
        spec = OPS[op]
        if "run_op" in spec:
            o_rows, o_lines, o_failures, o_bar = spec["run_op"](op, args.quick, aotk)
            rows += o_rows
            table_lines, table_bars = op_tables.setdefault(spec["print"], ([], []))
            table_lines += o_lines
            failures += o_failures
            table_bars += o_bar
            continue
        for case in spec["cases"](args.quick):
            print(f"\n{case_label(case)}", flush=True)
            ms, failure = spec["run"](case, aotk)
            torch.cuda.empty_cache()
            flops = spec["flops"](case)
            tfl = {}
            for impl in IMPLS:
                if impl not in ms:
                    continue
                tfl[impl] = flops / ms[impl] / 1e9
                rows.append({
                    "op": case["op"], "impl": impl, "dtype": DTYPE_NAMES[case["dtype"]],
                    "head_dim": case["head_dim"], "causal": bool(case["causal"]),
                    "seqlen_q": case["seqlen_q"], "seqlen_k": case["seqlen_k"], "batch": case["batch"],
                    "heads_q": case["heads_q"], "heads_kv": case["heads_kv"],
                    "ms": ms[impl], "tflops": round(tfl[impl], 2),
                })
            if failure:
                failures.append(f"{case_label(case)}: {failure}")
            r_flash, r_best = ratios(tfl)
            if r_flash:
                r_flash_all.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(r_flash)
            if r_best:
                r_best_all.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(r_best)
                if case["head_dim"] in (64, 128) and case["seqlen_q"] >= 1024:
                    r_bar.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(r_best)
            sdpa = [tfl[name] for name, _ in SDPA_BACKENDS if name in tfl]
            if "aotk-det" in tfl and sdpa:
                r_det_all.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(tfl["aotk-det"] / max(sdpa))
            line = table_line(case, tfl, failure)
            lines.append(line)
            print(table_head())
            print(line, flush=True)

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"{gpu_slug(gpu)}-{date}.json")
    doc = {"gpu": gpu, "date": date, "triton": triton.__version__, "aotk_triton": aotk_triton,
           "torch": torch.__version__, "rows": rows}
    total_rows = write_results(path, doc, set(ops))

    summary = []
    for (op, dt), xs in r_flash_all.items():
        summary.append(f"{op} {dt}: geomean aotk/sdpa-flash {geomean(xs):.2f}x over {len(xs)} rows")
    for (op, dt), xs in r_best_all.items():
        summary.append(f"{op} {dt}: geomean aotk/best-sdpa  {geomean(xs):.2f}x over {len(xs)} rows")
    for (op, dt), xs in r_bar.items():
        summary.append(f"{op} {dt}: d64/d128 from 1024 rows (issue 11's bar range): aotk/best-sdpa geomean "
                       f"{geomean(xs):.3f}x, lowest {min(xs):.3f}x over {len(xs)} rows")
    for (op, dt), xs in r_det_all.items():
        summary.append(f"{op} {dt}: geomean aotk-det/best-sdpa {geomean(xs):.2f}x over {len(xs)} rows "
                       "(the deterministic backward)")
    summary.append(f"wrote {path} ({len(rows)} rows from this run, {total_rows} in the file)")
    if failures:
        summary.append(f"{len(failures)} FAILED row(s):")
        summary.extend(f"  {f_}" for f_ in failures)
    if lines:
        print_table(lines, [])
    if feature_lines:
        print_feature_table(feature_lines, bar_lines)
    for print_op_table, (table_lines, table_bars) in op_tables.items():
        if table_lines:
            print_op_table(table_lines, table_bars)
    for line in summary:
        print(line)
    sys.stdout.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of aotk's attention kernels against torch SDPA's backends, on the GPU machine.

    python3 bench/bench_attn.py --lib path/to/libaotk.so --out-dir bench/results [--quick] [--features]
    python3 bench/bench_attn.py --self-check          # any machine: no GPU, torch optional

Calls libaotk.so through ctypes (the structs of include/aotk.h are declared below) and times it beside
torch SDPA's flash, cuDNN and memory-efficient backends on the same inputs, in one process, on the grid
of /work/shared/notes/anchors.md: bf16, head_dim 64 and 128, seqlen 512 ... 16384, batch = 16384 / seqlen,
heads = 2048 / head_dim, causal and not. Each row's aotk output (and lse) is checked against SDPA
before anything is timed. Prints a table and writes <out-dir>/<gpu>-<date>.json (see bench/README.md).

Ops: "fwd" (aotk_attn_fwd against SDPA's flash, cuDNN and efficient forwards) and "bwd" (aotk_attn_bwd
against the flash and cuDNN backwards, each timed alone after its own forward); the OPS registry holds them.
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
import traceback

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
AOTK_ALIGN_BOTTOM_RIGHT = 0
AOTK_ALIGN_TOP_LEFT = 1
AOTK_FEATURE_NAMES = ["varlen", "causal", "window", "softcap", "alibi", "sinks", "dropout", "padded_head_dim",
                      "extras_kernel"]  # AOTK_FEATURE_* bit i

TORCH_TO_AOTK_DTYPE = {
    torch.float16: AOTK_DTYPE_FLOAT16,
    torch.bfloat16: AOTK_DTYPE_BFLOAT16,
    torch.float32: AOTK_DTYPE_FLOAT32,
    torch.int32: AOTK_DTYPE_INT32,
    torch.int64: AOTK_DTYPE_INT64,
    torch.uint8: AOTK_DTYPE_UINT8,
} if torch is not None else {}


class AotkTensor(ctypes.Structure):
    # typedef struct aotk_tensor { void *data; aotk_dtype dtype; int32_t rank;
    #                              int64_t shape[6]; int64_t strides[6]; } aotk_tensor;
    # aotk_dtype is a C enum with small values: int-sized (4 bytes) on every ABI the library targets.
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * AOTK_TENSOR_MAX_RANK),
        ("strides", ctypes.c_int64 * AOTK_TENSOR_MAX_RANK),
    ]


class AotkAttnParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", AotkTensor),
        ("k", AotkTensor),
        ("v", AotkTensor),
        ("out", AotkTensor),
        ("lse", AotkTensor),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("dout", AotkTensor),
        ("dq", AotkTensor),
        ("dk", AotkTensor),
        ("dv", AotkTensor),
        ("deterministic", ctypes.c_int32),
        # Added in 0.2.
        ("cu_seqlens_q", AotkTensor),
        ("cu_seqlens_k", AotkTensor),
        ("max_seqlen_q", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("causal_align", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", AotkTensor),
        ("sinks", AotkTensor),
        ("dsinks", AotkTensor),
        ("dropout_p", ctypes.c_float),
        ("rng_state", AotkTensor),
        ("dropout_mask", AotkTensor),
    ]


class AotkKernelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kernel_name", ctypes.c_char * 96),
        ("arch", ctypes.c_int32),
        ("from_ptx", ctypes.c_int32),
        ("num_warps", ctypes.c_int32),
        ("shared_bytes", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("block_n", ctypes.c_int32),
        ("aligned", ctypes.c_int32),
        ("grid", ctypes.c_int64),
        ("workspace_bytes", ctypes.c_size_t),
        ("launches", ctypes.c_int32),
        # Added in 0.2.
        ("head_dim_qk", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("features", ctypes.c_uint32),
    ]


class AotkBuildInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("triton_version", ctypes.c_char_p),
        ("ptxas_version", ctypes.c_char_p),
        ("kernels_sm80", ctypes.c_int32),
        ("kernels_sm90", ctypes.c_int32),
        ("image_bytes_sm80", ctypes.c_int64),
        ("image_bytes_sm90", ctypes.c_int64),
        ("catalog_kernels", ctypes.c_int32),
    ]


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

    def query(self, op, params):
        info = AotkKernelInfo()
        info.struct_size = ctypes.sizeof(AotkKernelInfo)
        self.check(self.lib.aotk_query(op, ctypes.byref(params), ctypes.byref(info)), "aotk_query")
        return {"kernel_name": _decode(info.kernel_name), "arch": info.arch, "from_ptx": info.from_ptx,
                "workspace_bytes": info.workspace_bytes, "launches": info.launches,
                "head_dim_qk": info.head_dim_qk, "head_dim_v": info.head_dim_v,
                "features": [n for i, n in enumerate(AOTK_FEATURE_NAMES) if info.features >> i & 1]}

    def attn_fwd(self, params_ref, stream):
        """params_ref: ctypes.byref(AotkAttnParams); stream: a CUDA stream handle (int, 0 = legacy)."""
        status = self._fwd(params_ref, stream)
        if status != AOTK_OK:
            self.check(status, "aotk_attn_fwd")


    def attn_bwd(self, params_ref, workspace, workspace_bytes, stream):
        status = self.lib.aotk_attn_bwd(params_ref, workspace, workspace_bytes, stream)
        if status != AOTK_OK:
            self.check(status, "aotk_attn_bwd")


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
IMPLS = ["aotk"] + [name for name, _ in SDPA_BACKENDS]

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
SEQLENS_QUICK = [1024, 4096]
HEAD_DIMS = [64, 128]
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
    for d in HEAD_DIMS:
        for causal in (False, True):
            for n in seqlens:
                h = HIDDEN // d
                yield {"op": "fwd", "dtype": torch.bfloat16, "head_dim": d, "causal": causal,
                       "seqlen_q": n, "seqlen_k": n, "batch": TOTAL_TOKENS // n, "heads_q": h, "heads_kv": h}


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
        params.deterministic = 1
        params_ref = ctypes.byref(params)
        failure = None
        try:
            aotk.attn_fwd(params_ref, current_stream())
            info = aotk.query(AOTK_OP_ATTN_BWD, params)
            note(f"aotk kernels {info['kernel_name']} + dq + preprocess, workspace {info['workspace_bytes']} bytes")
            workspace = torch.empty(max(info["workspace_bytes"], 16), device="cuda", dtype=torch.uint8)
            for t in (dq, dk, dv):
                t.fill_(float("nan"))
            aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
            torch.cuda.synchronize()
        except AotkError as e:
            loud(f"aotk FAILED on {case_label(case)}: {e}")
            return results, f"aotk raised: {e}"
        errs = {name: rel_l2(t, ref_grads[name]) for name, t in (("dq", dq), ("dk", dk), ("dv", dv))}
        if not all(e_ < BWD_REL_TOL for e_ in errs.values()):
            msg = f"aotk gradients differ from sdpa-flash's: relative L2 {errs} (tolerance {BWD_REL_TOL})"
            loud(f"ROW ABORTED, {case_label(case)}: {msg}")
            return {}, msg
        note("aotk checked against sdpa-flash: relative L2 " + ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items()))
        try:
            results["aotk"] = time_ms(lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"],
                                                            current_stream()))
        except AotkError as e:
            failure = f"aotk raised while timing: {e}"
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


# The op registry: each op says how to enumerate its cases, run one case, and count its FLOPs.
OPS = {
    "fwd": {"cases": fwd_cases, "run": fwd_run_case, "flops": fwd_flops},
    "bwd": {"cases": bwd_cases, "run": bwd_run_case, "flops": bwd_flops},
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


TABLE_HEAD = (f"{'op':>4} {'d':>4} {'causal':>6} {'seqlen':>6} |"
              + "".join(f" {name:>14}" for name in IMPLS) + f" | {'aotk/flash':>10} {'aotk/best':>10}")


def table_line(case, tfl, failure):
    s = (f"{case['op']:>4} {case['head_dim']:>4} {('yes' if case['causal'] else 'no'):>6} "
         f"{case['seqlen_q']:>6} |")
    s += "".join(f" {tfl[name]:>14.1f}" if name in tfl else f" {'-':>14}" for name in IMPLS)
    r_flash, r_best = ratios(tfl)
    s += " | " + (f"{r_flash:>9.2f}x" if r_flash else f"{'-':>10}") + " " + (
        f"{r_best:>9.2f}x" if r_best else f"{'-':>10}")
    if failure:
        s += f"   FAILED: {failure}"
    return s


def print_table(lines, summary):
    print("\nTFLOP/s (forward: 4*b*h*sq*sk*d, halved for causal; backward: 2.5 x forward); ratios are aotk's "
          "TFLOP/s over the SDPA one's")
    print(TABLE_HEAD)
    print("-" * len(TABLE_HEAD))
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
               ("aotk_kernel_info", AotkKernelInfo), ("aotk_build_info", AotkBuildInfo)]
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
            elif d == "varlen":  # one sequence across the packed ones (the keep mask no longer fits: dropped)
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

    # 6. With torch (CPU is enough): the reference's mask keeps exactly the pairs counted.
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

    # 7. With torch: the feature checks against a torch stand-in for libaotk (must pass) and against
    # stand-ins that each ignore one feature (must fail).
    if torch is not None:
        stand_in_checks(report)

    print(f"self-check: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


def write_results(path, doc, ops_run):
    """Writes doc to path. Rows of ops this run did not run are kept from the file already there (same
    GPU, same day), so `--features` after a grid run, or the reverse, leaves one file with both."""
    kept = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
            kept = [r for r in old.get("rows", []) if r.get("op") not in ops_run]
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
    ap.add_argument("--quick", action="store_true",
                    help="grid: only seqlen 1024 and 4096; features: only grid seqlen 4096 (smoke test)")
    ap.add_argument("--ops", default=",".join(ALL_OPS), help=f"comma-separated ops to run, of: {', '.join(ALL_OPS)}")
    ap.add_argument("--features", action="store_true", help="run only the feature rows (--ops fwd_feat,bwd_feat)")
    ap.add_argument("--feature-head-dims", default=",".join(str(d) for d in FEATURE_HEAD_DIMS),
                    help="head dims the feature rows run at (default %(default)s; the plain rows of every head "
                         "dim run regardless)")
    ap.add_argument("--self-check", action="store_true",
                    help="no GPU, no torch: check the pair counts, the feature rows and the ctypes layout, then exit")
    args = ap.parse_args(argv)

    if args.self_check:
        return self_check()
    ops = ["fwd_feat", "bwd_feat"] if args.features else [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in ALL_OPS:
            ap.error(f"unknown op {o!r}; known: {', '.join(ALL_OPS)}")
    try:
        feature_head_dims = [int(x) for x in args.feature_head_dims.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--feature-head-dims {args.feature_head_dims!r}: give comma-separated integers")
    if args.lib is None:
        ap.error("--lib is required (except with --self-check)")
    if torch is None:
        sys.exit(f"bench_attn.py needs torch and triton ({TORCH_IMPORT_ERROR}); --self-check runs without them")
    if not torch.cuda.is_available():
        sys.exit("bench_attn.py needs a CUDA GPU (torch.cuda.is_available() is False)")

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
    r_flash_all, r_best_all = [], []
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
                r_flash_all.append(r_flash)
            if r_best:
                r_best_all.append(r_best)
            line = table_line(case, tfl, failure)
            lines.append(line)
            print(TABLE_HEAD)
            print(line, flush=True)

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"{gpu_slug(gpu)}-{date}.json")
    doc = {"gpu": gpu, "date": date, "triton": triton.__version__, "aotk_triton": aotk_triton,
           "torch": torch.__version__, "rows": rows}
    total_rows = write_results(path, doc, set(ops))

    summary = []
    if r_flash_all:
        summary.append(f"geomean aotk/sdpa-flash {geomean(r_flash_all):.2f}x over {len(r_flash_all)} rows")
    if r_best_all:
        summary.append(f"geomean aotk/best-sdpa  {geomean(r_best_all):.2f}x over {len(r_best_all)} rows")
    summary.append(f"wrote {path} ({len(rows)} rows from this run, {total_rows} in the file)")
    if failures:
        summary.append(f"{len(failures)} FAILED row(s):")
        summary.extend(f"  {f_}" for f_ in failures)
    if lines:
        print_table(lines, [])
    if feature_lines:
        print_feature_table(feature_lines, bar_lines)
    for line in summary:
        print(line)
    sys.stdout.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

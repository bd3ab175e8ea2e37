"""Benchmark of aotk's attention kernels against torch SDPA's backends, on the GPU machine.

    python3 bench/bench_attn.py --lib path/to/libaotk.so --out-dir bench/results [--quick]

Calls libaotk.so through ctypes (the structs of include/aotk.h are declared below) and times it beside
torch SDPA's flash, cuDNN and memory-efficient backends on the same inputs, in one process, on the grid
of /work/shared/notes/anchors.md: bf16, head_dim 64 and 128, seqlen 512 ... 16384, batch = 16384 / seqlen,
heads = 2048 / head_dim, causal and not. Each row's aotk output (and lse) is checked against SDPA
before anything is timed. Prints a table and writes <out-dir>/<gpu>-<date>.json (see bench/README.md).

Ops: "fwd" (aotk_attn_fwd against SDPA's flash, cuDNN and efficient forwards) and "bwd" (aotk_attn_bwd
against the flash and cuDNN backwards, each timed alone after its own forward); the OPS registry holds them.
Importable without a GPU: all work happens in main().
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


def current_stream():
    return torch.cuda.current_stream().cuda_stream


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


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def gpu_slug(name):
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in name.lower())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="path to libaotk.so")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                    help="where <gpu>-<date>.json goes (default bench/results)")
    ap.add_argument("--quick", action="store_true", help="only seqlen 1024 and 4096 (smoke test)")
    ap.add_argument("--ops", default="fwd,bwd", help=f"comma-separated ops to run, of: {', '.join(OPS)}")
    args = ap.parse_args(argv)

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in OPS:
            ap.error(f"unknown op {o!r}; known: {', '.join(OPS)}")
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
    rows, lines, failures = [], [], []
    r_flash_all, r_best_all = [], []
    for op in ops:
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
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    summary = []
    if r_flash_all:
        summary.append(f"geomean aotk/sdpa-flash {geomean(r_flash_all):.2f}x over {len(r_flash_all)} rows")
    if r_best_all:
        summary.append(f"geomean aotk/best-sdpa  {geomean(r_best_all):.2f}x over {len(r_best_all)} rows")
    summary.append(f"wrote {path} ({len(rows)} rows)")
    if failures:
        summary.append(f"{len(failures)} FAILED row(s):")
        summary.extend(f"  {f_}" for f_ in failures)
    print_table(lines, summary)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

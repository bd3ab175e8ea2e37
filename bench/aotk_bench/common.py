"""include/aotk.h through ctypes (libaotk.so's functions and structs), timing, and the pieces every op
shares: SDPA's backends, the grid's sizes, the checks' tolerances, the notes printed."""
import ctypes
import os

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
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "aotk", "_capi.py")
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
# the CPU against a torch stand-in for libaotk. The other modules read it as common.DEVICE, so that the
# self-check's setting reaches them (as it sets features.CHECK_TOKENS and the like).
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


BWD_REL_TOL = 1e-2  # relative L2 error of dq, dk, dv against sdpa-flash's (both bf16: ~3e-3 expected)


def rel_l2(a, b):
    a, b = a.float(), b.float()
    if torch.isnan(a).any():
        return float("nan")
    return ((a - b).norm() / b.norm()).item()


def case_label(case):
    return (f"{case['op']} {DTYPE_NAMES[case['dtype']]} d={case['head_dim']} causal={int(case['causal'])} "
            f"seqlen={case['seqlen_q']} batch={case['batch']} heads={case['heads_q']}")


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

"""include/aotk.h through ctypes: the structs, the library loader, and the status-to-exception rule.

Nothing here imports torch or needs a GPU: `import aotk`, aotk.version() and aotk.build_info() run on
any machine that has the library file. The structs mirror aotk.h field for field; the CPU test
(tests/python/test_python_cpu.py) compiles a probe of the header's offsetof/sizeof and compares.
"""
import ctypes
import os
import threading

AOTK_OK = 0
AOTK_ERROR_NO_CONTEXT = 18

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
AOTK_OP_DECODE = 5
AOTK_OP_MERGE = 6

AOTK_DECODE_MAX_SPLITS = 256
AOTK_DECODE_MAX_SEQLEN_Q = 16

AOTK_ALIGN_BOTTOM_RIGHT = 0
AOTK_ALIGN_TOP_LEFT = 1

AOTK_IMAGE_POLICY_AUTO = 0
AOTK_IMAGE_POLICY_SM80_PTX = 1

# AOTK_FEATURE_* bit i is FEATURE_NAMES[i].
FEATURE_NAMES = ("varlen", "causal", "window", "softcap", "alibi", "sinks", "dropout", "padded_head_dim",
                 "extras_kernel", "tma", "warp_specialized", "nondeterministic", "paged_kv", "split_kv", "append_kv",
                 "leftpad_kv")

LIBRARY_ENV = "AOTK_LIBRARY"
LIBRARY_FILE = "libaotk.so"


class AotkTensor(ctypes.Structure):
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


class AotkSelParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", AotkTensor),
        ("k", AotkTensor),
        ("v", AotkTensor),
        ("out", AotkTensor),
        ("lse", AotkTensor),
        ("cu_seqlens_q", AotkTensor),
        ("cu_seqlens_k", AotkTensor),
        ("max_seqlen_k", ctypes.c_int32),
        ("block_size", ctypes.c_int32),
        ("block_idx", AotkTensor),
        ("block_cnt", AotkTensor),
        ("softmax_scale", ctypes.c_float),
        # The backward's; ignored by the forward.
        ("dout", AotkTensor),
        ("dq", AotkTensor),
        ("dk", AotkTensor),
        ("dv", AotkTensor),
    ]


class AotkDecodeParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", AotkTensor),
        ("k_cache", AotkTensor),
        ("v_cache", AotkTensor),
        ("block_table", AotkTensor),
        ("cache_seqlens", AotkTensor),
        ("out", AotkTensor),
        ("lse", AotkTensor),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", AotkTensor),
        ("sinks", AotkTensor),
        ("num_splits", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        # Appending (given together): the step's keys and values, written into the caches first.
        ("k_new", AotkTensor),
        ("v_new", AotkTensor),
        # Packed queries (a prefill over the cache): int32 [batch + 1], and the longest request's tokens.
        ("cu_seqlens_q", AotkTensor),
        ("max_seqlen_q", ctypes.c_int32),
        # Left-padded caches: int32 [batch], request b's first key row.
        ("cache_leftpad", AotkTensor),
    ]


class AotkMergeParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("out_partials", AotkTensor),
        ("lse_partials", AotkTensor),
        ("out", AotkTensor),
        ("lse", AotkTensor),
        ("sinks", AotkTensor),
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
        # Added in 0.4.
        ("num_splits", ctypes.c_int32),
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


# The structs above, by their C names (the layout check's list).
STRUCTS = (("aotk_tensor", AotkTensor), ("aotk_attn_params", AotkAttnParams), ("aotk_sel_params", AotkSelParams),
           ("aotk_decode_params", AotkDecodeParams), ("aotk_merge_params", AotkMergeParams),
           ("aotk_kernel_info", AotkKernelInfo), ("aotk_build_info", AotkBuildInfo))


def attn_params():
    """An AotkAttnParams as AOTK_ATTN_PARAMS_INIT makes it: struct_size set, both windows -1 (a zeroed
    struct would mean a window of the diagonal only), everything else 0 (off, or an absent tensor)."""
    p = AotkAttnParams()
    p.struct_size = ctypes.sizeof(AotkAttnParams)
    p.window_left = -1
    p.window_right = -1
    return p


def sel_params():
    """An AotkSelParams as AOTK_SEL_PARAMS_INIT makes it."""
    p = AotkSelParams()
    p.struct_size = ctypes.sizeof(AotkSelParams)
    return p


def decode_params():
    """An AotkDecodeParams as AOTK_DECODE_PARAMS_INIT makes it: struct_size set, both windows -1,
    everything else 0 (num_splits 0: aotk chooses; max_seqlen_k 0: the cache's capacity)."""
    p = AotkDecodeParams()
    p.struct_size = ctypes.sizeof(AotkDecodeParams)
    p.window_left = -1
    p.window_right = -1
    return p


def merge_params():
    """An AotkMergeParams as AOTK_MERGE_PARAMS_INIT makes it."""
    p = AotkMergeParams()
    p.struct_size = ctypes.sizeof(AotkMergeParams)
    return p


def kernel_info():
    """An AotkKernelInfo as AOTK_KERNEL_INFO_INIT makes it."""
    info = AotkKernelInfo()
    info.struct_size = ctypes.sizeof(AotkKernelInfo)
    return info


def _bytes_to_str(b):
    return b.decode("utf-8", "replace") if b is not None else ""


class AotkError(RuntimeError):
    """A call into libaotk.so failed, or the library could not be loaded.

    status: the aotk_status value (None when the library itself could not be loaded);
    status_name: its enumerator's name ("AOTK_ERROR_UNSUPPORTED_HEAD_DIM");
    detail: aotk_last_error()'s message naming the offending argument;
    hint: aotk_status_string(), what the status means and what to do;
    cuda_result: aotk_last_cuda_result(), the raw CUresult for AOTK_ERROR_CUDA (else 0).
    """

    def __init__(self, message, status=None, status_name="", detail="", hint="", cuda_result=0):
        super().__init__(message)
        self.status = status
        self.status_name = status_name
        self.detail = detail
        self.hint = hint
        self.cuda_result = cuda_result


class Library:
    """libaotk.so with every function's signature declared; `check` turns a status into AotkError."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        status = ctypes.c_int  # aotk_status: a C enum, int-sized
        attn = ctypes.POINTER(AotkAttnParams)
        sel = ctypes.POINTER(AotkSelParams)
        decode = ctypes.POINTER(AotkDecodeParams)
        merge = ctypes.POINTER(AotkMergeParams)
        info = ctypes.POINTER(AotkKernelInfo)
        signatures = {
            "aotk_status_name": ([status], ctypes.c_char_p),
            "aotk_status_string": ([status], ctypes.c_char_p),
            "aotk_last_error": ([], ctypes.c_char_p),
            "aotk_last_cuda_result": ([], ctypes.c_int),
            "aotk_version_number": ([], ctypes.c_uint),
            "aotk_version_string": ([], ctypes.c_char_p),
            "aotk_attn_fwd": ([attn, ctypes.c_void_p], status),
            "aotk_attn_bwd": ([attn, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], status),
            "aotk_query": ([ctypes.c_int, attn, info], status),
            "aotk_sel_fwd": ([sel, ctypes.c_void_p], status),
            "aotk_sel_bwd": ([sel, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], status),
            "aotk_sel_query": ([ctypes.c_int, sel, info], status),
            "aotk_sel_check_indices": ([sel, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], status),
            # Added in 0.4.
            "aotk_attn_decode": ([decode, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], status),
            "aotk_decode_query": ([ctypes.c_int, decode, info], status),
            "aotk_attn_merge": ([merge, ctypes.c_void_p], status),
            "aotk_merge_query": ([ctypes.c_int, merge, info], status),
            "aotk_preload": ([], status),
            "aotk_set_image_policy": ([ctypes.c_int], status),
            "aotk_get_build_info": ([ctypes.POINTER(AotkBuildInfo)], status),
            "aotk_self_test": ([ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t], status),
        }
        missing = [name for name in signatures if not hasattr(lib, name)]
        if missing:
            raise AotkError(f"{path} lacks {', '.join(missing)}: this package needs libaotk 0.4 or newer")
        for name, (argtypes, restype) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = restype
        self.lib = lib

    def error(self, status, what):
        """The AotkError for a failed call `what` (read on the thread that made the call)."""
        name = _bytes_to_str(self.lib.aotk_status_name(status))
        detail = _bytes_to_str(self.lib.aotk_last_error())
        hint = _bytes_to_str(self.lib.aotk_status_string(status))
        cuda_result = self.lib.aotk_last_cuda_result()
        message = f"{what}: {name}: {detail or hint}"
        if detail and hint:
            message += f" ({hint})"
        if cuda_result:
            message += f" [CUresult {cuda_result}]"
        return AotkError(message, status=status, status_name=name, detail=detail, hint=hint,
                         cuda_result=cuda_result)

    def check(self, status, what):
        if status != AOTK_OK:
            raise self.error(status, what)

    def query(self, op, params):
        """What a call would run, as an AotkKernelInfo: aotk_query for AOTK_OP_ATTN_* (params an
        AotkAttnParams), aotk_sel_query for AOTK_OP_SEL_* (AotkSelParams), aotk_decode_query for
        AOTK_OP_DECODE (AotkDecodeParams), aotk_merge_query for AOTK_OP_MERGE (AotkMergeParams)."""
        info = kernel_info()
        name = {AOTK_OP_SEL_FWD: "aotk_sel_query", AOTK_OP_SEL_BWD: "aotk_sel_query",
                AOTK_OP_DECODE: "aotk_decode_query", AOTK_OP_MERGE: "aotk_merge_query"}.get(op, "aotk_query")
        self.check(getattr(self.lib, name)(op, ctypes.byref(params), ctypes.byref(info)), name)
        return info


_library = None
_library_lock = threading.Lock()


def library_candidates():
    """Where the library is looked for, in order: $AOTK_LIBRARY when set (an explicit choice wins),
    then libaotk.so beside this package (the copy that the build tree and an installed package hold)."""
    candidates = []
    env = os.environ.get(LIBRARY_ENV, "")
    if env:
        candidates.append((os.path.abspath(env), f"${LIBRARY_ENV}"))
        return candidates  # set but wrong must fail loudly, not fall through to another copy
    candidates.append((os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_FILE), "beside the package"))
    return candidates


def library():
    """The loaded Library (loaded once per process, on first use). Raises AotkError saying where it
    looked when no library could be loaded."""
    global _library
    if _library is not None:
        return _library
    with _library_lock:
        if _library is None:
            problems = []
            for path, origin in library_candidates():
                if not os.path.exists(path):
                    problems.append(f"{path} ({origin}): no such file")
                    continue
                try:
                    _library = Library(path)
                    break
                except OSError as e:
                    problems.append(f"{path} ({origin}): {e}")
            else:
                raise AotkError("libaotk.so could not be loaded: " + "; ".join(problems) +
                                f". Build it (`make`) and install the package from build/python, or point "
                                f"{LIBRARY_ENV} at a libaotk.so.")
    return _library


# ---------------------------------------------------------------------------------------------------
# The CUDA context. aotk launches on the context current on the calling thread. PyTorch's eager calls
# run with the device's primary context current, but a thread on which the CUDA runtime has not yet
# been used (the autograd engine's backward threads may be such threads) has none, and aotk would
# return AOTK_ERROR_NO_CONTEXT. Triton's launcher meets the same case the same way: make the device's
# primary context (the one PyTorch's runtime uses) current.
# ---------------------------------------------------------------------------------------------------

_driver = None
_driver_lock = threading.Lock()
_primary_contexts = {}


def _cuda_driver():
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                try:
                    drv = ctypes.CDLL("libcuda.so.1")
                except OSError as e:
                    raise AotkError(f"libcuda.so.1 could not be loaded ({e}): install the NVIDIA driver") from None
                for name, argtypes in (("cuInit", [ctypes.c_uint]),
                                       ("cuCtxGetCurrent", [ctypes.POINTER(ctypes.c_void_p)]),
                                       ("cuCtxSetCurrent", [ctypes.c_void_p]),
                                       ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
                                       ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int])):
                    fn = getattr(drv, name)
                    fn.argtypes = argtypes
                    fn.restype = ctypes.c_int
                # Done already in a process that used the CUDA runtime; needed before cuCtxGetCurrent
                # in one that did not. Idempotent.
                result = drv.cuInit(0)
                if result != 0:
                    raise AotkError(f"cuInit failed [CUresult {result}]: no usable CUDA device or driver",
                                    cuda_result=result)
                _driver = drv
    return _driver


def ensure_context(device_ordinal):
    """Makes device `device_ordinal`'s primary context current on this thread if no context is."""
    drv = _cuda_driver()
    current = ctypes.c_void_p()
    result = drv.cuCtxGetCurrent(ctypes.byref(current))
    if result != 0:
        raise AotkError(f"cuCtxGetCurrent failed [CUresult {result}]", cuda_result=result)
    if current.value:
        return
    context = _primary_contexts.get(device_ordinal)
    if context is None:
        device = ctypes.c_int()
        handle = ctypes.c_void_p()
        result = drv.cuDeviceGet(ctypes.byref(device), device_ordinal)
        if result == 0:
            # Retained once per device for the life of the process, as the runtime itself does.
            result = drv.cuDevicePrimaryCtxRetain(ctypes.byref(handle), device.value)
        if result != 0:
            raise AotkError(f"making device {device_ordinal}'s primary context current failed [CUresult {result}]",
                            cuda_result=result)
        context = _primary_contexts.setdefault(device_ordinal, handle.value)
    result = drv.cuCtxSetCurrent(context)
    if result != 0:
        raise AotkError(f"cuCtxSetCurrent failed [CUresult {result}]", cuda_result=result)

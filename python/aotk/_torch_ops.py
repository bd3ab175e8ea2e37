"""The PyTorch side: aotk's calls as torch.library custom ops, and the flash-attn and SDPA front ends.

Imported on the first call of a function that takes torch tensors (or at `import aotk` when torch is
already imported), never by `import aotk` alone. Importing it registers four custom ops in the
namespace "aotk":

    aotk::attn_fwd  (q, k, v, ...) -> (out, lse)        aotk_attn_fwd
    aotk::attn_bwd  (dout, q, k, v, out, lse, ...) -> (dq, dk, dv)   aotk_attn_bwd
    aotk::sel_fwd   (q, k, v, block_idx, ...) -> (out, lse)          aotk_sel_fwd
    aotk::sel_bwd   (dout, q, k, v, out, lse, ...) -> (dq, dk, dv)   aotk_sel_bwd

Each forward has a fake (meta) implementation and an autograd rule calling its backward op, so
torch.compile traces them as single nodes, without graph breaks, and AOTAutograd puts the backward op
in the backward graph. The front ends (flash_attn_func, ...) validate their arguments in Python, which
runs at trace time too, so a bad argument fails when the model is compiled, not later; what only the
library can judge (the device, a driver failure) comes back from the call as AotkError.

Launches follow the header's contract for CUDA graphs: the current torch stream, no synchronization,
no allocation by the library; workspaces and outputs come from torch's caching allocator on the
current stream (inside a capture, from the graph's pool).
"""
import ctypes
import math
import operator
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _capi
from ._capi import AotkTensor

_TORCH_TO_AOTK_DTYPE = {
    torch.float16: _capi.AOTK_DTYPE_FLOAT16,
    torch.bfloat16: _capi.AOTK_DTYPE_BFLOAT16,
    torch.float32: _capi.AOTK_DTYPE_FLOAT32,
    torch.int32: _capi.AOTK_DTYPE_INT32,
    torch.int64: _capi.AOTK_DTYPE_INT64,
    torch.uint8: _capi.AOTK_DTYPE_UINT8,
}
_ATTN_DTYPES = (torch.float16, torch.bfloat16)
_SEL_HEAD_DIMS = ((64, 64), (128, 128), (192, 128))
_SEL_BLOCK_SIZES = (32, 64, 128)


# ---------------------------------------------------------------------------------------------------
# Calling the library
# ---------------------------------------------------------------------------------------------------

def _describe(t):
    """The aotk_tensor of torch tensor t: its pointer, shape and strides, no copy. t must stay alive
    (and unmoved) until the call that reads the description has been enqueued."""
    at = AotkTensor()
    at.data = t.data_ptr()
    at.dtype = _TORCH_TO_AOTK_DTYPE[t.dtype]
    at.rank = t.dim()
    for i, (n, s) in enumerate(zip(t.shape, t.stride())):
        at.shape[i] = n
        at.strides[i] = s  # torch's strides are in elements, as aotk's are
    return at


def _describe_optional(t):
    return _describe(t) if t is not None else AotkTensor()  # data NULL: absent


def _launch(what, device, call):
    """Runs call(stream) on `device`'s current torch stream, with that device's context current, and
    turns a failed status into AotkError (read on this thread, where aotk keeps the message)."""
    lib = _capi.library()
    with torch.cuda.device(device):
        _capi.ensure_context(device.index)
        status = call(lib, torch.cuda.current_stream(device).cuda_stream)
        if status != _capi.AOTK_OK:
            raise lib.error(status, what)


def _workspace(lib, op, params, device):
    """A workspace of the size aotk's query reports, from torch's caching allocator on the current
    stream. Called inside _launch (the query needs the device's context)."""
    info = lib.query(op, params)
    return torch.empty(max(int(info.workspace_bytes), 16), dtype=torch.uint8, device=device)


def _attn_params(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                 causal_align, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state):
    p = _capi.attn_params()
    p.q, p.k, p.v = _describe(q), _describe(k), _describe(v)
    p.softmax_scale = softmax_scale
    p.causal = 1 if causal else 0
    p.causal_align = causal_align
    p.window_left = window_left
    p.window_right = window_right
    p.softcap = softcap
    p.alibi_slopes = _describe_optional(alibi_slopes)
    p.dropout_p = dropout_p
    p.rng_state = _describe_optional(rng_state)
    if cu_seqlens_q is not None:
        p.cu_seqlens_q = _describe(cu_seqlens_q)
        p.cu_seqlens_k = _describe(cu_seqlens_k)
        p.max_seqlen_q = max_seqlen_q
        p.max_seqlen_k = max_seqlen_k
    return p


def _attn_out_shapes(q, v, varlen):
    if varlen:  # q [total_q, heads_q, d]
        return (q.shape[0], q.shape[1], v.shape[-1]), (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[1], q.shape[2], v.shape[-1]), (q.shape[0], q.shape[2], q.shape[1])


def _new_output(q, shape, varlen):
    # Varlen: rows outside every sequence (past cu_seqlens[-1]) are not written by aotk; zeroing keeps
    # them defined without reading the offsets on the host (which would synchronize).
    return q.new_zeros(shape) if varlen else q.new_empty(shape)


def _no_keys(k, varlen):
    return k.shape[0] == 0 if varlen else k.shape[1] == 0


# ---------------------------------------------------------------------------------------------------
# aotk::attn_fwd, aotk::attn_bwd
# ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("aotk::attn_fwd", mutates_args=(), device_types="cuda")
def attn_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
             max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, causal_align: int,
             window_left: int, window_right: int, softcap: float, alibi_slopes: Optional[Tensor], dropout_p: float,
             rng_state: Optional[Tensor], deterministic: bool) -> Tuple[Tensor, Tensor]:
    """aotk_attn_fwd: (out, lse). Dense: q [batch, seqlen_q, heads_q, d], lse [batch, heads_q, seqlen_q];
    varlen (cu_seqlens_q given): q [total_q, heads_q, d], lse [heads_q, total_q]. `deterministic` is the
    backward's (carried here so that the autograd rule can pass it on)."""
    varlen = cu_seqlens_q is not None
    out_shape, lse_shape = _attn_out_shapes(q, v, varlen)
    out = _new_output(q, out_shape, varlen)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if _no_keys(k, varlen):  # every row sees no key: the header's out = 0, lse = -inf
        return out.zero_(), lse.fill_(-math.inf)
    p = _attn_params(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                     causal_align, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state)
    p.out, p.lse = _describe(out), _describe(lse)
    _launch("aotk_attn_fwd", q.device, lambda lib, stream: lib.lib.aotk_attn_fwd(ctypes.byref(p), stream))
    return out, lse


@attn_fwd.register_fake
def _attn_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                   causal_align, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state,
                   deterministic):
    out_shape, lse_shape = _attn_out_shapes(q, v, cu_seqlens_q is not None)
    return q.new_empty(out_shape), torch.empty(lse_shape, dtype=torch.float32, device=q.device)


@torch.library.custom_op("aotk::attn_bwd", mutates_args=(), device_types="cuda")
def attn_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
             cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
             softmax_scale: float, causal: bool, causal_align: int, window_left: int, window_right: int,
             softcap: float, alibi_slopes: Optional[Tensor], dropout_p: float, rng_state: Optional[Tensor],
             deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """aotk_attn_bwd: (dq, dk, dv), each laid out like its input (torch.empty_like). Every argument after
    lse must be the forward's; rng_state is the forward's tensor, so dropout drops the same elements."""
    varlen = cu_seqlens_q is not None
    dq, dk, dv = (torch.zeros_like(t) if varlen else torch.empty_like(t) for t in (q, k, v))
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    p = _attn_params(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                     causal_align, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state)
    p.out, p.lse, p.dout = _describe(out), _describe(lse), _describe(dout)
    p.dq, p.dk, p.dv = _describe(dq), _describe(dk), _describe(dv)
    p.deterministic = 1 if deterministic else 0

    def call(lib, stream):
        workspace = _workspace(lib, _capi.AOTK_OP_ATTN_BWD, p, q.device)
        return lib.lib.aotk_attn_bwd(ctypes.byref(p), ctypes.c_void_p(workspace.data_ptr()), workspace.numel(),
                                     stream)

    _launch("aotk_attn_bwd", q.device, call)
    return dq, dk, dv


@attn_bwd.register_fake
def _attn_bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                   causal, causal_align, window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state,
                   deterministic):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_ATTN_FWD_ARGS = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "softmax_scale",
                  "causal", "causal_align", "window_left", "window_right", "softcap", "alibi_slopes", "dropout_p",
                  "rng_state", "deterministic")


def _attn_setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, causal_align,
     window_left, window_right, softcap, alibi_slopes, dropout_p, rng_state, deterministic) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, rng_state)
    ctx.scalars = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, causal_align, window_left, window_right,
                   softcap)
    ctx.dropout_p = dropout_p
    ctx.deterministic = deterministic


def _attn_backward(ctx, grad_out, grad_lse):
    # lse is an internal output (the front ends do not return it), so grad_lse carries nothing.
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, rng_state = ctx.saved_tensors
    (max_seqlen_q, max_seqlen_k, softmax_scale, causal, causal_align, window_left, window_right,
     softcap) = ctx.scalars
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = torch.ops.aotk.attn_bwd(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                         max_seqlen_k, softmax_scale, causal, causal_align, window_left,
                                         window_right, softcap, alibi_slopes, ctx.dropout_p, rng_state,
                                         ctx.deterministic)
    return (dq, dk, dv) + (None,) * (len(_ATTN_FWD_ARGS) - 3)


attn_fwd.register_autograd(_attn_backward, setup_context=_attn_setup_context)


def attn_fwd_with_dropout_mask(q, k, v, softmax_scale, causal, causal_align, dropout_p, rng_state):
    """Tests only (dense layout, no autograd): aotk_attn_fwd with its debug dropout_mask output, so that a
    reference can apply the very mask the kernels drew. Returns (out, lse, mask uint8 [batch, heads_q,
    seqlen_q, seqlen_k], 1 = kept); attn_bwd with the same rng_state drops the same elements."""
    out_shape, lse_shape = _attn_out_shapes(q, v, False)
    out = q.new_empty(out_shape)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    mask = torch.empty((q.shape[0], q.shape[2], q.shape[1], k.shape[1]), dtype=torch.uint8, device=q.device)
    p = _attn_params(q, k, v, None, None, 0, 0, softmax_scale, causal, causal_align, -1, -1, 0.0, None, dropout_p,
                     rng_state)
    p.out, p.lse, p.dropout_mask = _describe(out), _describe(lse), _describe(mask)
    _launch("aotk_attn_fwd", q.device, lambda lib, stream: lib.lib.aotk_attn_fwd(ctypes.byref(p), stream))
    return out, lse, mask


# ---------------------------------------------------------------------------------------------------
# aotk::sel_fwd, aotk::sel_bwd
# ---------------------------------------------------------------------------------------------------

def _sel_params(q, k, v, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, block_size, softmax_scale):
    p = _capi.sel_params()
    p.q, p.k, p.v = _describe(q), _describe(k), _describe(v)
    p.block_idx = _describe(block_idx)
    p.block_cnt = _describe_optional(block_cnt)
    p.block_size = block_size
    p.softmax_scale = softmax_scale
    if cu_seqlens_q is not None:
        p.cu_seqlens_q = _describe(cu_seqlens_q)
        p.cu_seqlens_k = _describe(cu_seqlens_k)
        p.max_seqlen_k = max_seqlen_k
    return p


@torch.library.custom_op("aotk::sel_fwd", mutates_args=(), device_types="cuda")
def sel_fwd(q: Tensor, k: Tensor, v: Tensor, block_idx: Tensor, block_cnt: Optional[Tensor],
            cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_k: int, block_size: int,
            softmax_scale: float) -> Tuple[Tensor, Tensor]:
    """aotk_sel_fwd: (out [total_q, heads_q, head_dim_v], lse [total_q, heads_q] fp32)."""
    varlen = cu_seqlens_q is not None
    out = _new_output(q, (q.shape[0], q.shape[1], v.shape[-1]), varlen)
    lse = torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if k.shape[0] == 0:
        return out.zero_(), lse.fill_(-math.inf)
    p = _sel_params(q, k, v, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, block_size,
                    softmax_scale)
    p.out, p.lse = _describe(out), _describe(lse)
    _launch("aotk_sel_fwd", q.device, lambda lib, stream: lib.lib.aotk_sel_fwd(ctypes.byref(p), stream))
    return out, lse


@sel_fwd.register_fake
def _sel_fwd_fake(q, k, v, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, block_size, softmax_scale):
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[-1])),
            torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device=q.device))


@torch.library.custom_op("aotk::sel_bwd", mutates_args=(), device_types="cuda")
def sel_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, block_idx: Tensor,
            block_cnt: Optional[Tensor], cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
            max_seqlen_k: int, block_size: int, softmax_scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    """aotk_sel_bwd: (dq, dk, dv), each laid out like its input."""
    varlen = cu_seqlens_q is not None
    dq, dk, dv = (torch.zeros_like(t) if varlen else torch.empty_like(t) for t in (q, k, v))
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if not dout.is_contiguous():  # the selection kernels need 16-element-aligned strides
        dout = dout.contiguous()
    p = _sel_params(q, k, v, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, block_size,
                    softmax_scale)
    p.out, p.lse, p.dout = _describe(out), _describe(lse), _describe(dout)
    p.dq, p.dk, p.dv = _describe(dq), _describe(dk), _describe(dv)

    def call(lib, stream):
        workspace = _workspace(lib, _capi.AOTK_OP_SEL_BWD, p, q.device)
        return lib.lib.aotk_sel_bwd(ctypes.byref(p), ctypes.c_void_p(workspace.data_ptr()), workspace.numel(),
                                    stream)

    _launch("aotk_sel_bwd", q.device, call)
    return dq, dk, dv


@sel_bwd.register_fake
def _sel_bwd_fake(dout, q, k, v, out, lse, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, block_size,
                  softmax_scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _sel_setup_context(ctx, inputs, output):
    q, k, v, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, block_size, softmax_scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k)
    ctx.scalars = (max_seqlen_k, block_size, softmax_scale)


def _sel_backward(ctx, grad_out, grad_lse):
    # selection_attention returns lse detached: no gradient reaches it (aotk's backward takes no dlse).
    q, k, v, out, lse, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    max_seqlen_k, block_size, softmax_scale = ctx.scalars
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = torch.ops.aotk.sel_bwd(grad_out, q, k, v, out, lse, block_idx, block_cnt, cu_seqlens_q,
                                        cu_seqlens_k, max_seqlen_k, block_size, softmax_scale)
    return dq, dk, dv, None, None, None, None, None, None, None


sel_fwd.register_autograd(_sel_backward, setup_context=_sel_setup_context)


# ---------------------------------------------------------------------------------------------------
# Argument checks shared by the front ends. They run in Python, at trace time under torch.compile.
# ---------------------------------------------------------------------------------------------------

def _check_tensor(fn, name, t, rank, layout):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{fn}: {name} must have {rank} dimensions {layout}, got shape {tuple(t.shape)}")


def _check_device(fn, named_tensors):
    """Every tensor on one CUDA device; the first offender named."""
    first_name, first = named_tensors[0]
    for name, t in named_tensors:
        if t is None:
            continue
        if t.device.type != "cuda":
            hint = "" if torch.cuda.is_available() else " (and torch sees no CUDA device on this machine)"
            raise ValueError(f"{fn}: {name} is on device '{t.device}': aotk's kernels run on CUDA devices only, "
                             f"and nothing falls back to another implementation{hint}")
        if t.device != first.device:
            raise ValueError(f"{fn}: {name} is on {t.device} but {first_name} is on {first.device}")


def _check_attn_dtypes(fn, names, q, k, v):
    if q.dtype not in _ATTN_DTYPES:
        raise NotImplementedError(f"{fn}: {names[0]}.dtype is {q.dtype}: aotk's attention takes torch.float16 or "
                                  f"torch.bfloat16")
    for name, t in ((names[1], k), (names[2], v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{fn}: {name}.dtype is {t.dtype} but {names[0]}.dtype is {q.dtype}: they must match")


def _check_attn_head_dims(fn, names, q, k, v):
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{fn}: {names[0]} and {names[1]} must share a head dim: {q.shape[-1]} and {k.shape[-1]}")
    for name, d in ((names[0], q.shape[-1]), (names[2], v.shape[-1])):
        if d % 8 != 0 or not 8 <= d <= 256:
            raise NotImplementedError(f"{fn}: {name}'s head dim is {d}: aotk supports multiples of 8 from 8 to 256")


def _check_heads(fn, names, heads_q, heads_kv):
    if heads_kv < 1 or heads_q % heads_kv != 0:
        raise ValueError(f"{fn}: {names[0]} has {heads_q} heads, {names[1]} {heads_kv}: the query heads must be a "
                         f"multiple of the key/value heads")


def _scale(fn, softmax_scale, name="softmax_scale"):
    if softmax_scale is None:
        return 0.0  # aotk's default: 1/sqrt(head_dim_qk), flash-attn's and SDPA's
    scale = float(softmax_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{fn}: {name} must be a finite positive number or None, got {softmax_scale}")
    return scale


def _check_dropout(fn, dropout_p):
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{fn}: dropout_p must be in [0, 1), got {dropout_p}")
    return p


def _window(fn, window_size, causal):
    """flash-attn's window_size (left, right), negative for unbounded, as aotk's window_left/right. With
    causal, flash-attn takes the right bound as 0; aotk's causal means exactly that (and wants -1 or 0)."""
    try:
        left, right = window_size
        left, right = int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(f"{fn}: window_size must be a pair of ints (left, right), got {window_size!r}") from None
    left = -1 if left < 0 else left
    right = -1 if right < 0 or causal else right
    return left, right


def _check_softcap(fn, softcap):
    c = float(softcap)
    if not (math.isfinite(c) and c >= 0):
        raise ValueError(f"{fn}: softcap must be 0 (off) or a finite positive number, got {softcap}")
    return c


def _check_alibi(fn, alibi_slopes, batch, heads_q):
    if alibi_slopes is None:
        return None
    if not isinstance(alibi_slopes, torch.Tensor):
        raise TypeError(f"{fn}: alibi_slopes must be a torch.Tensor or None")
    if alibi_slopes.dtype != torch.float32:
        raise NotImplementedError(f"{fn}: alibi_slopes.dtype is {alibi_slopes.dtype}: aotk takes torch.float32 "
                                  f"(as flash-attn does)")
    if tuple(alibi_slopes.shape) not in ((heads_q,), (batch, heads_q)):
        raise ValueError(f"{fn}: alibi_slopes must have shape ({heads_q},) or ({batch}, {heads_q}), got "
                         f"{tuple(alibi_slopes.shape)}")
    return alibi_slopes if alibi_slopes.stride(-1) == 1 else alibi_slopes.contiguous()


def _check_cu_seqlens(fn, name, t, num_seqs=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor (int32 [num_seqs + 1] on the GPU)")
    if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] < 1:
        raise ValueError(f"{fn}: {name} must be int32 [num_seqs + 1], got {t.dtype} {tuple(t.shape)}")
    if num_seqs is not None and t.shape[0] != num_seqs + 1:
        raise ValueError(f"{fn}: {name} has {t.shape[0]} entries but cu_seqlens_q has {num_seqs + 1}")
    return t if t.stride(0) == 1 else t.contiguous()


def _check_max_seqlen(fn, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        try:
            value = operator.index(value)  # numpy integers and the like
        except TypeError:
            raise TypeError(f"{fn}: {name} must be an int (it sizes the launch grid), got "
                            f"{type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"{fn}: {name} must be >= 1, got {value}")
    return value


def _last_dim_contiguous(t):
    # aotk needs stride 1 in the last dimension and takes every other stride as it is; flash-attn copies
    # in the same case.
    return t if t.stride(-1) == 1 else t.contiguous()


def _rng_state(dropout_p, device):
    """{seed, offset} int64 [2] on the device for a dropout call, drawn from torch's CUDA generator by a
    kernel (no host synchronization): torch.manual_seed makes it reproducible, a CUDA graph replay draws
    fresh values (torch's generator is capture-aware), and torch.compile traces it as an ordinary random
    op. The backward gets this same tensor, so it drops the forward's elements."""
    if dropout_p == 0.0:
        return None
    return torch.randint(0, 2**62, (2,), dtype=torch.int64, device=device)


# ---------------------------------------------------------------------------------------------------
# The front ends
# ---------------------------------------------------------------------------------------------------

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    fn = "aotk.flash_attn_func"
    names = ("q", "k", "v")
    if return_attn_probs:
        raise NotImplementedError(f"{fn}: return_attn_probs=True is not supported: aotk returns no attention "
                                  f"probabilities (flash-attn's S_dmask)")
    layout = "[batch, seqlen, heads, head_dim]"
    for name, t in zip(names, (q, k, v)):
        _check_tensor(fn, name, t, 4, layout)
    _check_attn_dtypes(fn, names, q, k, v)
    _check_attn_head_dims(fn, names, q, k, v)
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"{fn}: q, k, v must share the batch size: {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    if k.shape[1:3] != v.shape[1:3]:
        raise ValueError(f"{fn}: k and v must share seqlen and heads: {tuple(k.shape)} and {tuple(v.shape)}")
    _check_heads(fn, names, q.shape[2], k.shape[2])
    dropout_p = _check_dropout(fn, dropout_p)
    scale = _scale(fn, softmax_scale)
    window_left, window_right = _window(fn, window_size, causal)
    softcap = _check_softcap(fn, softcap)
    alibi_slopes = _check_alibi(fn, alibi_slopes, q.shape[0], q.shape[2])
    _check_device(fn, [("q", q), ("k", k), ("v", v), ("alibi_slopes", alibi_slopes)])
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    out, _ = torch.ops.aotk.attn_fwd(q, k, v, None, None, 0, 0, scale, bool(causal), _capi.AOTK_ALIGN_BOTTOM_RIGHT,
                                     window_left, window_right, softcap, alibi_slopes, dropout_p,
                                     _rng_state(dropout_p, q.device), bool(deterministic))
    return out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    fn = "aotk.flash_attn_varlen_func"
    names = ("q", "k", "v")
    if return_attn_probs:
        raise NotImplementedError(f"{fn}: return_attn_probs=True is not supported: aotk returns no attention "
                                  f"probabilities (flash-attn's S_dmask)")
    if block_table is not None:
        raise NotImplementedError(f"{fn}: block_table (paged KV) is not supported: aotk has no paged-KV kernels yet")
    layout = "[total_tokens, heads, head_dim]"
    for name, t in zip(names, (q, k, v)):
        _check_tensor(fn, name, t, 3, layout)
    _check_attn_dtypes(fn, names, q, k, v)
    _check_attn_head_dims(fn, names, q, k, v)
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"{fn}: k and v must share total_k and heads: {tuple(k.shape)} and {tuple(v.shape)}")
    _check_heads(fn, names, q.shape[1], k.shape[1])
    cu_seqlens_q = _check_cu_seqlens(fn, "cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k = _check_cu_seqlens(fn, "cu_seqlens_k", cu_seqlens_k, cu_seqlens_q.shape[0] - 1)
    max_seqlen_q = _check_max_seqlen(fn, "max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _check_max_seqlen(fn, "max_seqlen_k", max_seqlen_k)
    dropout_p = _check_dropout(fn, dropout_p)
    scale = _scale(fn, softmax_scale)
    window_left, window_right = _window(fn, window_size, causal)
    softcap = _check_softcap(fn, softcap)
    alibi_slopes = _check_alibi(fn, alibi_slopes, cu_seqlens_q.shape[0] - 1, q.shape[1])
    _check_device(fn, [("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                       ("alibi_slopes", alibi_slopes)])
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    out, _ = torch.ops.aotk.attn_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                     bool(causal), _capi.AOTK_ALIGN_BOTTOM_RIGHT, window_left, window_right, softcap,
                                     alibi_slopes, dropout_p, _rng_state(dropout_p, q.device), bool(deterministic))
    return out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    fn = "aotk.scaled_dot_product_attention"
    names = ("query", "key", "value")
    if attn_mask is not None:
        raise NotImplementedError(f"{fn}: attn_mask is not supported: aotk takes no mask tensors (is_causal=True "
                                  f"gives the causal mask; flash_attn_func's window_size gives sliding windows)")
    layout = "[batch, heads, seqlen, head_dim]"
    for name, t in zip(names, (query, key, value)):
        _check_tensor(fn, name, t, 4, layout)
    _check_attn_dtypes(fn, names, query, key, value)
    _check_attn_head_dims(fn, names, query, key, value)
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        raise ValueError(f"{fn}: query, key, value must share the batch size (aotk does not broadcast it): "
                         f"{query.shape[0]}, {key.shape[0]}, {value.shape[0]}")
    if key.shape[1:3] != value.shape[1:3]:
        raise ValueError(f"{fn}: key and value must share heads and seqlen: {tuple(key.shape)} and "
                         f"{tuple(value.shape)}")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"{fn}: query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True for "
                         f"grouped-query attention (as torch's scaled_dot_product_attention requires)")
    _check_heads(fn, names, query.shape[1], key.shape[1])
    dropout_p = _check_dropout(fn, dropout_p)
    softmax_scale = _scale(fn, scale, "scale")
    _check_device(fn, [("query", query), ("key", key), ("value", value)])
    # [batch, heads, seqlen, d] read as flash-attn's [batch, seqlen, heads, d]: a strided view, no copy.
    q, k, v = (_last_dim_contiguous(t).transpose(1, 2) for t in (query, key, value))
    # torch's is_causal is the top-left diagonal (torch.ones(L, S).tril()): AOTK_ALIGN_TOP_LEFT.
    out, _ = torch.ops.aotk.attn_fwd(q, k, v, None, None, 0, 0, softmax_scale, bool(is_causal),
                                     _capi.AOTK_ALIGN_TOP_LEFT, -1, -1, 0.0, None, dropout_p,
                                     _rng_state(dropout_p, q.device), False)
    return out.transpose(1, 2)


def selection_attention(q, k, v, block_idx, block_size, block_cnt=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        max_seqlen_k=None, softmax_scale=None, return_lse=False):
    fn = "aotk.selection_attention"
    names = ("q", "k", "v")
    layout = "[total_tokens, heads, head_dim]"
    for name, t in zip(names, (q, k, v)):
        _check_tensor(fn, name, t, 3, layout)
    _check_attn_dtypes(fn, names, q, k, v)
    if (q.shape[-1], v.shape[-1]) not in _SEL_HEAD_DIMS or k.shape[-1] != q.shape[-1]:
        raise NotImplementedError(f"{fn}: head dims (q/k, v) = ({q.shape[-1]}/{k.shape[-1]}, {v.shape[-1]}): "
                                  f"selection attention supports (64, 64), (128, 128) and (192, 128)")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"{fn}: k and v must share total_k and heads: {tuple(k.shape)} and {tuple(v.shape)}")
    _check_heads(fn, names, q.shape[1], k.shape[1])
    if isinstance(block_size, bool) or block_size not in _SEL_BLOCK_SIZES:
        raise NotImplementedError(f"{fn}: block_size is {block_size!r}: aotk supports 32, 64 and 128")
    _check_tensor(fn, "block_idx", block_idx, 3, "[total_q, heads_kv, slots]")
    if block_idx.dtype != torch.int32:
        raise TypeError(f"{fn}: block_idx.dtype is {block_idx.dtype}: aotk takes torch.int32 (torch.topk's "
                        f"int64 indices convert with .int())")
    if block_idx.shape[:2] != (q.shape[0], k.shape[1]):
        raise ValueError(f"{fn}: block_idx must have shape [total_q={q.shape[0]}, heads_kv={k.shape[1]}, slots], "
                         f"got {tuple(block_idx.shape)}")
    if block_cnt is not None:
        _check_tensor(fn, "block_cnt", block_cnt, 2, "[total_q, heads_kv]")
        if block_cnt.dtype != torch.int32 or block_cnt.shape != block_idx.shape[:2]:
            raise ValueError(f"{fn}: block_cnt must be int32 {tuple(block_idx.shape[:2])}, got {block_cnt.dtype} "
                             f"{tuple(block_cnt.shape)}")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ValueError(f"{fn}: give both cu_seqlens_q and cu_seqlens_k, or neither (one sequence)")
    if cu_seqlens_q is not None:
        cu_seqlens_q = _check_cu_seqlens(fn, "cu_seqlens_q", cu_seqlens_q)
        cu_seqlens_k = _check_cu_seqlens(fn, "cu_seqlens_k", cu_seqlens_k, cu_seqlens_q.shape[0] - 1)
        if max_seqlen_k is None:
            raise ValueError(f"{fn}: max_seqlen_k is required with cu_seqlens (reading it from cu_seqlens_k would "
                             f"synchronize with the GPU)")
        max_seqlen_k = _check_max_seqlen(fn, "max_seqlen_k", max_seqlen_k)
    else:
        max_seqlen_k = 0  # ignored without cu_seqlens: k is one sequence
    scale = _scale(fn, softmax_scale)
    _check_device(fn, [("q", q), ("k", k), ("v", v), ("block_idx", block_idx), ("block_cnt", block_cnt),
                       ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)])
    # The selection kernels assume 16-element-aligned strides, which contiguous tensors have.
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    block_idx = block_idx if block_idx.stride(-1) == 1 else block_idx.contiguous()
    if block_cnt is not None and block_cnt.stride(-1) != 1:
        block_cnt = block_cnt.contiguous()
    out, lse = torch.ops.aotk.sel_fwd(q, k, v, block_idx, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k,
                                      int(block_size), scale)
    if return_lse:
        return out, lse.detach()
    return out

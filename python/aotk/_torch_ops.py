"""The PyTorch side: aotk's calls as torch.library custom ops. The flash-attn and SDPA front ends over
them are _torch_functions.py, which aotk/__init__.py loads (and with it this module) on first use.

Imported on the first call of a function that takes torch tensors (or at `import aotk` when torch is
already imported), never by `import aotk` alone. Importing it registers six custom ops in the
namespace "aotk":

    aotk::attn_fwd  (q, k, v, ...) -> (out, lse)        aotk_attn_fwd
    aotk::attn_bwd  (dout, q, k, v, out, lse, ...) -> (dq, dk, dv)   aotk_attn_bwd
    aotk::sel_fwd   (q, k, v, block_idx, ...) -> (out, lse)          aotk_sel_fwd
    aotk::sel_bwd   (dout, q, k, v, out, lse, ...) -> (dq, dk, dv)   aotk_sel_bwd
    aotk::decode    (q, k_cache, v_cache, cache_seqlens, ...) -> (out, lse)   aotk_attn_decode
                    (mutates k_cache and v_cache: appends k_new and v_new when given; with cu_seqlens_q,
                    packed queries: a prefill over the cache)
    aotk::merge     (out_partials, lse_partials, ...) -> (out, lse)  aotk_attn_merge

Each op has a fake (meta) implementation, so torch.compile traces it as a single node, without graph
breaks. The attention and selection forwards have an autograd rule calling their backward op, which
AOTAutograd puts in the backward graph; decode and merge have none (they are for inference, as
flash-attn's flash_attn_with_kvcache is). The front ends (flash_attn_func, ...) validate their
arguments in Python, which runs at trace time too, so a bad argument fails when the model is compiled,
not later; what only the library can judge (the device, a driver failure) comes back from the call as
AotkError.

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


def _new_lse(q, shape, varlen):
    # Likewise for the lse: a row outside every sequence reads as a row that saw no key (-inf, with its
    # out 0), so that two identical calls return identical tensors, pad rows included.
    if varlen:
        return torch.full(shape, -math.inf, dtype=torch.float32, device=q.device)
    return torch.empty(shape, dtype=torch.float32, device=q.device)


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
    lse = _new_lse(q, lse_shape, varlen)
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
    # The front ends return lse only detached (return_attn_probs=True), so grad_lse carries nothing.
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
# aotk::decode, aotk::merge
# ---------------------------------------------------------------------------------------------------

def _aligned16(t):
    """What aotk's decoding kernels assume of q, the caches, out, k_new and v_new: a 16-byte-aligned
    pointer and every stride but the last a multiple of 16 elements (include/aotk.h, aotk_decode_params)."""
    return t.data_ptr() % 16 == 0 and all(s % 16 == 0 for s in t.stride()[:-1])


def _as_aligned16(t):
    """t itself when _aligned16, else a copy in a layout that is: rows padded to a multiple of 16
    elements (a contiguous copy is not enough when the head dim is not a multiple of 16, e.g. 40).
    For the small tensors only (q, k_new, v_new): the caches are never copied."""
    if _aligned16(t):
        return t
    head_dim = t.shape[-1]
    padded = t.new_empty(tuple(t.shape[:-1]) + ((head_dim + 15) // 16 * 16,))
    return padded[..., :head_dim].copy_(t)


def _decode_out_shapes(q, v_cache, varlen):
    if varlen:  # q [total_q, heads_q, d]: the varlen forward's layouts
        return (q.shape[0], q.shape[1], v_cache.shape[-1]), (q.shape[1], q.shape[0])
    batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    return (batch, seqlen_q, heads_q, v_cache.shape[-1]), (batch, heads_q, seqlen_q)


def _fill_no_key_lse(lse, sinks):
    """The header's lse of a row that sees no key: -inf, or with a sink the sink's logit (log exp(sink)).
    lse is [batch, heads, seqlen_q] or [heads, total_q]: either way heads is the second-to-last dimension."""
    if sinks is None:
        return lse.fill_(-math.inf)
    return lse.copy_(sinks.view(-1, 1).expand(lse.shape))


_APPEND_KV = 1 << _capi.FEATURE_NAMES.index("append_kv")  # AOTK_FEATURE_APPEND_KV
_VARLEN = 1 << _capi.FEATURE_NAMES.index("varlen")  # AOTK_FEATURE_VARLEN
_LEFTPAD_KV = 1 << _capi.FEATURE_NAMES.index("leftpad_kv")  # AOTK_FEATURE_LEFTPAD_KV


@torch.library.custom_op("aotk::decode", mutates_args=("k_cache", "v_cache"), device_types="cuda")
def decode(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor, block_table: Optional[Tensor],
           alibi_slopes: Optional[Tensor], sinks: Optional[Tensor], softmax_scale: float, causal: bool,
           window_left: int, window_right: int, softcap: float, num_splits: int, k_new: Optional[Tensor] = None,
           v_new: Optional[Tensor] = None, cu_seqlens_q: Optional[Tensor] = None,
           max_seqlen_q: int = 0, cache_leftpad: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """aotk_attn_decode: (out [batch, seqlen_q, heads_q, head_dim_v], lse [batch, heads_q, seqlen_q] fp32).

    With cu_seqlens_q (int32 [batch + 1]) and max_seqlen_q (>= 1), the queries are packed, a prefill over
    the cache (chunked prefill, prefix caching): q [total_q, heads_q, head_dim_qk], out [total_q, heads_q,
    head_dim_v], lse [heads_q, total_q]; request b's rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 (at
    most max_seqlen_q of them) are its last tokens, at positions cache_seqlens[b] - len_q_b + i (causal
    aligned bottom-right). Rows outside every request are not written by the library: out is zeroed
    first (no host read of the offsets), lse then holds whatever the allocator gave. No appending with
    it, and no split (num_splits 0 or 1).

    cache_leftpad (int32 [batch]): request b's keys start at cache row cache_leftpad[b] (the rows before it
    are padding, never attended); positions stay the cache's rows (include/aotk.h).

    Without k_new and v_new, cache_seqlens (int32 [batch]) counts each request's keys, the step's own
    already in the cache. With them ([batch, seqlen_new, heads_kv, head_dim_qk / head_dim_v], given
    together), the library appends in-kernel, in place: cache_seqlens holds the lengths before the step,
    new token i of request b goes to position max(cache_seqlens[b], 0) + i (through block_table when
    paged; a position at or past the capacity is not written), and the request attends to
    min(max(cache_seqlens[b], 0) + seqlen_new, capacity) keys. cache_seqlens itself is not changed. It is
    read by the kernels, so a CUDA graph replays with whatever the tensor then holds. k_cache and
    v_cache are declared mutated whether or not this call appends (a custom op's schema is fixed), so
    torch.compile orders the op against other reads and writes of the caches. The split-KV workspace
    comes from torch's caching allocator on the current stream."""
    varlen = cu_seqlens_q is not None
    out_shape, lse_shape = _decode_out_shapes(q, v_cache, varlen)
    out = _new_output(q, out_shape, varlen)
    lse = _new_lse(q, lse_shape, varlen)
    append = k_new is not None and k_new.numel() > 0
    capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    if capacity == 0:  # no key, old or new, fits: the header's out = 0, lse = -inf (or the sink's)
        return out.zero_(), _fill_no_key_lse(lse, sinks)
    run_q, run_out, run_lse = q, out, lse
    if out.numel() == 0:
        if not append:
            return out, lse
        # No query row (seqlen_q or heads_q is 0) but keys to append: the library takes no empty q, so
        # one zero query token per request and kv head attends and is dropped; the append is the kernel's.
        batch, heads_kv = q.shape[0], k_cache.shape[2]
        run_q = q.new_zeros((batch, 1, heads_kv, k_cache.shape[3]))
        run_out, run_lse = q.new_empty((batch, 1, heads_kv, v_cache.shape[3])), None
    # Every tensor described below stays referenced by a local until the launches are enqueued.
    run_q = _as_aligned16(run_q)  # q is small: a copy in the layout the kernel assumes (the caches cannot be copied)
    if append:
        k_new, v_new = _as_aligned16(k_new), _as_aligned16(v_new)
    p = _capi.decode_params()
    p.q, p.k_cache, p.v_cache = _describe(run_q), _describe(k_cache), _describe(v_cache)
    p.block_table = _describe_optional(block_table)
    p.cache_seqlens = _describe(cache_seqlens)
    p.out, p.lse = _describe(run_out), _describe_optional(run_lse)
    p.softmax_scale = softmax_scale
    p.causal = 1 if causal else 0
    p.window_left = window_left
    p.window_right = window_right
    p.softcap = softcap
    p.alibi_slopes = _describe_optional(alibi_slopes)
    p.sinks = _describe_optional(sinks)
    p.num_splits = num_splits
    if append:
        p.k_new, p.v_new = _describe(k_new), _describe(v_new)
    if varlen:
        p.cu_seqlens_q = _describe(cu_seqlens_q)
        p.max_seqlen_q = max_seqlen_q
    p.cache_leftpad = _describe_optional(cache_leftpad)

    def call(lib, stream):
        # The split plan depends only on sizes the host sees, so the query's answer holds for the launch.
        info = lib.query(_capi.AOTK_OP_DECODE, p)
        if append and not info.features & _APPEND_KV:
            # A library from before appending (the same version number during 0.4's development) takes
            # the larger struct and ignores k_new: refuse rather than attend to rows never written.
            raise _capi.AotkError(f"{lib.path} does not append k_new/v_new (no AOTK_FEATURE_APPEND_KV): "
                                  f"use a libaotk built with appending")
        if varlen and not info.features & _VARLEN:
            # Likewise a library from before packed queries would read q as [batch, seqlen_q, ...].
            raise _capi.AotkError(f"{lib.path} takes no cu_seqlens_q in aotk_attn_decode (no AOTK_FEATURE_VARLEN): "
                                  f"use a libaotk built with the prefill over the cache")
        if cache_leftpad is not None and not info.features & _LEFTPAD_KV:
            # A library from before cache_leftpad (the same version number during 0.4's development)
            # takes the larger struct and ignores the field: refuse rather than attend to the padding.
            raise _capi.AotkError(f"{lib.path} takes no cache_leftpad (no AOTK_FEATURE_LEFTPAD_KV): use a libaotk "
                                  f"built with left-padded caches")
        workspace_bytes = int(info.workspace_bytes)
        if workspace_bytes == 0:  # no split: no workspace (the header allows NULL)
            return lib.lib.aotk_attn_decode(ctypes.byref(p), None, 0, stream)
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=q.device)
        return lib.lib.aotk_attn_decode(ctypes.byref(p), ctypes.c_void_p(workspace.data_ptr()), workspace_bytes,
                                        stream)

    _launch("aotk_attn_decode", q.device, call)
    return out, lse


@decode.register_fake
def _decode_fake(q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, sinks, softmax_scale, causal,
                 window_left, window_right, softcap, num_splits, k_new=None, v_new=None, cu_seqlens_q=None,
                 max_seqlen_q=0, cache_leftpad=None):
    # The caches' mutation needs no fake counterpart: they keep their shapes, dtypes and strides.
    out_shape, lse_shape = _decode_out_shapes(q, v_cache, cu_seqlens_q is not None)
    return q.new_empty(out_shape), torch.empty(lse_shape, dtype=torch.float32, device=q.device)


@torch.library.custom_op("aotk::merge", mutates_args=(), device_types="cuda")
def merge(out_partials: Tensor, lse_partials: Tensor, sinks: Optional[Tensor],
          out_dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """aotk_attn_merge: (out, lse) from partials over disjoint key sets. out_partials [num_partials, batch,
    seqlen_q, heads, head_dim] with lse_partials [num_partials, batch, heads, seqlen_q], or packed
    [num_partials, total_q, heads, head_dim] with [num_partials, heads, total_q]; out is out_partials[0]'s
    shape in out_dtype, lse lse_partials[0]'s shape in fp32."""
    out = torch.empty(out_partials.shape[1:], dtype=out_dtype, device=out_partials.device)
    lse = torch.empty(lse_partials.shape[1:], dtype=torch.float32, device=out_partials.device)
    if out.numel() == 0:
        return out, lse
    if out_partials.shape[0] == 0:  # no partial, no key: out = 0, lse = -inf (or the sink's)
        return out.zero_(), _fill_no_key_lse(lse, sinks)
    p = _capi.merge_params()
    p.out_partials, p.lse_partials = _describe(out_partials), _describe(lse_partials)
    p.out, p.lse = _describe(out), _describe(lse)
    p.sinks = _describe_optional(sinks)
    _launch("aotk_attn_merge", out_partials.device,
            lambda lib, stream: lib.lib.aotk_attn_merge(ctypes.byref(p), stream))
    return out, lse


@merge.register_fake
def _merge_fake(out_partials, lse_partials, sinks, out_dtype):
    return (out_partials.new_empty(out_partials.shape[1:], dtype=out_dtype),
            torch.empty(lse_partials.shape[1:], dtype=torch.float32, device=out_partials.device))

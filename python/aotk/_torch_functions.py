"""The flash-attn and SDPA front ends (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
scaled_dot_product_attention, selection_attention, merge_attention_states) over the custom ops of
_torch_ops.py, with the argument checks they share. They validate in Python, which runs at trace time
under torch.compile, so a bad argument fails when the model is compiled; what only the library can judge
comes back from the op as AotkError. aotk/__init__.py imports this module on the first call of a
function that takes tensors; importing it registers the custom ops (by importing _torch_ops).
"""
import math
import operator

import torch

from . import _capi
from . import _torch_ops  # noqa: F401  (registers torch.ops.aotk.*)
from ._torch_ops import _ATTN_DTYPES, _SEL_BLOCK_SIZES, _SEL_HEAD_DIMS

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


def _with_attn_probs(out, lse, return_attn_probs):
    """flash-attn's return convention: out, or with return_attn_probs=True (out, softmax_lse, S_dmask).
    flash-attn fills S_dmask only when dropout_p > 0 (None otherwise); aotk never materializes the
    probabilities, so it is always None here. lse is returned detached: aotk's backward takes no
    gradient of lse (flash-attn's drops it silently), so none can flow back through it."""
    if return_attn_probs:
        return out, lse.detach(), None
    return out


# ---------------------------------------------------------------------------------------------------
# The front ends
# ---------------------------------------------------------------------------------------------------

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    fn = "aotk.flash_attn_func"
    names = ("q", "k", "v")
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
    out, lse = torch.ops.aotk.attn_fwd(q, k, v, None, None, 0, 0, scale, bool(causal), _capi.AOTK_ALIGN_BOTTOM_RIGHT,
                                       window_left, window_right, softcap, alibi_slopes, dropout_p,
                                       _rng_state(dropout_p, q.device), bool(deterministic))
    return _with_attn_probs(out, lse, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash-attn's flash_attn_varlen_func. Without block_table: the packed forward (aotk_attn_fwd), with
    a backward. With block_table (int32 [batch, max_pages_per_request]), as in flash-attn, k and v are paged
    caches [num_pages, page_size, heads_kv, head_dim] and cu_seqlens_k gives each request's key count
    (cu_seqlens_k[b+1] - cu_seqlens_k[b], computed on the device, no host synchronization): a prefill over
    the cache (chunked prefill, prefix caching) through aotk_attn_decode's packed queries, request b's
    tokens the last ones of its keys (causal aligned bottom-right); on sm_90, with power-of-two pages of 16
    keys or more and max_seqlen_q >= 64 (or fewer where its tiles fit one wave), the warp-specialized forward
    reads the pages by TMA, splitting the keys where its tiles fill at most half the SMs, unless the
    decoding kernel's split is faster (few requests, heads and queries) (include/aotk.h, cu_seqlens_q).
    That path is forward only: it has no backward, so inputs that require grad are refused, and dropout_p
    must be 0."""
    fn = "aotk.flash_attn_varlen_func"
    names = ("q", "k", "v")
    if block_table is not None:
        return _paged_varlen_prefill(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                     softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs,
                                     block_table)
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
    out, lse = torch.ops.aotk.attn_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                                       bool(causal), _capi.AOTK_ALIGN_BOTTOM_RIGHT, window_left, window_right, softcap,
                                       alibi_slopes, dropout_p, _rng_state(dropout_p, q.device), bool(deterministic))
    return _with_attn_probs(out, lse, return_attn_probs)


def _check_block_table(fn, block_table, batch):
    """int32 [batch, max_pages_per_request], its last dimension made contiguous (a small copy)."""
    _check_tensor(fn, "block_table", block_table, 2, "[batch, max_pages_per_request]")
    if block_table.dtype != torch.int32 or block_table.shape[0] != batch:
        raise ValueError(f"{fn}: block_table must be int32 [batch={batch}, max_pages_per_request], got "
                         f"{block_table.dtype} {tuple(block_table.shape)}")
    return block_table if block_table.stride(-1) == 1 else block_table.contiguous()


def _paged_varlen_prefill(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                          softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table):
    """flash_attn_varlen_func(..., block_table=...): aotk::decode with packed queries."""
    names = ("q", "k", "v")
    _check_tensor(fn, "q", q, 3, "[total_q, heads_q, head_dim]")
    cache_layout = "[num_pages, page_size, heads_kv, head_dim] (a paged cache, with block_table)"
    _check_tensor(fn, "k", k, 4, cache_layout)
    _check_tensor(fn, "v", v, 4, cache_layout)
    _check_attn_dtypes(fn, names, q, k, v)
    _check_attn_head_dims(fn, names, q, k, v)
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"{fn}: k and v must share their first three dimensions: {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    _check_heads(fn, names, q.shape[1], k.shape[2])
    for name, t in (("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(f"{fn}: {name}'s last dimension must be contiguous (stride 1): the paged cache is read "
                             f"in place, never copied")
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(f"{fn}: with block_table (a prefill over a paged cache) aotk has no backward: "
                                  f"call it under torch.no_grad() or on detached tensors; for training use "
                                  f"packed k and v without block_table")
    cu_seqlens_q = _check_cu_seqlens(fn, "cu_seqlens_q", cu_seqlens_q)
    batch = cu_seqlens_q.shape[0] - 1
    cu_seqlens_k = _check_cu_seqlens(fn, "cu_seqlens_k", cu_seqlens_k, batch)
    max_seqlen_q = _check_max_seqlen(fn, "max_seqlen_q", max_seqlen_q)
    _check_max_seqlen(fn, "max_seqlen_k", max_seqlen_k)  # flash-attn's argument; aotk reads the lengths on the device
    block_table = _check_block_table(fn, block_table, batch)
    if _check_dropout(fn, dropout_p) != 0.0:
        raise NotImplementedError(f"{fn}: dropout_p = {dropout_p} with block_table: the prefill over a paged cache "
                                  f"is for inference and has no dropout")
    scale = _scale(fn, softmax_scale)
    window_left, window_right = _window(fn, window_size, causal)
    softcap = _check_softcap(fn, softcap)
    alibi_slopes = _check_alibi(fn, alibi_slopes, batch, q.shape[1])
    _check_device(fn, [("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                       ("block_table", block_table), ("alibi_slopes", alibi_slopes)])
    q = _last_dim_contiguous(q)
    # Each request's key count, on the device (no synchronization; a CUDA graph replays with new offsets).
    cache_seqlens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
    out, lse = torch.ops.aotk.decode(q, k, v, cache_seqlens, block_table, alibi_slopes, None, scale, bool(causal),
                                     window_left, window_right, softcap, 0, None, None, cu_seqlens_q, max_seqlen_q)
    return _with_attn_probs(out, lse, return_attn_probs)


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


def _check_int(fn, name, value, low, high=None):
    """A host integer (not a bool; numpy integers accepted) in [low, high]."""
    if isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be an int, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{fn}: {name} must be {bounds}, got {value}")
    return value


def _check_sinks(fn, sinks, heads):
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"{fn}: sinks must be a torch.Tensor or None")
    if sinks.dtype != torch.float32:
        raise NotImplementedError(f"{fn}: sinks.dtype is {sinks.dtype}: aotk takes torch.float32")
    if tuple(sinks.shape) != (heads,):
        raise ValueError(f"{fn}: sinks must have shape ({heads},) (one logit per query head), got {tuple(sinks.shape)}")
    return sinks if sinks.stride(-1) == 1 else sinks.contiguous()


def _window_is_local(window_size):
    """flash-attn's test for a local (windowed) attention: either bound of window_size set."""
    left, right = window_size
    return int(left) >= 0 or int(right) >= 0


def _check_rotary(fn, cos, sin, q, k, capacity):
    """flash-attn's rotary_cos / rotary_sin: [seqlen_ro, rotary_dim / 2] in q's dtype, rotary_dim a
    multiple of 16 up to q's head dim, seqlen_ro covering the capacity; only with k and v (the new
    tokens' keys, which are rotated too). Returns rotary_dim."""
    if cos is None or sin is None:
        raise ValueError(f"{fn}: give both rotary_cos and rotary_sin, or neither")
    if k is None:
        raise ValueError(f"{fn}: rotary_cos/rotary_sin rotate q and the new keys: they need k and v (as in flash-attn)")
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        _check_tensor(fn, name, t, 2, "[seqlen_ro, rotary_dim / 2]")
        if t.dtype != q.dtype:
            raise ValueError(f"{fn}: {name}.dtype is {t.dtype} but q's is {q.dtype}: they must match")
    if cos.shape != sin.shape:
        raise ValueError(f"{fn}: rotary_cos and rotary_sin must have the same shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    rotary_dim = 2 * cos.shape[1]
    if rotary_dim == 0 or rotary_dim % 16 != 0 or rotary_dim > q.shape[-1]:
        raise ValueError(f"{fn}: rotary_dim = 2 * rotary_cos.shape[1] = {rotary_dim} must be a positive multiple of 16 "
                         f"up to the head dim {q.shape[-1]}")
    if cos.shape[0] < capacity:
        raise ValueError(f"{fn}: rotary_cos has {cos.shape[0]} positions but the cache holds {capacity}: seqlen_ro "
                         f"must cover every position")
    return rotary_dim


def _rotate(x, cos, sin, positions, rotary_dim, interleaved):
    """x [batch, seqlen, heads, d] with its first rotary_dim dims rotated at positions [batch, seqlen]:
    pairs (2i, 2i + 1) when interleaved (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX), in fp32, rounded
    once to x's dtype; the other dims copied."""
    c = cos[positions].float()[:, :, None, :]  # [batch, seqlen, 1, rotary_dim / 2]
    s = sin[positions].float()[:, :, None, :]
    r = x[..., :rotary_dim].float()
    if interleaved:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = r[..., :rotary_dim // 2], r[..., rotary_dim // 2:]
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., rotary_dim:]), dim=-1)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, sinks=None):
    fn = "aotk.flash_attn_with_kvcache"
    names = ("q", "k_cache", "v_cache")
    _check_tensor(fn, "q", q, 4, "[batch, seqlen_q, heads_q, head_dim]")
    cache_layout = ("[batch, capacity, heads_kv, head_dim] (paged, with block_table: "
                    "[num_pages, page_size, heads_kv, head_dim])")
    _check_tensor(fn, "k_cache", k_cache, 4, cache_layout)
    _check_tensor(fn, "v_cache", v_cache, 4, cache_layout)
    _check_attn_dtypes(fn, names, q, k_cache, v_cache)
    _check_attn_head_dims(fn, names, q, k_cache, v_cache)
    batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    if seqlen_q > _capi.AOTK_DECODE_MAX_SEQLEN_Q:
        raise NotImplementedError(f"{fn}: q has {seqlen_q} tokens per request: aotk's decoding kernel takes 1 to "
                                  f"{_capi.AOTK_DECODE_MAX_SEQLEN_Q} (a decoding or speculative step); for a prefill "
                                  f"use flash_attn_func or flash_attn_varlen_func")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"{fn}: k_cache and v_cache must share their first three dimensions: {tuple(k_cache.shape)} "
                         f"and {tuple(v_cache.shape)}")
    _check_heads(fn, names, heads_q, k_cache.shape[2])
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{fn}: {name}'s last dimension must be contiguous (stride 1): the cache is read and "
                             f"appended to in place, never copied")
    if cache_batch_idx is not None:
        # Request b's cache is k_cache[cache_batch_idx[b]]: the contiguous cache read as a paged one whose
        # pages are its slots (page_size = capacity) through the block table [batch, 1] = cache_batch_idx.
        if block_table is not None:
            raise ValueError(f"{fn}: cache_batch_idx indexes the slots of a contiguous cache; a paged cache maps "
                             f"requests to pages with block_table: give one of them")
        _check_tensor(fn, "cache_batch_idx", cache_batch_idx, 1, "[batch]")
        if cache_batch_idx.dtype != torch.int32 or cache_batch_idx.shape[0] != batch:
            raise ValueError(f"{fn}: cache_batch_idx must be int32 [batch={batch}], got {cache_batch_idx.dtype} "
                             f"{tuple(cache_batch_idx.shape)}")
        block_table = cache_batch_idx.reshape(batch, 1).contiguous()
        capacity = k_cache.shape[1]
    elif block_table is not None:
        block_table = _check_block_table(fn, block_table, batch)
        capacity = block_table.shape[1] * k_cache.shape[1]
    else:
        if k_cache.shape[0] != batch:
            raise ValueError(f"{fn}: k_cache holds {k_cache.shape[0]} requests but q has batch {batch} (a paged "
                             f"cache needs block_table; a cache of more slots than requests, cache_batch_idx)")
        capacity = k_cache.shape[1]

    if (k is None) != (v is None):
        raise ValueError(f"{fn}: give both k and v (the new tokens' keys and values), or neither")
    seqlen_new = 0
    if k is not None:
        _check_tensor(fn, "k", k, 4, "[batch, seqlen_new, heads_kv, head_dim]")
        _check_tensor(fn, "v", v, 4, "[batch, seqlen_new, heads_kv, head_dim_v]")
        for name, new, cache in (("k", k, k_cache), ("v", v, v_cache)):
            expected = (batch, k.shape[1], cache.shape[2], cache.shape[3])
            if tuple(new.shape) != expected:
                raise ValueError(f"{fn}: {name} must have shape {expected} ([batch, seqlen_new, heads_kv, head_dim] of "
                                 f"the cache), got {tuple(new.shape)}")
            if new.dtype != cache.dtype:
                raise ValueError(f"{fn}: {name}.dtype is {new.dtype} but the cache's is {cache.dtype}: they must match")
        seqlen_new = k.shape[1]
        if cache_seqlens is None:
            raise ValueError(f"{fn}: appending k and v needs cache_seqlens (where each request's new tokens go), as "
                             f"in flash-attn")
        if seqlen_new > capacity:
            raise ValueError(f"{fn}: k and v hold {seqlen_new} new tokens per request but the cache holds at most "
                             f"{capacity}")
    rotary = rotary_cos is not None or rotary_sin is not None
    if rotary:
        rotary_dim = _check_rotary(fn, rotary_cos, rotary_sin, q, k, capacity)
    if k is not None:
        if seqlen_new == 0:  # nothing to append (and the library takes no empty tensor)
            k = v = None

    if cache_seqlens is None:  # every request attends to its whole cache
        cache_seqlens = torch.full((batch,), capacity, dtype=torch.int32, device=q.device)
    elif isinstance(cache_seqlens, torch.Tensor):
        if cache_seqlens.dtype != torch.int32 or tuple(cache_seqlens.shape) != (batch,):
            raise ValueError(f"{fn}: cache_seqlens must be an int or an int32 tensor [batch={batch}], got "
                             f"{cache_seqlens.dtype} {tuple(cache_seqlens.shape)}")
        if cache_seqlens.stride(0) != 1:
            cache_seqlens = cache_seqlens.contiguous()
    else:  # an int for every request, as flash-attn broadcasts it
        length = _check_int(fn, "cache_seqlens", cache_seqlens, 0, capacity - seqlen_new)
        cache_seqlens = torch.full((batch,), length, dtype=torch.int32, device=q.device)

    if cache_leftpad is not None:
        _check_tensor(fn, "cache_leftpad", cache_leftpad, 1, "[batch]")
        if cache_leftpad.dtype != torch.int32 or cache_leftpad.shape[0] != batch:
            raise ValueError(f"{fn}: cache_leftpad must be an int32 tensor [batch={batch}], got {cache_leftpad.dtype} "
                             f"{tuple(cache_leftpad.shape)}")

    scale = _scale(fn, softmax_scale)
    window_left, window_right = _window(fn, window_size, causal)
    softcap = _check_softcap(fn, softcap)
    alibi_slopes = _check_alibi(fn, alibi_slopes, batch, heads_q)
    sinks = _check_sinks(fn, sinks, heads_q)
    num_splits = _check_int(fn, "num_splits", num_splits, 0, _capi.AOTK_DECODE_MAX_SPLITS)
    _check_device(fn, [("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v),
                       ("cache_seqlens", cache_seqlens), ("cache_batch_idx", cache_batch_idx),
                       ("cache_leftpad", cache_leftpad),
                       ("block_table", block_table), ("alibi_slopes", alibi_slopes),
                       ("sinks", sinks), ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)])
    if rotary:
        # flash-attn's positions: new key i of request b at cache_seqlens[b] + i; query token i there too
        # under a causal mask or a window, else every query token at cache_seqlens[b]. Lengths are clamped
        # to [0, capacity] as the kernels clamp them, and a position past the table's last row takes that
        # row: seqlen_ro covers the capacity, so only a key that is not written (at or past the capacity)
        # or a query token of an append that overran it gets there. Not fused: torch ops before the
        # library's call (a few small kernels; the call itself is unchanged).
        start = cache_seqlens.to(torch.int64).clamp(0, capacity)[:, None]
        if cache_leftpad is not None:  # flash-attn's rotary positions count from the request's first key
            start = (start - cache_leftpad.to(torch.int64).clamp(min=0)[:, None]).clamp(min=0)
        last = rotary_cos.shape[0] - 1
        local = causal or _window_is_local(window_size)
        q_positions = start + torch.arange(seqlen_q, device=q.device) if local else start.expand(batch, seqlen_q)
        q = _rotate(q, rotary_cos, rotary_sin, q_positions.clamp(max=last), rotary_dim, rotary_interleaved)
        if k is not None:
            k_positions = start + torch.arange(seqlen_new, device=q.device)
            k = _rotate(k, rotary_cos, rotary_sin, k_positions.clamp(max=last), rotary_dim, rotary_interleaved)
    q = _last_dim_contiguous(q)
    # Appending is the library's (in-kernel, before the attention, in the same call): cache_seqlens goes in
    # as the lengths before the step, and neither it nor anything but the new rows of the caches changes.
    out, lse = torch.ops.aotk.decode(q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, sinks, scale,
                                     bool(causal), window_left, window_right, softcap, num_splits, k, v,
                                     cache_leftpad=cache_leftpad)
    if return_softmax_lse:
        return out, lse
    return out


_MERGE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _stack_partials(fn, name, partials):
    if isinstance(partials, (list, tuple)):
        if not partials or not all(isinstance(t, torch.Tensor) for t in partials):
            raise TypeError(f"{fn}: {name} must be a tensor or a non-empty sequence of tensors")
        return torch.stack(list(partials))
    return partials


def merge_attention_states(out_partials, lse_partials, sinks=None, out_dtype=None):
    fn = "aotk.merge_attention_states"
    out_partials = _stack_partials(fn, "out_partials", out_partials)
    lse_partials = _stack_partials(fn, "lse_partials", lse_partials)
    if not isinstance(out_partials, torch.Tensor):
        raise TypeError(f"{fn}: out_partials must be a torch.Tensor, got {type(out_partials).__name__}")
    if out_partials.dim() not in (4, 5):
        raise ValueError(f"{fn}: out_partials must have 5 dimensions [num_partials, batch, seqlen_q, heads, head_dim] "
                         f"or 4 [num_partials, total_q, heads, head_dim], got shape {tuple(out_partials.shape)}")
    packed = out_partials.dim() == 4
    if packed:
        num_partials, total_q, heads, head_dim = out_partials.shape
        lse_shape, lse_layout = (num_partials, heads, total_q), "[num_partials, heads, total_q]"
    else:
        num_partials, batch, seqlen_q, heads, head_dim = out_partials.shape
        lse_shape, lse_layout = (num_partials, batch, heads, seqlen_q), "[num_partials, batch, heads, seqlen_q]"
    _check_tensor(fn, "lse_partials", lse_partials, len(lse_shape), lse_layout)
    if tuple(lse_partials.shape) != lse_shape:
        raise ValueError(f"{fn}: lse_partials must have shape {lse_shape} {lse_layout} for out_partials of shape "
                         f"{tuple(out_partials.shape)}, got {tuple(lse_partials.shape)}")
    if out_partials.dtype not in _MERGE_DTYPES:
        raise NotImplementedError(f"{fn}: out_partials.dtype is {out_partials.dtype}: aotk's merge takes "
                                  f"torch.float32, torch.float16 or torch.bfloat16")
    if lse_partials.dtype != torch.float32:
        raise NotImplementedError(f"{fn}: lse_partials.dtype is {lse_partials.dtype}: aotk takes torch.float32 (what "
                                  f"its attention calls return)")
    out_dtype = out_partials.dtype if out_dtype is None else out_dtype
    if out_dtype not in _MERGE_DTYPES:
        raise NotImplementedError(f"{fn}: out_dtype is {out_dtype}: aotk's merge writes torch.float32, torch.float16 "
                                  f"or torch.bfloat16")
    if head_dim % 8 != 0:
        raise NotImplementedError(f"{fn}: head_dim is {head_dim}: aotk's merge takes multiples of 8")
    sinks = _check_sinks(fn, sinks, heads)
    _check_device(fn, [("out_partials", out_partials), ("lse_partials", lse_partials), ("sinks", sinks)])
    out_partials, lse_partials = _last_dim_contiguous(out_partials), _last_dim_contiguous(lse_partials)
    return torch.ops.aotk.merge(out_partials, lse_partials, sinks, out_dtype)

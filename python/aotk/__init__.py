"""aotk: Triton attention kernels compiled ahead of time, for PyTorch, as a drop-in for flash-attn.

    from aotk import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, scaled_dot_product_attention
    out = flash_attn_func(q, k, v, causal=True)        # q [batch, seqlen, heads, head_dim], fp16/bf16, CUDA
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=lengths, causal=True)  # decoding

The package is pure Python over libaotk.so (loaded with ctypes from beside the package, or from
$AOTK_LIBRARY): no compiler, no Triton, no CUDA toolkit. `import aotk` needs neither torch nor a GPU;
version(), build_info() and library_path() work anywhere the library file is. The attention functions
import torch when first called (or at `import aotk` if torch is already imported).

What aotk cannot do raises an error naming the argument (NotImplementedError for a feature it lacks,
ValueError/TypeError for a bad value); nothing falls back to another implementation. Failures inside
the library raise AotkError, a RuntimeError carrying aotk's status name and message.

CUDA graphs: the calls launch on torch's current stream, allocate through torch's caching allocator
and never synchronize, so they can be captured. A kernel's image is loaded by the library on its first
use in the process; capture after a warm-up run (torch's recipe for graphs does one) or call
aotk.preload() first.
"""
import ctypes
import sys

from . import _capi
from ._capi import AotkError

__version__ = "0.4.0"  # the library's version this package was written for (tests check they agree)

__all__ = [
    "AotkError", "version", "version_number", "build_info", "library_path", "preload", "set_image_policy",
    "self_test", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "merge_attention_states",
    "scaled_dot_product_attention", "selection_attention",
]


def library_path():
    """The path of the libaotk.so this process loaded (loading it if needed)."""
    return _capi.library().path


def version():
    """The loaded library's version, "0.4.0" (aotk_version_string)."""
    return _capi.library().lib.aotk_version_string().decode()


def version_number():
    """The loaded library's AOTK_VERSION_NUMBER, major * 10000 + minor * 100 + patch."""
    return int(_capi.library().lib.aotk_version_number())


def build_info():
    """What the loaded library contains (aotk_get_build_info), as a dict; needs no GPU."""
    lib = _capi.library()
    info = _capi.AotkBuildInfo()
    info.struct_size = ctypes.sizeof(_capi.AotkBuildInfo)
    lib.check(lib.lib.aotk_get_build_info(ctypes.byref(info)), "aotk_get_build_info")
    return {
        "version": version(),
        "library": lib.path,
        "triton_version": (info.triton_version or b"").decode(),
        "ptxas_version": (info.ptxas_version or b"").decode(),
        "kernels_sm80": info.kernels_sm80,
        "kernels_sm90": info.kernels_sm90,
        "image_bytes_sm80": info.image_bytes_sm80,
        "image_bytes_sm90": info.image_bytes_sm90,
        "catalog_kernels": info.catalog_kernels,
    }


def _with_device_context(device, call):
    """Runs call() with CUDA device `device`'s primary context current: through torch when torch is
    already imported (so that torch's current device is respected), else through the driver."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        ordinal = torch.cuda.current_device() if device is None else torch.device("cuda", device).index
        with torch.cuda.device(ordinal):
            _capi.ensure_context(ordinal)
            return call()
    if device is None:
        try:
            return call()  # a context may be current already; without a driver this is aotk's own error
        except AotkError as e:
            if e.status != _capi.AOTK_ERROR_NO_CONTEXT:
                raise
    _capi.ensure_context(0 if device is None else int(device))
    return call()


def preload(device=None):
    """Loads every kernel image for CUDA device `device` (an ordinal; default torch's current device, or
    0 without torch), so that no later call loads one: call it before capturing a CUDA graph whose
    aotk calls have not run before in this process. Raises AotkError on failure."""
    lib = _capi.library()
    _with_device_context(device, lambda: lib.check(lib.lib.aotk_preload(), "aotk_preload"))


def set_image_policy(policy):
    """"auto" (default: the sm_90 cubins on sm_90, sm_80 cubins on sm_8x, sm_80 PTX on newer GPUs) or
    "sm80_ptx" (the sm_80 PTX on any GPU, to test the path newer GPUs take). Process-wide."""
    values = {"auto": _capi.AOTK_IMAGE_POLICY_AUTO, "sm80_ptx": _capi.AOTK_IMAGE_POLICY_SM80_PTX}
    if policy not in values:
        raise ValueError(f"aotk.set_image_policy: policy must be 'auto' or 'sm80_ptx', got {policy!r}")
    lib = _capi.library()
    lib.check(lib.lib.aotk_set_image_policy(values[policy]), "aotk_set_image_policy")


def self_test(device=0):
    """aotk_self_test on GPU `device`: small forward and backward problems of every dtype and head dim,
    selection attention, decoding (contiguous, paged, split and appending) and the merge, against
    float64 references. Returns the report (one line per case); raises AotkError, with the report in
    its message, on a failure. Allocates and synchronizes: not for the training loop."""
    lib = _capi.library()
    report = ctypes.create_string_buffer(1 << 16)
    status = lib.lib.aotk_self_test(int(device), report, ctypes.sizeof(report))
    text = report.value.decode("utf-8", "replace")
    if status != _capi.AOTK_OK:
        error = lib.error(status, "aotk_self_test")
        error.args = (f"{error.args[0]}\n{text}",)
        raise error
    return text


_torch_functions_module = None


def _ops(fn):
    """aotk._torch_functions (the front ends), importing torch and registering the custom ops on first use."""
    global _torch_functions_module
    if _torch_functions_module is None:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise ImportError(f"aotk.{fn} needs PyTorch, which could not be imported ({e}); aotk's functions "
                              f"that take no tensors (version, build_info, ...) work without it") from e
        from . import _torch_functions as module
        _torch_functions_module = module
    return _torch_functions_module


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash-attn's flash_attn_func, on aotk's kernels.

    q [batch, seqlen_q, heads_q, head_dim_qk], k [batch, seqlen_k, heads_kv, head_dim_qk],
    v [batch, seqlen_k, heads_kv, head_dim_v]: fp16 or bf16, one CUDA device, any strides (a last
    dimension that is not contiguous is copied, as flash-attn does). heads_q a multiple of heads_kv
    (GQA/MQA). Head dims: multiples of 8 from 8 to 256. Returns out [batch, seqlen_q, heads_q, head_dim_v].

    dropout_p: in [0, 1), rounded to a multiple of 1/256 (t / 256, t = round(256 dropout_p) <= 255; kept
    weights are scaled by 256 / (256 - t)); the {seed, offset} come from torch's CUDA generator (torch.manual_seed
    reproduces them). softmax_scale: None for 1/sqrt(head_dim_qk). causal: bottom-right aligned, as
    flash-attn >= 2.1. window_size (left, right): -1 for unbounded. softcap: 0 off. alibi_slopes: fp32
    [heads_q] or [batch, heads_q]. deterministic: False (flash-attn's default) lets the sm_90 backward
    add dq in a varying order (faster; dk and dv stay bitwise reproducible); True asks for a bitwise
    deterministic backward everywhere (include/aotk.h, aotk_attn_params.deterministic).
    return_attn_probs=True returns (out, softmax_lse, None), flash-attn's triple: softmax_lse fp32
    [batch, heads_q, seqlen_q], the natural log of each row's softmax denominator (-inf for a row that
    sees no key, where flash-attn writes +inf), detached (no gradient flows back through it; flash-attn
    drops that gradient silently); None in place of flash-attn's S_dmask, which it fills only with
    dropout and aotk never materializes. Gradients flow through out as usual.
    """
    return _ops("flash_attn_func").flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                                                   alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash-attn's flash_attn_varlen_func, on aotk's kernels.

    q [total_q, heads_q, head_dim_qk], k [total_k, heads_kv, head_dim_qk], v [total_k, heads_kv,
    head_dim_v]: sequences packed one after another; cu_seqlens_q/_k int32 [num_seqs + 1] on the GPU
    (sequence b is rows cu_seqlens[b] .. cu_seqlens[b+1]-1); max_seqlen_q/_k ints bounding every
    sequence's length (they size the grid; a longer sequence is only partly computed). Returns out
    [total_q, heads_q, head_dim_v]; rows outside every sequence read as rows that saw no key (out 0,
    lse -inf). alibi_slopes: fp32 [heads_q] or
    [num_seqs, heads_q]. Other arguments as flash_attn_func; return_attn_probs=True gives (out,
    softmax_lse [heads_q, total_q], None).

    With block_table (int32 [num_seqs, max_pages_per_seq]), as in flash-attn: k and v are paged KV caches
    [num_pages, page_size, heads_kv, head_dim] (key j of sequence b in page block_table[b, j // page_size],
    row j % page_size), and cu_seqlens_k gives each sequence's key count (cu_seqlens_k[b+1] -
    cu_seqlens_k[b], taken on the GPU without a host synchronization). Sequence b's query tokens are its
    last ones: token i sits at position L_b - len_q_b + i (causal aligned bottom-right; a token before
    position 0 sees no key: out 0, lse -inf). This is a prefill over the cache (chunked prefill, prefix
    caching), run by aotk_attn_decode with packed queries; it is forward only (inputs that require grad
    are refused with NotImplementedError), dropout_p must be 0, and no split is used.
    """
    return _ops("flash_attn_varlen_func").flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
        window_size, softcap, alibi_slopes, deterministic, return_attn_probs, block_table)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, sinks=None):
    """flash-attn's flash_attn_with_kvcache, on aotk's decoding kernel (aotk_attn_decode): a few new query
    tokens per request against a KV cache, contiguous or paged. Inference only: no gradient.

    q [batch, seqlen_q, heads_q, head_dim_qk], seqlen_q from 1 to 16 (a decoding or speculative step;
    NotImplementedError beyond: use flash_attn_func / flash_attn_varlen_func for a prefill), fp16 or bf16.
    k_cache [batch, capacity, heads_kv, head_dim_qk] and v_cache [.., head_dim_v], or, with block_table
    (int32 [batch, max_pages_per_request]), paged: [num_pages, page_size, heads_kv, head_dim], any
    page_size (flash-attn wants multiples of 256); request b's key j is row j % page_size of page
    block_table[b, j // page_size]. The caches are read in place (last dimension contiguous; aotk's
    kernel also wants 16-byte-aligned pointers and strides that are multiples of 16 elements, which
    contiguous caches with head dims that are multiples of 16 have: else AotkError
    AOTK_ERROR_MISALIGNED_POINTER). heads_q a multiple of heads_kv (GQA/MQA).

    cache_seqlens: an int for every request, or an int32 tensor [batch] on the GPU: the keys already in
    each request's cache (None: the whole capacity; a tensor's values outside [0, capacity] are clamped
    to it). It is read on the GPU, never on the host, so a captured CUDA graph replays with the lengths
    the tensor then holds.

    k, v [batch, seqlen_new, heads_kv, head_dim]: new keys and values, appended in place by the library
    within the same call (by the decoding kernel itself, or a first kernel; no host synchronization, so CUDA
    graphs capture it, and torch.compile sees k_cache and v_cache as mutated): new token i of request b
    goes to position max(cache_seqlens[b], 0) + i (through block_table when paged), then request b
    attends to L_b = min(max(cache_seqlens[b], 0) + seqlen_new, capacity) keys (without k and v, L_b is
    cache_seqlens[b] clamped). cache_seqlens is the length before the step and is not updated (as in
    flash-attn): the caller advances it. New tokens that would land at or past a request's capacity are
    dropped (not written, not attended to), never written into another request's cache; an int
    cache_seqlens that would overrun (more than capacity - seqlen_new) is refused with ValueError.
    Nothing else of the caches is written. k and v need not be aligned (they are copied when the kernel
    could not read them in place).

    causal: token i of the step sits at position L_b - seqlen_q + i and sees the keys up to it
    (bottom-right, flash-attn's). softmax_scale, window_size, softcap and alibi_slopes ([heads_q] or
    [batch, heads_q] fp32) as flash_attn_func. num_splits: 0 lets aotk choose how many ranges to cut
    each request's keys into (flash-decoding, when batch x heads_kv cannot fill the GPU; the choice
    depends on the sizes, never on cache_seqlens); 1 to 256 forces it. sinks (an aotk extension,
    gpt-oss's attention sinks): optional fp32 [heads_q], one logit per head joining each row's softmax
    denominator.

    Returns out [batch, seqlen_q, heads_q, head_dim_v], or (out, softmax_lse) with return_softmax_lse=True:
    softmax_lse fp32 [batch, heads_q, seqlen_q], natural log (-inf for a request with no key).

    cache_leftpad: int32 [batch] on the GPU, as in flash-attn: request b's keys start at cache row
    cache_leftpad[b], the rows before it being padding that is never attended. cache_seqlens[b] stays the
    row where the request ends (and where k and v are appended); causal alignment, windows and ALiBi's
    distance count cache rows, and the rotary positions below count from cache_leftpad[b]. A contiguous
    cache's padding is never read; with block_table or cache_batch_idx (both read as pages) the padding
    rows of the first key block may be read, so they must hold finite values (include/aotk.h).

    rotary_cos, rotary_sin: [seqlen_ro, rotary_dim / 2] in q's dtype, rotary_dim a multiple of 16 up to
    the head dim and seqlen_ro at least the capacity; only with k and v, as in flash-attn. The new keys
    are rotated at positions cache_seqlens[b] + i before they are appended, and q at the same positions
    under causal or a window (else every query token at cache_seqlens[b]), each less cache_leftpad[b]
    when given; the first rotary_dim dims,
    pairs (2i, 2i + 1) with rotary_interleaved=True (GPT-J), (i, i + rotary_dim / 2) otherwise
    (GPT-NeoX), computed in fp32. Not fused into the library's kernels: a few torch ops before the call.

    cache_batch_idx: int32 [batch] on the GPU, with a contiguous cache only: request b's keys are
    k_cache[cache_batch_idx[b]] (the cache may hold more slots than requests), appended there too. The
    library reads it as a paged cache of one page per slot (page_size = capacity), so it costs what
    such pages cost (README, "Decoding performance"). Indices must lie in [0, k_cache.shape[0]) (not
    checked: they are on the GPU); two requests of the same slot appending write the same rows.
    """
    return _ops("flash_attn_with_kvcache").flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
        block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes, num_splits,
        return_softmax_lse, sinks)


def merge_attention_states(out_partials, lse_partials, sinks=None, out_dtype=None):
    """Merges attention states: the out and lse of the same queries over disjoint key sets (a shared
    prefix and each request's suffix in cascade attention; one ring step each in context parallelism)
    into the out and lse over their union (aotk_attn_merge). "Attention state" is FlashInfer's name for
    such an (out, lse) pair:
        lse = log(sum_p exp(lse_p) [+ exp(sinks)]),   out = sum_p exp(lse_p - lse) out_p.

    out_partials [num_partials, batch, seqlen_q, heads, head_dim] (flash_attn_func's out, stacked) with
    lse_partials fp32 [num_partials, batch, heads, seqlen_q] (its softmax_lse, stacked); or packed
    [num_partials, total_q, heads, head_dim] with [num_partials, heads, total_q] (flash_attn_varlen_func's
    layouts). Either may be a sequence of per-partial tensors, stacked here (a copy). out_partials fp32,
    fp16 or bf16; head_dim a multiple of 8. A partial whose lse is -inf (no key) adds nothing.
    sinks: optional fp32 [heads], each head's sink logit joined once (for partials computed without it).
    out_dtype: the output's dtype (fp32, fp16 or bf16; default out_partials'). Returns (out
    [batch, seqlen_q, heads, head_dim] or [total_q, heads, head_dim], lse fp32 [batch, heads, seqlen_q]
    or [heads, total_q]); a row with no key in any partial (and no sink) gets out = 0, lse = -inf. No
    gradient (inference, like flash_attn_with_kvcache).
    """
    return _ops("merge_attention_states").merge_attention_states(out_partials, lse_partials, sinks, out_dtype)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention, on aotk's kernels.

    query [batch, heads_q, seqlen_q, head_dim_qk], key [batch, heads_kv, seqlen_k, head_dim_qk], value
    [batch, heads_kv, seqlen_k, head_dim_v] (torch's layout, read in place through strides), fp16 or
    bf16 on CUDA. is_causal is torch's top-left causal mask. heads_kv < heads_q needs enable_gqa=True.
    Returns [batch, heads_q, seqlen_q, head_dim_v] (a transposed view of a [batch, seqlen, heads, d]
    tensor, as torch's flash backend returns). attn_mask is not supported (NotImplementedError).
    """
    return _ops("scaled_dot_product_attention").scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def selection_attention(q, k, v, block_idx, block_size, block_cnt=None, cu_seqlens_q=None, cu_seqlens_k=None,
                        max_seqlen_k=None, softmax_scale=None, return_lse=False):
    """Selection attention (NSA's selected-blocks branch): each query token attends only to the key
    blocks listed for it, causally (include/aotk.h gives the exact contract).

    q [total_q, heads_q, head_dim_qk], k [total_k, heads_kv, head_dim_qk], v [total_k, heads_kv,
    head_dim_v]: fp16 or bf16, (head_dim_qk, head_dim_v) in (64, 64), (128, 128), (192, 128).
    block_idx int32 [total_q, heads_kv, slots]: sequence-local block ids, -1 for an empty slot; shared
    by the query heads of a GQA group. block_size: 32, 64 or 128. block_cnt: optional int32
    [total_q, heads_kv], only the first block_cnt slots count. cu_seqlens_q/_k (int32 [num_seqs + 1])
    and max_seqlen_k: packed sequences; without them q and k are one sequence (bottom-right aligned).
    Returns out [total_q, heads_q, head_dim_v], and with return_lse=True also lse [total_q, heads_q]
    fp32 (natural log), returned detached: no gradient flows back through lse.
    """
    return _ops("selection_attention").selection_attention(
        q, k, v, block_idx, block_size, block_cnt, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, softmax_scale,
        return_lse)


# With torch already imported, register the custom ops now, so that torch.compile never meets their
# registration inside a trace.
if "torch" in sys.modules:
    try:
        _ops("flash_attn_func")
    except ImportError:
        pass

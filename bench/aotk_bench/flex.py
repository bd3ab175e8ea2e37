"""FlexAttention as a column: the GQA and varlen document rows, and the grid with --flex."""
import time

from . import common
from .common import BWD_REL_TOL, OUT_ATOL, empty_cache, max_abs_diff, note, rel_l2, synchronize, time_ms, torch

# ---------------------------------------------------------------------------------------------------
# FlexAttention (torch.nn.attention.flex_attention) as a column: the GQA and varlen rows, and the grid with --flex
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
    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=tokens, KV_LEN=tokens, device=common.DEVICE)


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

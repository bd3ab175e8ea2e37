"""The feature ops "fwd_feat" and "bwd_feat": issue 4's features, each against the plain kernel of its head dim."""
import ctypes
import math
import random
import traceback

from . import common
from .common import (AOTK_ALIGN_BOTTOM_RIGHT, AOTK_ALIGN_TOP_LEFT, AOTK_OP_ATTN_BWD, AOTK_OP_ATTN_FWD, F, HIDDEN,
                     OUT_ATOL, TOTAL_TOKENS, AotkError, _sdpa_backend, absent_tensor, current_stream, describe_tensor,
                     empty_cache, fwd_params, loud, note, sdpa_kernel, synchronize, time_ms, torch)

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
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], dtype=torch.float32,
                        device=common.DEVICE)


def feature_tensors(spec, q_scale=1.0, requires_grad=False):
    """Fresh inputs and output buffers of a row, in aotk's layout (dense [b, s, h, d] or varlen
    [total, h, d]), plus its cu_seqlens, ALiBi slopes, sinks and RNG state as the row needs."""
    dt = torch.bfloat16
    h, hkv, dqk, dv = spec["heads_q"], spec["heads_kv"], spec["head_dim_qk"], spec["head_dim_v"]
    if spec["seqlens_q"] is not None:
        lead_q, lead_k = (sum(spec["seqlens_q"]),), (sum(spec["seqlens_k"]),)
    else:
        lead_q, lead_k = (spec["batch"], spec["seqlen_q"]), (spec["batch"], spec["seqlen_k"])
    t = {"q": torch.randn(*lead_q, h, dqk, device=common.DEVICE, dtype=dt),
         "k": torch.randn(*lead_k, hkv, dqk, device=common.DEVICE, dtype=dt),
         "v": torch.randn(*lead_k, hkv, dv, device=common.DEVICE, dtype=dt)}
    if q_scale != 1.0:
        t["q"].mul_(q_scale)
    if requires_grad:
        for name in ("q", "k", "v"):
            t[name].requires_grad_(True)
    t["out"] = torch.empty(*lead_q, h, dv, device=common.DEVICE, dtype=dt)
    if spec["seqlens_q"] is not None:
        t["lse"] = torch.empty(h, lead_q[0], device=common.DEVICE, dtype=torch.float32)
        for side in ("q", "k"):
            offsets = [0]
            for length in spec[f"seqlens_{side}"]:
                offsets.append(offsets[-1] + length)
            t[f"cu_seqlens_{side}"] = torch.tensor(offsets, dtype=torch.int32, device=common.DEVICE)
    else:
        t["lse"] = torch.empty(spec["batch"], h, spec["seqlen_q"], device=common.DEVICE, dtype=torch.float32)
    if spec["alibi"]:
        t["alibi_slopes"] = alibi_slopes(h)
    if spec["sinks"]:
        # Around the rows' lse (log(seqlen_k) + 1/2 for unit-variance scores), so each sink takes 12% to 88%
        # of its row's mass: a library that ignored it fails the check (at ~1% it might not).
        lse_estimate = math.log(max(spec["seqlens_k"] or [spec["seqlen_k"]])) + 0.5
        t["sinks"] = lse_estimate + torch.rand(h, device=common.DEVICE, dtype=torch.float32) * 4.0 - 2.0
    if spec["dropout_p"] > 0:
        t["rng_state"] = torch.tensor([random.getrandbits(62), random.getrandbits(32)], dtype=torch.int64,
                                      device=common.DEVICE)
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
        t["dropout_mask"] = torch.full(dropout_mask_shape(c), 2, dtype=torch.uint8, device=common.DEVICE)
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
        workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
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
            workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
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

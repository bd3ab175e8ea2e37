"""A cross-check of aotk's attention features against torch autograd, on the GPU machine.

    python3 bench/crosscheck/check_features.py --lib path/to/libaotk.so

Independent of the C test suite (which checks against aotk's own float64 reference): here the
reference is a float32 attention written with torch ops (explicit masks, tanh softcap, ALiBi bias, a
sink column, the dropout mask aotk reports), and its gradients come from torch.autograd, so the two
suites share no code. Prints one line per case with the max error of out, lse, dq, dk, dv (and dsinks)
relative to the largest reference value, and exits non-zero if any exceeds the tolerance.
"""
import argparse
import ctypes
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import aotk_bench.common as ba  # noqa: E402  (the ctypes declarations of include/aotk.h)


def reference(q, k, v, scale, causal, top_left, wl, wr, softcap, alibi, sinks, keep, p):
    """Float32 attention of one sequence: q [sq, hq, dqk], k [sk, hk, dqk], v [sk, hk, dv]."""
    sq, hq, _ = q.shape
    sk, hk, _ = k.shape
    g = hq // hk
    kk = k.repeat_interleave(g, dim=1)
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    diag = 0 if top_left else sk - sq
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    rel = j - i - diag
    if alibi is not None:
        s = s - alibi[:, None, None] * (i + diag - j).abs()[None].float()
    ok = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        wr = 0
    if wl >= 0:
        ok &= rel >= -wl
    if wr >= 0:
        ok &= rel <= wr
    s = s.masked_fill(~ok[None], float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[:, None, None].expand(hq, sq, 1)], dim=2)
    lse = torch.logsumexp(s, dim=2)
    prob = torch.exp(s - lse[..., None])
    prob = torch.nan_to_num(prob, nan=0.0)
    if sinks is not None:
        prob = prob[..., :-1]
    if keep is not None:
        prob = prob * keep.float() / (1 - p)
    out = torch.einsum("hqk,khd->qhd", prob, vv)
    return out, lse


def run_case(lib, name, dtype=torch.bfloat16, batch=2, sq=300, sk=300, hq=4, hk=2, dqk=64, dv=64, causal=0,
             top_left=0, wl=-1, wr=-1, softcap=0.0, alibi=False, sinks=False, p=0.0, varlen=None, seed=0):
    torch.manual_seed(seed)
    dev = "cuda"
    if varlen:
        lens_q = [a for a, _ in varlen]
        lens_k = [b for _, b in varlen]
        batch = len(varlen)
        tq, tk = sum(lens_q), sum(lens_k)
        q = torch.randn(tq, hq, dqk, device=dev, dtype=dtype)
        k = torch.randn(tk, hk, dqk, device=dev, dtype=dtype)
        v = torch.randn(tk, hk, dv, device=dev, dtype=dtype)
        cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), device=dev, dtype=torch.int32)
        cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), device=dev, dtype=torch.int32)
        out = torch.empty(tq, hq, dv, device=dev, dtype=dtype)
        lse = torch.empty(hq, tq, device=dev, dtype=torch.float32)
        max_q, max_k = max(lens_q), max(lens_k)
    else:
        q = torch.randn(batch, sq, hq, dqk, device=dev, dtype=dtype)
        k = torch.randn(batch, sk, hk, dqk, device=dev, dtype=dtype)
        v = torch.randn(batch, sk, hk, dv, device=dev, dtype=dtype)
        out = torch.empty(batch, sq, hq, dv, device=dev, dtype=dtype)
        lse = torch.empty(batch, hq, sq, device=dev, dtype=torch.float32)
        max_q, max_k = sq, sk
    slopes = (torch.rand(hq, device=dev) * 0.2) if alibi else None
    sink = (torch.randn(hq, device=dev) * 2) if sinks else None
    rng = torch.tensor([1234 + seed, 77], device=dev, dtype=torch.int64)
    mask = torch.full((batch, hq, max_q, max_k), 255, device=dev, dtype=torch.uint8) if p > 0 else None
    params = ba.AotkAttnParams()
    params.struct_size = ctypes.sizeof(ba.AotkAttnParams)
    params.q, params.k, params.v, params.out, params.lse = (ba.describe_tensor(t) for t in (q, k, v, out, lse))
    params.causal = causal
    params.causal_align = top_left
    params.window_left, params.window_right = wl, wr
    params.softcap = softcap
    if varlen:
        params.cu_seqlens_q, params.cu_seqlens_k = ba.describe_tensor(cu_q), ba.describe_tensor(cu_k)
        params.max_seqlen_q, params.max_seqlen_k = max_q, max_k
    if alibi:
        params.alibi_slopes = ba.describe_tensor(slopes)
    if sinks:
        params.sinks = ba.describe_tensor(sink)
    if p > 0:
        params.dropout_p = p
        params.rng_state = ba.describe_tensor(rng)
        params.dropout_mask = ba.describe_tensor(mask)
    try:
        lib.attn_fwd(ctypes.byref(params), None)
    except ba.AotkError as e:
        return f"{name}: {e}", False
    # The backward.
    dout = torch.randn_like(out)
    dq, dk, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dsinks = torch.empty(hq, device=dev, dtype=torch.float32) if sinks else None
    params.dout, params.dq, params.dk, params.dv = (ba.describe_tensor(t) for t in (dout, dq, dk, dv_))
    if sinks:
        params.dsinks = ba.describe_tensor(dsinks)
    params.dropout_mask = ba.absent_tensor()
    try:
        info = lib.query(ba.AOTK_OP_ATTN_BWD, params)
        ws = torch.empty(max(info["workspace_bytes"], 16), device=dev, dtype=torch.uint8)
        lib.attn_bwd(ctypes.byref(params), ctypes.c_void_p(ws.data_ptr()), ctypes.c_size_t(ws.numel()), None)
    except ba.AotkError as e:
        return f"{name}: {e}", False
    torch.cuda.synchronize()

    # Reference, per sequence, with autograd.
    scale = 1.0 / math.sqrt(dqk)
    seqs = []
    if varlen:
        cq, ck = cu_q.tolist(), cu_k.tolist()
        for b in range(batch):
            seqs.append((slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1]), b))
    errs = {}

    def upd(key, got, want):
        if want.numel() == 0:
            return
        e = (got.float() - want.float()).abs().max().item() / max(1.0, want.float().abs().max().item())
        errs[key] = max(errs.get(key, 0.0), e)

    qf = q.float().detach().requires_grad_()
    kf = k.float().detach().requires_grad_()
    vf = v.float().detach().requires_grad_()
    sinkf = sink.clone().requires_grad_() if sinks else None
    outs, lses = [], []
    for b in range(batch):
        if varlen:
            sl_q, sl_k, _ = seqs[b]
            qb, kb, vb = qf[sl_q], kf[sl_k], vf[sl_k]
        else:
            qb, kb, vb = qf[b], kf[b], vf[b]
        keep = mask[b, :, :qb.shape[0], :kb.shape[0]] if p > 0 else None
        o, l = reference(qb, kb, vb, scale, causal, top_left, wl, wr, softcap, slopes, sinkf, keep, p)
        outs.append(o)
        lses.append(l)
        if varlen:
            upd("out", out[sl_q], o)
            fin = torch.isfinite(l)
            upd("lse", lse[:, sl_q][fin], l[fin])
        else:
            upd("out", out[b], o)
            fin = torch.isfinite(l)
            upd("lse", lse[b][fin], l[fin])
    loss = sum((o * (dout[seqs[b][0]] if varlen else dout[b]).float()).sum() for b, o in enumerate(outs))
    loss.backward()
    upd("dq", dq, qf.grad)
    upd("dk", dk, kf.grad)
    upd("dv", dv_, vf.grad)
    if sinks:
        upd("dsinks", dsinks, sinkf.grad)
    if p > 0:
        m = mask[mask != 255]
        errs["keep"] = m.float().mean().item()
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
    ok = all(v <= tol for key, v in errs.items() if key != "keep")
    text = " ".join(f"{key}={val:.2e}" for key, val in errs.items())
    return f"{'ok  ' if ok else 'FAIL'} {name}: {text} [{info['kernel_name']}]", ok


CASES = [
    ("plain", {}),
    ("causal", {"causal": 1}),
    ("causal sq<sk", {"causal": 1, "sq": 100, "sk": 333}),
    ("causal sq>sk", {"causal": 1, "sq": 333, "sk": 100}),
    ("causal top-left sq<sk", {"causal": 1, "top_left": 1, "sq": 100, "sk": 333}),
    ("causal top-left sq>sk", {"causal": 1, "top_left": 1, "sq": 333, "sk": 100}),
    ("window 64,0", {"wl": 64, "wr": 0}),
    ("window 0,0", {"wl": 0, "wr": 0}),
    ("window 100,37", {"wl": 100, "wr": 37, "sq": 500, "sk": 700}),
    ("window causal 129", {"causal": 1, "wl": 129, "sq": 700, "sk": 500, "top_left": 1}),
    ("varlen", {"varlen": [(100, 120), (0, 17), (257, 257), (1, 300), (64, 0)]}),
    ("varlen causal window", {"varlen": [(100, 120), (0, 17), (257, 257), (1, 300)], "causal": 1, "wl": 50}),
    ("d8", {"dqk": 8, "dv": 8}),
    ("d40", {"dqk": 40, "dv": 40}),
    ("d96", {"dqk": 96, "dv": 96}),
    ("d136", {"dqk": 136, "dv": 136}),
    ("d192 v128", {"dqk": 192, "dv": 128}),
    ("d256", {"dqk": 256, "dv": 256}),
    ("d64 v128", {"dqk": 64, "dv": 128}),
    ("softcap", {"softcap": 5.0}),
    ("alibi", {"alibi": True, "causal": 1}),
    ("sinks", {"sinks": True}),
    ("sinks causal sq>sk", {"sinks": True, "causal": 1, "sq": 300, "sk": 100}),
    ("dropout", {"p": 0.2}),
    ("dropout causal", {"p": 0.5, "causal": 1}),
    ("all", {"softcap": 20.0, "alibi": True, "sinks": True, "p": 0.1, "causal": 1, "wl": 90,
             "varlen": [(100, 120), (0, 17), (257, 257), (1, 300)], "dqk": 96, "dv": 96}),
    ("fp16 all", {"dtype": torch.float16, "softcap": 20.0, "alibi": True, "sinks": True, "p": 0.1, "wl": 90,
                  "wr": 30}),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    lib = ba.Aotk(args.lib)
    failures = 0
    for name, kw in CASES:
        if args.only and args.only not in name:
            continue
        for dtype in ((kw.pop("dtype"),) if "dtype" in kw else (torch.bfloat16,)):
            try:
                line, ok = run_case(lib, name, dtype=dtype, **kw)
            except Exception as e:  # report and go on: one broken case should not hide the others
                line, ok = f"FAIL {name}: {type(e).__name__}: {e}", False
            print(line, flush=True)
            failures += not ok
    print(f"{len(CASES) - failures}/{len(CASES)} feature cases passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

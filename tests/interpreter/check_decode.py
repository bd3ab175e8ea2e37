"""The decoding kernels (kernels/attn_decode.py) run in Triton's interpreter on the CPU, against float64.

    pip install triton torch numpy      # any recent Triton; a CPU-only torch is enough
    python3 tests/interpreter/check_decode.py [substring]

A developer's check for a machine with no GPU, not part of `make test` (the build installs no torch):
TRITON_INTERPRET=1 runs the kernels' Python on numpy, so the indexing, the masks, paging, splitting,
appending and the merge are exercised exactly as written, though not the compiled code (no tensor-core
rounding, no inline PTX: softcap's tanh.approx is replaced by an exact tanh). fp16 only: Triton's
interpreter computes bf16 dots wrongly (a bf16 16x16 dot is off by ~1e10 in Triton 3.9's interpreter).
Triton 3.6.0's interpreter (the pinned version) converts a loop bound to an int with int(array), which
NumPy 2 refuses for the one-element arrays its reductions leave ("only 0-dimensional arrays can be
converted to Python scalars", at the key loop's range(lo, hi, ...)): the patch below reads the element.
The host side (splits, strides, flags) is re-derived here from include/aotk.h, so a disagreement
with src/decode/aotk_decode.c shows up in the GPU test (tests/test_decode_gpu.c), not here.
"""
import math
import os
import random
import sys
import zlib
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels"))
import torch
import attn_decode as K
import attn_common, triton, triton.language as tl
import numpy as np
from triton.runtime import interpreter as _interpreter
_patch_lang_tensor = _interpreter._patch_lang_tensor
def _patch_lang_tensor_index(tensor, scope):
    _patch_lang_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))
_interpreter._patch_lang_tensor = _patch_lang_tensor_index
@triton.jit
def _tanh(x):
    e = tl.exp(2.0 * x)
    return (e - 1.0) / (e + 1.0)
attn_common.tanh_approx = _tanh

def ref_decode(q, kc, vc, table, seqlens, causal, wl, wr, softcap, slopes, sinks, scale, paged, page_size, leftpad=None):
    B, S, HQ, D = q.shape
    HK = kc.shape[2]; G = HQ // HK; DV = vc.shape[3]
    out = torch.zeros(B, S, HQ, DV, dtype=torch.float64); lse = torch.full((B, HQ, S), -math.inf, dtype=torch.float64)
    cap = table.shape[1] * page_size if paged else kc.shape[1]
    for b in range(B):
        L = max(0, min(int(seqlens[b]), cap))
        js = torch.arange(L)
        if paged:
            pages = table[b, js // page_size].long(); rows = js % page_size
            kk = kc[pages, rows].double(); vv = vc[pages, rows].double()
        else:
            kk = kc[b, :L].double(); vv = vc[b, :L].double()
        for h in range(HQ):
            hk = h // G
            for i in range(S):
                p = L - S + i
                s = (q[b, i, h].double() @ kk[:, hk].T) * scale
                if softcap > 0: s = softcap * torch.tanh(s / softcap)
                if slopes is not None: s = s - slopes[b if slopes.dim() == 2 else ..., h].double() * (p - js).abs().double() if slopes.dim()==2 else s - slopes[h].double() * (p - js).abs().double()
                ok = torch.ones(L, dtype=torch.bool)
                if leftpad is not None: ok &= js >= int(leftpad[b])
                if causal: ok &= js <= p
                if wl >= 0: ok &= js >= p - wl
                if wr >= 0 and not causal: ok &= js <= p + wr
                s = torch.where(ok, s, torch.tensor(-math.inf, dtype=torch.float64))
                terms = [s]
                if sinks is not None: terms.append(torch.tensor([float(sinks[h])], dtype=torch.float64))
                allv = torch.cat(terms)
                if torch.isinf(allv).all(): continue
                m = allv.max(); l = torch.exp(allv - m).sum(); ls = m + torch.log(l)
                lse[b, h, i] = ls
                if L > 0: out[b, i, h] = torch.exp(s - ls) @ vv[:, hk]
    return out, lse

def run_decode(q, kc, vc, table, seqlens, causal=0, wl=-1, wr=-1, softcap=0.0, slopes=None, sinks=None, splits=1,
               BLOCK_M=16, BLOCK_N=64, write_lse=True, seqlen_new=0, leftpad=None):
    B, S, HQ, D = q.shape; HK = kc.shape[2]; G = HQ // HK; DV = vc.shape[3]
    paged = table is not None
    page_size = kc.shape[1] if paged else 0
    cap = table.shape[1] * page_size if paged else kc.shape[1]
    scale = 1 / math.sqrt(D)
    rows = G * S; row_chunks = -(-rows // BLOCK_M)
    split_keys = -(-(-(-cap // splits)) // BLOCK_N) * BLOCK_N
    nsplit = -(-cap // split_keys)
    out = torch.full((B, S, HQ, DV), float("nan"), dtype=q.dtype); lse = torch.full((B, HQ, S), float("nan"))
    pd = -(-DV // 16) * 16
    op = torch.full((nsplit * B * S * HQ * pd,), float("nan")); lp = torch.full((nsplit * B * HQ * S,), float("nan"))
    dummy32 = torch.zeros(1); dummyi = torch.zeros(1, dtype=torch.int32)
    flags = (1 if write_lse else 0) | (8 if softcap > 0 else 0) | (16 if slopes is not None else 0) | (32 if sinks is not None else 0) | (256 if paged else 0) | (512 if nsplit > 1 else 0) | (65536 if leftpad is not None else 0)
    D8 = -(-D // 8) * 8
    HD = 1 << (max(D, 32) - 1).bit_length(); HDV = 1 << (max(DV, 32) - 1).bit_length()
    grid = (B * HK * row_chunks * nsplit,)
    K.attn_decode[grid](q, kc, vc, out, lse, table if paged else dummyi, seqlens, dummyi,
                        leftpad if leftpad is not None else dummyi, slopes if slopes is not None else dummy32,
                        sinks if sinks is not None else dummy32, op, lp, dummy32, dummy32,
                        *q.stride()[:3], *kc.stride()[:3], *vc.stride()[:3], *out.stride()[:3], 0, 0, 0, 0, 0, 0,
                        lse.stride(0), lse.stride(1), table.stride(0) if paged else 0,
                        (slopes.stride(0) if slopes is not None and slopes.dim() == 2 else 0),
                        B, S, HQ, G, cap, page_size, nsplit, split_keys, row_chunks, D // 8, DV // 8, wl, 0 if causal else wr, flags, seqlen_new,
                        scale * 1.4426950408889634, scale / softcap if softcap > 0 else 0.0, softcap * 1.4426950408889634,
                        HEAD_DIM_QK=HD, HEAD_DIM_V=HDV, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                        PAGE_MODE=(2 if page_size % BLOCK_N == 0 else 1) if paged else 0)
    if nsplit > 1:
        rowsn = B * S * HQ
        o16 = out if out.dtype == torch.float16 else dummy32.half()
        ob16 = out if out.dtype == torch.bfloat16 else dummy32.bfloat16()
        mflags = (1 if write_lse else 0) | (32 if sinks is not None else 0) | (4096 if out.dtype == torch.float16 else 8192)
        K.attn_merge[(-(-rowsn // 16) * -(-DV // 64),)](op, dummy32.half(), dummy32.bfloat16(), lp, dummy32, o16, ob16, lse,
                                         sinks if sinks is not None else dummy32,
                                         B * S * HQ * pd, S * HQ * pd, HQ * pd, pd, B * HQ * S, HQ * S, S, 1,
                                         *out.stride()[:3], lse.stride(0), lse.stride(1), 1,
                                         nsplit, S, HQ, rowsn, DV // 8, mflags, BLOCK_M=16, BLOCK_N=64, BLOCK_P=1)
    return out, lse, scale, nsplit

def check(name, **kw):
    torch.manual_seed(zlib.crc32(name.encode()))
    B, S, HQ, HK, D, DV = kw.pop("shape")
    page_size = kw.pop("page_size", 0); cap = kw.pop("cap"); dt = kw.pop("dtype", torch.float16)
    q = torch.randn(B, S, HQ, D).to(dt)
    if page_size:
        npg = -(-cap // page_size); pages = B * npg + 3
        kc = torch.randn(pages, page_size, HK, D).to(dt); vc = torch.randn(pages, page_size, HK, DV).to(dt)
        perm = torch.randperm(pages)[:B * npg].to(torch.int32)
        table = perm.view(B, npg).contiguous()
    else:
        kc = torch.randn(B, cap, HK, D).to(dt); vc = torch.randn(B, cap, HK, DV).to(dt); table = None
    seqlens = kw.pop("seqlens", None)
    if seqlens is None: seqlens = torch.randint(0, cap + 1, (B,))
    seqlens = torch.tensor(seqlens, dtype=torch.int32) if not torch.is_tensor(seqlens) else seqlens.to(torch.int32)
    if kw.get("leftpad") is not None:
        kw["leftpad"] = torch.tensor(kw["leftpad"], dtype=torch.int32)
    out, lse, scale, nsplit = run_decode(q, kc, vc, table, seqlens, **kw)
    kw2 = {k: v for k, v in kw.items() if k in ("causal", "wl", "wr", "softcap", "slopes", "sinks")}
    ro, rl = ref_decode(q, kc, vc, table, seqlens, kw2.get("causal", 0), kw2.get("wl", -1), kw2.get("wr", -1),
                        kw2.get("softcap", 0.0), kw2.get("slopes"), kw2.get("sinks"), scale, table is not None, page_size,
                        kw.get("leftpad"))
    eo = (out.double() - ro).abs().max().item(); el = (lse.double() - rl).abs()
    el = torch.where(torch.isinf(rl) & torch.isinf(lse.double()) & (rl == lse.double()), 0, el).max().item()
    ok = eo < 2e-2 and el < 1e-3 and not torch.isnan(out).any()
    print(("ok  " if ok else "FAIL"), name, "splits", nsplit, "err out", round(eo, 5), "lse", round(el, 6), "lens", seqlens.tolist())
    return ok

def ref_prefill(qb, kk, vv, L, causal, scale, G):
    # qb [sq, hq, d], kk/vv [L, hk, d]
    sq, hq, d = qb.shape
    out = torch.zeros(sq, hq, vv.shape[-1], dtype=torch.float64); lse = torch.full((hq, sq), -math.inf, dtype=torch.float64)
    js = torch.arange(L)
    for h in range(hq):
        for i in range(sq):
            p = L - sq + i
            s = (qb[i, h].double() @ kk[:, h // G].double().T) * scale
            ok = js <= p if causal else torch.ones(L, dtype=torch.bool)
            s = torch.where(ok, s, torch.tensor(-math.inf, dtype=torch.float64))
            if torch.isinf(s).all(): continue
            m = s.max(); ls = m + torch.log(torch.exp(s - m).sum()); lse[h, i] = ls
            out[i, h] = torch.exp(s - ls) @ vv[:, h // G].double()
    return out, lse

def check_varlen_prefill():
    """Packed queries (cu_seqlens_q): a prefill of 70, 1 and 0 tokens over a paged cache, causal and not."""
    torch.manual_seed(3)
    B, HQ, HK, D, ps, cap = 3, 4, 2, 64, 16, 192
    G = HQ // HK
    lens_k = [150, 33, 10]
    cu = torch.tensor([0, 70, 71, 71], dtype=torch.int32); total = 71; maxq = 70
    q = torch.randn(total, HQ, D).half()
    npg = cap // ps; table = torch.randperm(B * npg)[:B * npg].view(B, npg).int().contiguous()
    kc = torch.randn(B * npg, ps, HK, D).half(); vc = torch.randn(B * npg, ps, HK, D).half()
    seql = torch.tensor(lens_k, dtype=torch.int32)
    out = torch.full((total, HQ, D), float("nan")).half(); lse = torch.full((HQ, total), float("nan"))
    BLOCK_M = 64; chunks = -(-(G * maxq) // BLOCK_M)
    d32 = torch.zeros(1)
    scale = 1 / math.sqrt(D)
    ok = True
    for causal in (1, 0):
        out.fill_(float("nan")); lse.fill_(float("nan"))
        K.attn_decode[(B * HK * chunks,)](q, kc, vc, out, lse, table, seql, cu, seql, d32, d32, d32, d32, d32, d32,
            0, q.stride(0), q.stride(1), *kc.stride()[:3], *vc.stride()[:3], 0, out.stride(0), out.stride(1),
            0, 0, 0, 0, 0, 0, 0, lse.stride(0), table.stride(0), 0,
            B, maxq, HQ, G, cap, ps, 1, -(-cap // 64) * 64, chunks, D // 8, D // 8, -1, 0 if causal else -1,
            1 | 2 | 256, 0, scale * 1.4426950408889634, 0.0, 0.0,
            HEAD_DIM_QK=64, HEAD_DIM_V=64, BLOCK_M=BLOCK_M, BLOCK_N=64, PAGE_MODE=2 if ps % 64 == 0 else 1)
        worst = 0.0
        for b in range(B):
            s0, sq = int(cu[b]), int(cu[b + 1] - cu[b])
            if sq == 0: continue
            L = lens_k[b]; js = torch.arange(L)
            kk = kc[table[b, js // ps].long(), js % ps]; vv = vc[table[b, js // ps].long(), js % ps]
            ro, rl = ref_prefill(q[s0:s0 + sq], kk, vv, L, causal, scale, G)
            worst = max(worst, (out[s0:s0 + sq].double() - ro).abs().max().item())
            lw = (lse[:, s0:s0 + sq].double() - rl).abs(); lw = torch.where(lse[:, s0:s0 + sq].double() == rl, 0, lw)
            worst = max(worst, lw.max().item())
        good = worst < 2e-2 and not out.isnan().any().item()
        ok &= good
        print(("ok  " if good else "FAIL"), "varlen prefill over a paged cache", "causal" if causal else "full",
              "err", round(worst, 6))
    return ok


def check_append(name, paged, dt=torch.float16):
    torch.manual_seed(7)
    B, S, HQ, HK, D, cap, ps = 3, 3, 8, 2, 64, 96, 16
    q = torch.randn(B, S, HQ, D).to(dt); kn = torch.randn(B, S, HK, D).to(dt); vn = torch.randn(B, S, HK, D).to(dt)
    seql = torch.tensor([0, 40, 94], dtype=torch.int32)
    if paged:
        npg = cap // ps; table = torch.randperm(B * npg + 1)[:B * npg].view(B, npg).int().contiguous()
        kc = torch.randn(B * npg + 1, ps, HK, D).to(dt); vc = torch.randn(B * npg + 1, ps, HK, D).to(dt); ts = table.stride(0)
    else:
        table = None; kc = torch.randn(B, cap, HK, D).to(dt); vc = torch.randn(B, cap, HK, D).to(dt); ts = 0
    kexp, vexp = kc.clone(), vc.clone()
    for b in range(B):
        for i in range(S):
            pos = int(seql[b]) + i
            if pos >= cap: continue
            pg, r = (int(table[b, pos // ps]), pos % ps) if paged else (b, pos)
            kexp[pg, r] = kn[b, i]; vexp[pg, r] = vn[b, i]
    K.attn_cache_append[(B * S,)](kn, vn, kc, vc, table if paged else torch.zeros(1, dtype=torch.int32), seql,
                                  *kn.stride()[:3], *vn.stride()[:3], *kc.stride()[:3], *vc.stride()[:3], ts,
                                  S, HK, cap, ps if paged else 0, D // 8, D // 8, 256 if paged else 0,
                                  HEAD_DIM_QK=64, HEAD_DIM_V=64, BLOCK_M=8)
    assert torch.equal(kc, kexp) and torch.equal(vc, vexp), "append wrote wrong rows"
    out, lse, scale, nsplit = run_decode(q, kc, vc, table, seql, causal=1, splits=2, seqlen_new=S)
    lens = torch.clamp(seql + S, max=cap)
    ro, rl = ref_decode(q, kexp, vexp, table, lens, 1, -1, -1, 0.0, None, None, scale, paged, ps if paged else 0)
    eo = (out.double() - ro).abs().max().item()
    ok = eo < 2e-2
    print(("ok  " if ok else "FAIL"), name, "err", eo)
    return ok

res = []
only = sys.argv[1] if len(sys.argv) > 1 else None
_check = check
def check(name, **kw):
    if only and only not in name: return True
    return _check(name, **kw)
res.append(check("contig g4 s1", shape=(2, 1, 8, 2, 64, 64), cap=100))
res.append(check("contig g4 s1 split3", shape=(2, 1, 8, 2, 64, 64), cap=300, splits=3))
res.append(check("paged ps1 causal s3", shape=(2, 3, 4, 1, 64, 64), cap=70, page_size=1, causal=1))
res.append(check("paged ps16 causal s5 split2 fp16", shape=(3, 5, 4, 2, 64, 64), cap=200, page_size=16, causal=1, splits=2, seqlens=[0, 3, 200]))
res.append(check("paged ps3 window", shape=(2, 2, 2, 1, 32, 32), cap=150, page_size=3, wl=20, wr=5))
res.append(check("softcap alibi sinks split4", shape=(2, 2, 8, 2, 64, 64), cap=300, causal=1, softcap=5.0,
                 slopes=torch.rand(8), sinks=torch.randn(8), splits=4))
res.append(check("sinks nosplit len0", shape=(2, 1, 4, 2, 64, 64), cap=64, sinks=torch.randn(4), seqlens=[0, 64]))
res.append(check("mqa 64 rows chunks", shape=(1, 3, 32, 1, 64, 64), cap=130, causal=1, BLOCK_M=64))
res.append(check("dv differs 96/64 paged", shape=(2, 2, 4, 2, 96, 64), cap=90, page_size=16, causal=1, splits=2))
res.append(check("paged ps64 page blocks split2", shape=(2, 2, 4, 2, 64, 64), cap=300, page_size=64, causal=1, splits=2,
                 seqlens=[0, 250]))
res.append(check("paged ps128 page blocks window", shape=(2, 1, 8, 2, 64, 64), cap=400, page_size=128, wl=90, wr=0))
# Left padding (flash-attn's cache_leftpad): rows before it unseen; 0, negative, inside the split, past the
# length; with a window and ALiBi (positions stay the cache's rows).
res.append(check("leftpad contig split3", shape=(4, 2, 8, 2, 64, 64), cap=300, causal=1, splits=3,
                 seqlens=[300, 250, 40, 200], leftpad=[0, 130, 41, -4]))
res.append(check("leftpad paged ps16 window alibi", shape=(3, 3, 4, 2, 64, 64), cap=200, page_size=16, causal=1,
                 wl=50, slopes=torch.rand(4), seqlens=[200, 120, 90], leftpad=[170, 7, 90]))
res.append(check("leftpad paged ps64 sinks", shape=(2, 1, 4, 1, 64, 64), cap=256, page_size=64, sinks=torch.randn(4),
                 seqlens=[256, 100], leftpad=[64, 99]))
res.append(check("over capacity clamp", shape=(2, 1, 2, 1, 32, 32), cap=64, seqlens=[1000, -5]))
if not only or "varlen" in only:
    res.append(check_varlen_prefill())
if not only or "append" in only:
    res.append(check_append("append contiguous", False)); res.append(check_append("append paged", True))
print(sum(res), "of", len(res))
sys.exit(0 if all(res) else 1)

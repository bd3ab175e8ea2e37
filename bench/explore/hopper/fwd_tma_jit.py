"""Exploration (issue 11): which plain-Triton forward schedule is fastest on the H100, through the JIT.

Not part of the build. Runs on the GPU machine (torch + triton there), beside torch SDPA's cuDNN and
flash backends and aotk 0.3's kernel (kernels/attn_fwd.py through the JIT), in one process, on the
standard grid (bf16, 16k tokens, hidden 2048). Every variant is checked against SDPA's output first.

Variants of one small dense forward (no features: causal bottom-right or none, GQA, any lengths):
  ptr    pointer loads (aotk 0.3's kernel, the baseline)
  tma4   host-side TMA descriptors over [batch, seqlen, heads, d] (4-D, any strides), [1, B, 1, d] boxes
  tma2   host-side TMA descriptors over a 2-D view [batch*seqlen, heads*d] (only when the head stride is d)
  tma3   the same over a 3-D view [batch, seqlen, heads*d]: blocks past a sequence's end read zeros
  pipe   tma4 with the next block's QK^T issued before this block's softmax (source-level software
         pipelining, so the async wgmma can overlap the exp2 work)
  ws     tma4 with tl.range(..., warp_specialize=True)
Results: stdout and $OUT/fwd_tma.json.
"""
import json
import math
import os
import sys
import time

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

try:  # the kernels also compile ahead of time on a machine without torch
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "kernels"))


@triton.jit
def _load_kv(desc, b, start, h, off2, BN: tl.constexpr, D: tl.constexpr, RANK: tl.constexpr):
    if RANK == 4:
        return desc.load([b, start, h, 0]).reshape(BN, D)
    elif RANK == 3:
        return desc.load([b, start, h * D]).reshape(BN, D)
    else:
        return desc.load([off2 + start, h * D])


@triton.jit
def _softmax_update(s, acc, m_i, l_i, qk_scale, cols, rows_lim, sk, MASKED: tl.constexpr):
    if MASKED:
        s = tl.where((cols[None, :] <= rows_lim[:, None]) & (cols[None, :] < sk), s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    return p, acc, m_new, l_i


@triton.jit
def fwd_kernel(desc_q, desc_k, desc_v, Out, Lse,
               stride_ob, stride_os, stride_oh, seqlen_q, seqlen_k, heads_q, group_size, num_m_blocks,
               qk_scale,
               D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr, RANK: tl.constexpr,
               PIPE: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    m_block = pid % num_m_blocks
    if CAUSAL:
        m_block = num_m_blocks - 1 - m_block
    b = bh // heads_q
    h = bh % heads_q
    hkv = h // group_size
    start_m = m_block * BM
    dtype = Out.dtype.element_ty
    if RANK == 4:
        q = desc_q.load([b, start_m, h, 0]).reshape(BM, D)
    elif RANK == 3:
        q = desc_q.load([b, start_m, h * D]).reshape(BM, D)
    else:
        q = desc_q.load([b * seqlen_q + start_m, h * D])
    off2 = b * seqlen_k
    rows = start_m + tl.arange(0, BM)
    diag = seqlen_k - seqlen_q
    if CAUSAL:
        hi = tl.minimum(seqlen_k, start_m + BM + diag)
        full_hi = tl.minimum(tl.maximum((start_m + diag + 1) // BN * BN, 0), (seqlen_k // BN) * BN)
    else:
        hi = seqlen_k
        full_hi = (seqlen_k // BN) * BN
    hi = tl.maximum(hi, 0)
    full_hi = tl.minimum(full_hi, hi)
    rows_lim = rows + diag
    if not CAUSAL:
        rows_lim = rows * 0 + seqlen_k
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    offs_n = tl.arange(0, BN)
    if PIPE:
        if full_hi > 0:
            k = _load_kv(desc_k, b, 0, hkv, off2, BN, D, RANK)
            s = tl.dot(q, k.T)
            for start_n in tl.range(BN, full_hi, BN):
                k = _load_kv(desc_k, b, start_n, hkv, off2, BN, D, RANK)
                s_next = tl.dot(q, k.T)
                p, acc, m_i, l_i = _softmax_update(s, acc, m_i, l_i, qk_scale, offs_n, rows_lim, seqlen_k, False)
                v = _load_kv(desc_v, b, start_n - BN, hkv, off2, BN, D, RANK)
                acc = tl.dot(p.to(dtype), v, acc)
                s = s_next
            p, acc, m_i, l_i = _softmax_update(s, acc, m_i, l_i, qk_scale, offs_n, rows_lim, seqlen_k, False)
            v = _load_kv(desc_v, b, full_hi - BN, hkv, off2, BN, D, RANK)
            acc = tl.dot(p.to(dtype), v, acc)
    else:
        for start_n in tl.range(0, full_hi, BN, warp_specialize=WS):
            k = _load_kv(desc_k, b, start_n, hkv, off2, BN, D, RANK)
            s = tl.dot(q, k.T)
            p, acc, m_i, l_i = _softmax_update(s, acc, m_i, l_i, qk_scale, offs_n, rows_lim, seqlen_k, False)
            v = _load_kv(desc_v, b, start_n, hkv, off2, BN, D, RANK)
            acc = tl.dot(p.to(dtype), v, acc)
    for start_n in tl.range(full_hi, hi, BN):
        k = _load_kv(desc_k, b, start_n, hkv, off2, BN, D, RANK)
        s = tl.dot(q, k.T)
        p, acc, m_i, l_i = _softmax_update(s, acc, m_i, l_i, qk_scale, start_n + offs_n, rows_lim, seqlen_k, True)
        v = _load_kv(desc_v, b, start_n, hkv, off2, BN, D, RANK)
        acc = tl.dot(p.to(dtype), v, acc)
    has = l_i > 0.0
    l_safe = tl.where(has, l_i, 1.0)
    out = acc / l_safe[:, None]
    offs_d = tl.arange(0, D)
    o_ptrs = Out + b.to(tl.int64) * stride_ob + h * stride_oh + rows[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(dtype), mask=rows[:, None] < seqlen_q)
    lse = tl.where(has, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, float("-inf"))
    tl.store(Lse + bh.to(tl.int64) * seqlen_q + rows, lse, mask=rows < seqlen_q)


def run_tma(q, k, v, out, lse, causal, cfg, variant):
    bm, bn, w, s = cfg
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    rank = {"tma2": 2, "tma3": 3}.get(variant, 4)
    if rank == 3:
        # [batch, seqlen, heads * d]: the batch stays a dimension, so a block past seqlen reads zeros
        # rather than the next batch entry's rows.
        dq = TensorDescriptor(q, [b, sq, hq * d], [q.stride(0), q.stride(1), 1], [1, bm, d])
        dk = TensorDescriptor(k, [b, sk, hkv * d], [k.stride(0), k.stride(1), 1], [1, bn, d])
        dv = TensorDescriptor(v, [b, sk, hkv * d], [v.stride(0), v.stride(1), 1], [1, bn, d])
    elif rank == 4:
        dq = TensorDescriptor(q, list(q.shape), list(q.stride()), [1, bm, 1, d])
        dk = TensorDescriptor(k, list(k.shape), list(k.stride()), [1, bn, 1, d])
        dv = TensorDescriptor(v, list(v.shape), list(v.stride()), [1, bn, 1, d])
    else:
        dq = TensorDescriptor(q, [b * sq, hq * d], [q.stride(1), 1], [bm, d])
        dk = TensorDescriptor(k, [b * sk, hkv * d], [k.stride(1), 1], [bn, d])
        dv = TensorDescriptor(v, [b * sk, hkv * d], [v.stride(1), 1], [bn, d])
    nmb = triton.cdiv(sq, bm)
    fwd_kernel[(nmb * b * hq,)](dq, dk, dv, out, lse, out.stride(0), out.stride(1), out.stride(2),
                                sq, sk, hq, hq // hkv, nmb, 1.0 / math.sqrt(d) * 1.4426950408889634,
                                D=d, BM=bm, BN=bn, CAUSAL=causal, RANK=rank, PIPE=(variant == "pipe"),
                                WS=(variant == "ws"), num_warps=w, num_stages=s)


def run_ptr(q, k, v, out, lse, causal, cfg):
    # aotk 0.3's kernel through the JIT, with the arguments src/attn/aotk_attn.c passes for a dense problem.
    from attn_fwd import attn_fwd
    bm, bn, w, s = cfg
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    nmb = triton.cdiv(sq, bm)
    flags = 1 | (128 if causal else 0)
    wl, wr = -1, (0 if causal else -1)
    attn_fwd[(nmb * b * hq,)](q, k, v, out, lse, None, None, None, None, None,
                              q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                              v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
                              lse.stride(0), lse.stride(1), 0, sq, sk, hq, hq // hkv, nmb, d // 8, d // 8, wl, wr,
                              flags, 1.0 / math.sqrt(d) * 1.4426950408889634, 0.0, 0.0, 0, 1.0,
                              HEAD_DIM_QK=d, HEAD_DIM_V=d, BLOCK_M=bm, BLOCK_N=bn, EXTRAS=False,
                              num_warps=w, num_stages=s)


def tflops(b, h, sq, sk, d, causal, ms):
    f = 4.0 * b * h * sq * sk * d
    if causal:
        f /= 2
    return f / ms / 1e9


CONFIGS = {
    64: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 4, 3)],
    128: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 2)],
    256: [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 128, 4, 2)],
}
PTR_CONFIG = {64: (128, 64, 8, 3), 128: (128, 128, 8, 3), 256: (64, 64, 4, 2)}


def check_problem(variant, cfg, causal, d, sq, sk, hq, hkv, b):
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = torch.full_like(q, float("nan"))
    lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
    run_tma(q, k, v, out, lse, causal, cfg, variant)
    g = hq // hkv
    qf, kf, vf = q.float().transpose(1, 2), k.float().repeat_interleave(g, 2).transpose(1, 2), \
        v.float().repeat_interleave(g, 2).transpose(1, 2)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(d)
    if causal:
        i = torch.arange(sq, device="cuda")[:, None]
        j = torch.arange(sk, device="cuda")[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    ref = torch.softmax(s, -1).nan_to_num(0.0) @ vf
    err = (out.float().transpose(1, 2) - ref).abs().max().item()
    ok_rows = torch.isfinite(ref_lse)
    lerr = (lse[ok_rows] - ref_lse[ok_rows]).abs().max().item() if ok_rows.any() else 0.0
    return err, lerr


def main():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--seqlens", default="2048,8192")
    parser.add_argument("--variants", default="ptr,tma4,tma2,pipe,ws")
    parser.add_argument("--budget-s", type=float, default=400)
    args = parser.parse_args()
    t0 = time.time()
    variants = args.variants.split(",")
    out_dir = os.environ.get("OUT", "/tmp")
    rows = []
    torch.manual_seed(0)
    # Correctness first, on odd shapes (GQA, lengths not multiples of the blocks, seqlen_q != seqlen_k).
    for d in (int(x) for x in args.head_dims.split(",")):
        for variant in [x for x in variants if x != "ptr"]:
            cfg = CONFIGS[d][0]
            for causal in (False, True):
                for (sq, sk) in ((1000, 1000), (300, 4097), (1, 129)):
                    try:
                        err, lerr = check_problem(variant, cfg, causal, d, sq, sk, 8, 2, 2)
                        tag = "ok" if err < 2e-2 and lerr < 1e-3 else "FAIL"
                    except Exception as e:  # noqa: BLE001
                        err, lerr, tag = -1, -1, f"error {type(e).__name__}: {str(e)[:200]}"
                    print(f"check d={d} {variant} causal={int(causal)} {sq}x{sk}: {tag} err {err:.3g} lse {lerr:.3g}",
                          flush=True)
    for d in (int(x) for x in args.head_dims.split(",")):
        for causal in (False, True):
            for n in (int(x) for x in args.seqlens.split(",")):
                if time.time() - t0 > args.budget_s:
                    print("budget reached", flush=True)
                    break
                b, h = 16384 // n, 2048 // d
                q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn_like(q)
                v = torch.randn_like(q)
                out = torch.empty_like(q)
                lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                res = {}
                ref = None
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        with sdpa_kernel(be):
                            fn = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: E731
                            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                            res[name] = round(tflops(b, h, n, n, d, causal, ms), 1)
                            if ref is None:
                                ref = fn().transpose(1, 2).float()
                    except Exception as e:  # noqa: BLE001
                        res[name] = f"error {type(e).__name__}"
                for variant in variants:
                    cfgs = [PTR_CONFIG[d]] if variant == "ptr" else CONFIGS[d]
                    for cfg in cfgs:
                        key = f"{variant} {cfg}"
                        try:
                            if variant == "ptr":
                                fn = lambda: run_ptr(q, k, v, out, lse, causal, cfg)  # noqa: E731
                            else:
                                fn = lambda: run_tma(q, k, v, out, lse, causal, cfg, variant)  # noqa: E731
                            out.fill_(float("nan"))
                            fn()
                            torch.cuda.synchronize()
                            err = (out.float() - ref).abs().max().item()
                            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                            res[key] = (round(tflops(b, h, n, n, d, causal, ms), 1), round(err, 4))
                        except Exception as e:  # noqa: BLE001
                            res[key] = f"error {type(e).__name__}: {str(e)[:120]}"
                rows.append({"d": d, "causal": causal, "n": n, **res})
                best = {}
                for key, val in res.items():
                    if isinstance(val, tuple):
                        var = key.split(" ")[0]
                        if var not in best or val[0] > best[var][0]:
                            best[var] = (val[0], key)
                print(f"d={d} causal={int(causal)} n={n}: flash {res['flash']} cudnn {res['cudnn']} | "
                      + " | ".join(f"{var} {v[0]} ({v[1].split(' ', 1)[1]})" for var, v in best.items()), flush=True)
                for key, val in res.items():
                    if not isinstance(val, tuple) and key not in ("flash", "cudnn"):
                        print("   ", key, val, flush=True)
                with open(os.path.join(out_dir, "fwd_tma.json"), "w") as f:
                    json.dump(rows, f, indent=1)
                del q, k, v, out, lse


if __name__ == "__main__":
    main()

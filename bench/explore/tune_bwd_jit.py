"""Config sweep and correctness check for kernels/attn_bwd.py through Triton's JIT, on the GPU machine.

For each row of the benchmark grid: checks dq, dk, dv (GQA included) against autograd through SDPA's
math backend in fp32, then times the dK/dV and dQ kernels over candidate configs beside the flash and
cuDNN backends' backward, in one process. Chooses the catalog's backward configs. Not part of the build.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "kernels"))
from attn_bwd import attn_bwd_dkdv, attn_bwd_dq, attn_bwd_preprocess  # noqa: E402

DKDV_CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 8, 2), (64, 64, 4, 2), (32, 64, 4, 2), (64, 128, 4, 2)]
DQ_CONFIGS = [(128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 2), (128, 32, 8, 2), (64, 128, 8, 2), (128, 64, 4, 2)]


def run_bwd(q, k, v, o, do, lse, dq, dk, dv, delta, causal, dkdv_cfg, dq_cfg, only=None):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d)
    log2_scale = scale * 1.4426950408889634
    if only in (None, "pre"):
        nmb = triton.cdiv(sq, 64)
        attn_bwd_preprocess[(nmb * b * hq,)](o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0),
                                              do.stride(1), do.stride(2), sq, hq, nmb, HEAD_DIM=d, BLOCK_M=64,
                                              num_warps=4, num_stages=1)
    if only in (None, "dkdv"):
        bm, bn, w, s = dkdv_cfg
        nnb = triton.cdiv(sk, bn)
        attn_bwd_dkdv[(nnb * b * hkv,)](q, k, v, do, lse, delta, dk, dv,
                                         *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
                                         *dk.stride()[:3], *dv.stride()[:3], lse.stride(0), lse.stride(1),
                                         sq, sk, hq, hkv, hq // hkv, nnb, scale, log2_scale, int(causal),
                                         HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
    if only in (None, "dq"):
        bm, bn, w, s = dq_cfg
        nmb = triton.cdiv(sq, bm)
        attn_bwd_dq[(nmb * b * hq,)](q, k, v, do, lse, delta, dq,
                                      *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
                                      *dq.stride()[:3], lse.stride(0), lse.stride(1),
                                      sq, sk, hq, hq // hkv, nmb, scale, log2_scale, int(causal),
                                      HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)


def reference(q, k, v, do, causal):
    """fp32 autograd of the math, bottom-right causal mask, GQA by repeating k/v. A row that sees no
    key is computed as if it saw every key and then multiplied by 0: out 0, no gradient, no NaN."""
    hq, hkv, d = q.shape[2], k.shape[2], q.shape[3]
    qf, kf, vf = (x.detach().float().transpose(1, 2).requires_grad_() for x in (q, k, v))
    kr = kf.repeat_interleave(hq // hkv, dim=1)
    vr = vf.repeat_interleave(hq // hkv, dim=1)
    sq, sk = q.shape[1], k.shape[1]
    scores = (qf @ kr.transpose(-1, -2)) / math.sqrt(d)
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible.tril(diagonal=sk - sq)
    has_keys = visible.any(dim=-1)
    lse = torch.logsumexp(scores.detach().masked_fill(~visible, float("-inf")), dim=-1)
    p = torch.softmax(scores.masked_fill(~(visible | ~has_keys[:, None]), float("-inf")), dim=-1)
    o = (p @ vr) * has_keys[:, None].float()
    dq, dk, dv = torch.autograd.grad(o, (qf, kf, vf), do.float().transpose(1, 2))
    return o.transpose(1, 2), lse, dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def check(d, causal, sq, sk, b, hq, hkv):
    torch.manual_seed(1)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    do = torch.randn_like(q)
    o_ref, lse_ref, dq_ref, dk_ref, dv_ref = reference(q, k, v, do, causal)
    o = o_ref.to(torch.bfloat16).contiguous()
    lse = lse_ref.contiguous()
    dq, dk, dv = (torch.full_like(x, float("nan")) for x in (q, k, v))
    delta = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
    run_bwd(q, k, v, o, do, lse, dq, dk, dv, delta, causal, DKDV_CONFIGS[0], DQ_CONFIGS[0])
    torch.cuda.synchronize()
    errs = [((x.float() - r).norm() / r.norm()).item() for x, r in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref))]
    nan = any(torch.isnan(x).any().item() for x in (dq, dk, dv))
    print(f"check d={d} causal={int(causal)} sq={sq} sk={sk} b={b} hq={hq} hkv={hkv}: rel err dq {errs[0]:.2e} "
          f"dk {errs[1]:.2e} dv {errs[2]:.2e}{' NaN!' if nan else ''}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlens", default="1024,2048,4096,16384")
    parser.add_argument("--head-dims", default="64,128")
    args = parser.parse_args()
    for d in (64, 128):
        for causal in (False, True):
            check(d, causal, 200, 333, 2, 8, 2)
            check(d, causal, 333, 200, 1, 4, 4)
            check(d, causal, 128, 128, 2, 4, 1)
    for d in (int(x) for x in args.head_dims.split(",")):
        for causal in (False, True):
            for n in (int(x) for x in args.seqlens.split(",")):
                b, h = 16384 // n, 2048 // d
                q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn_like(q, requires_grad=True)
                v = torch.randn_like(q, requires_grad=True)
                do = torch.randn_like(q)
                flops = 2.5 * 4.0 * b * h * n * n * d / (2 if causal else 1)
                res = {}
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    with sdpa_kernel(be):
                        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=causal)
                        g = do.transpose(1, 2)
                        ms = triton.testing.do_bench(
                            lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), warmup=10, rep=100,
                            return_mode="median")
                        res[name] = flops / ms / 1e9
                with torch.no_grad():
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        o, lse = torch.ops.aten._scaled_dot_product_flash_attention(
                            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)[:2]
                    o = o.transpose(1, 2).contiguous()
                    lse = lse.contiguous()
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    delta = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                    pre_ms = triton.testing.do_bench(lambda: run_bwd(q, k, v, o, do, lse, dq, dk, dv, delta, causal,
                                                                     None, None, "pre"), warmup=10, rep=50,
                                                     return_mode="median")
                    dkdv = {}
                    for cfg in DKDV_CONFIGS:
                        try:
                            dkdv[cfg] = triton.testing.do_bench(lambda: run_bwd(
                                q, k, v, o, do, lse, dq, dk, dv, delta, causal, cfg, None, "dkdv"),
                                warmup=10, rep=50, return_mode="median")
                        except Exception as e:  # noqa: BLE001
                            dkdv[cfg] = float("inf")
                            print("  dkdv", cfg, type(e).__name__, str(e)[:80])
                    dqt = {}
                    for cfg in DQ_CONFIGS:
                        try:
                            dqt[cfg] = triton.testing.do_bench(lambda: run_bwd(
                                q, k, v, o, do, lse, dq, dk, dv, delta, causal, None, cfg, "dq"),
                                warmup=10, rep=50, return_mode="median")
                        except Exception as e:  # noqa: BLE001
                            dqt[cfg] = float("inf")
                            print("  dq", cfg, type(e).__name__, str(e)[:80])
                best_dkdv = min(dkdv, key=dkdv.get)
                best_dq = min(dqt, key=dqt.get)
                total = pre_ms + dkdv[best_dkdv] + dqt[best_dq]
                tf = flops / total / 1e9
                print(f"d={d} causal={int(causal)} n={n}: flash {res['flash']:.0f} cudnn {res['cudnn']:.0f} | "
                      f"aotk-jit {tf:.0f} ({tf / res['flash']:.2f}x flash, {tf / res['cudnn']:.2f}x cudnn) "
                      f"pre {pre_ms:.3f} ms, dkdv {best_dkdv} {dkdv[best_dkdv]:.3f} ms, dq {best_dq} {dqt[best_dq]:.3f} ms",
                      flush=True)
                print("    dkdv:", {str(c): round(t, 3) for c, t in dkdv.items()}, flush=True)
                print("    dq:  ", {str(c): round(t, 3) for c, t in dqt.items()}, flush=True)


if __name__ == "__main__":
    main()

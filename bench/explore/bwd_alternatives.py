"""The backward's design alternatives, timed side by side through Triton's JIT on the GPU machine.

  split  (what aotk ships)  pre-pass, then dK/dV with one owner per key block, then dQ with one owner
                            per query block: deterministic, 7 matrix products per block pair.
  fused  (FlashAttention-2's approach)  pre-pass, then one pass per key block that also adds each
                            block's dQ contribution into an fp32 buffer with atomics, then a cast to
                            the dtype: 5 matrix products, but atomic traffic, a zeroed buffer, and
                            results that depend on the order the atomics land (not deterministic).

Both are checked against each other and timed in one process beside SDPA flash's backward. Not part of
the build: it answers "what would the non-deterministic alternative cost or gain".
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels"))
from attn_bwd import attn_bwd_dkdv, attn_bwd_dq, attn_bwd_preprocess  # noqa: E402


@triton.jit
def attn_bwd_fused_atomic_dq(Q, K, V, DOut, LseLog2, Delta, DK, DV, DQAcc,
                             stride_qs, stride_qh, stride_ks, stride_kh, stride_dqs, stride_dqh,
                             seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride,
                             softmax_scale, qk_scale_log2,
                             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Non-causal only, packed [b, s, h, d] inputs with equal strides for q/do and k/v/dk/dv: enough to
    # compare the designs' costs on the benchmark grid.
    pid = tl.program_id(0)
    bh = pid // num_n_blocks
    n_block = pid % num_n_blocks
    batch = (bh // heads_kv).to(tl.int64)
    head_kv = bh % heads_kv
    offs_n = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_off = batch * seqlen_k * stride_ks + head_kv * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :]
    k = tl.load(K + kv_off)
    v = tl.load(V + kv_off)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for g in range(0, group_size):
        head_q = head_kv * group_size + g
        q_base = Q + batch * seqlen_q * stride_qs + head_q * stride_qh
        do_base = DOut + batch * seqlen_q * stride_qs + head_q * stride_qh
        dq_base = DQAcc + batch * seqlen_q * stride_dqs + head_q * stride_dqh
        stats = (batch * heads_q + head_q) * stats_stride
        for start_m in range(0, seqlen_q, BLOCK_M):
            rows = start_m + offs_m
            q = tl.load(q_base + rows[:, None] * stride_qs + offs_d[None, :])
            do = tl.load(do_base + rows[:, None] * stride_qs + offs_d[None, :])
            lse = tl.load(LseLog2 + stats + rows)
            delta = tl.load(Delta + stats + rows)
            p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale_log2 - lse[None, :])
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])
            dk = tl.dot(ds_t.to(q.dtype), q, dk)
            dq_part = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * softmax_scale
            tl.atomic_add(dq_base + rows[:, None] * stride_dqs + offs_d[None, :], dq_part, sem="relaxed")
    tl.store(DK + kv_off, (dk * softmax_scale).to(DK.dtype.element_ty))
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty))


def main():
    torch.manual_seed(0)
    for d, n in ((128, 2048), (128, 4096), (128, 16384), (64, 4096), (64, 16384)):
        b, h = 16384 // n, 2048 // d
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn_like(q, requires_grad=True)
        v = torch.randn_like(q, requires_grad=True)
        do = torch.randn_like(q)
        flops = 2.5 * 4.0 * b * h * n * n * d
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            g = do.transpose(1, 2)
            ref = torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
            flash = flops / triton.testing.do_bench(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True),
                                                    warmup=10, rep=100, return_mode="median") / 1e9
            o2, lse = torch.ops.aten._scaled_dot_product_flash_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))[:2]
        with torch.no_grad():
            o2 = o2.transpose(1, 2).contiguous()
            stats_stride = (n + 127) // 128 * 128
            ws = torch.empty(2, b * h, stats_stride, device="cuda", dtype=torch.float32)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            dqacc = torch.empty(b, n, h, d, device="cuda", dtype=torch.float32)
            scale = 1.0 / math.sqrt(d)
            sl2 = scale * 1.4426950408889634
            dkdv_cfg = (64, 128, 8, 3) if d == 128 else (32, 64, 4, 2)

            def pre():
                nmb = stats_stride // 64
                attn_bwd_preprocess[(nmb * b * h,)](o2, do, lse, ws[0], ws[1], *o2.stride()[:3], *do.stride()[:3],
                                                    lse.stride(0), lse.stride(1), n, h, nmb, stats_stride,
                                                    HEAD_DIM=d, BLOCK_M=64, num_warps=4, num_stages=1)

            def split():
                pre()
                bm, bn, w, s = dkdv_cfg
                nnb = n // bn
                attn_bwd_dkdv[(nnb * b * h,)](q, k, v, do, ws[1], ws[0], dk, dv, *q.stride()[:3], *k.stride()[:3],
                                              *v.stride()[:3], *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3],
                                              n, n, h, h, 1, nnb, stats_stride, scale, sl2, 0,
                                              HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
                nmb = n // 128
                attn_bwd_dq[(nmb * b * h,)](q, k, v, do, ws[1], ws[0], dq, *q.stride()[:3], *k.stride()[:3],
                                            *v.stride()[:3], *do.stride()[:3], *dq.stride()[:3], n, n, h, 1, nmb,
                                            stats_stride, scale, sl2, 0,
                                            HEAD_DIM=d, BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)

            def fused(cfg):
                bm, bn, w, s = cfg
                dqacc.zero_()
                pre()
                nnb = n // bn
                attn_bwd_fused_atomic_dq[(nnb * b * h,)](q, k, v, do, ws[1], ws[0], dk, dv, dqacc,
                                                         q.stride(1), q.stride(2), k.stride(1), k.stride(2),
                                                         dqacc.stride(1), dqacc.stride(2), n, n, h, h, 1, nnb,
                                                         stats_stride, scale, sl2,
                                                         HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w,
                                                         num_stages=s)
                dq.copy_(dqacc)

            line = [f"d={d} n={n} (non-causal): flash {flash:.0f}"]
            split()
            torch.cuda.synchronize()
            errs = [((x.float() - r.float()).norm() / r.float().norm()).item() for x, r in zip((dq, dk, dv), ref)]
            t_split = flops / triton.testing.do_bench(split, warmup=10, rep=100, return_mode="median") / 1e9
            line.append(f"split {t_split:.0f} ({t_split / flash:.2f}x, rel err {max(errs):.1e})")
            for cfg in ((64, 128, 8, 2), (64, 128, 8, 3), (32, 64, 4, 2), (64, 64, 4, 2)):
                try:
                    fused(cfg)
                    torch.cuda.synchronize()
                    errs = [((x.float() - r.float()).norm() / r.float().norm()).item()
                            for x, r in zip((dq, dk, dv), ref)]
                    t = flops / triton.testing.do_bench(lambda: fused(cfg), warmup=10, rep=100,
                                                        return_mode="median") / 1e9
                    line.append(f"fused{cfg} {t:.0f} ({t / flash:.2f}x, rel err {max(errs):.1e})")
                except Exception as e:  # noqa: BLE001
                    line.append(f"fused{cfg} {type(e).__name__}")
            print(" | ".join(line), flush=True)
            del ws, dq, dk, dv, dqacc
        del q, k, v, do, o, o2, lse, ref


if __name__ == "__main__":
    main()

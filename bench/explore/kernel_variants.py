"""Structural variants of kernels/attn_fwd.py timed side by side through the JIT (one process).

Each variant is the kernel source with one textual change; the script writes each to a temporary module,
times it on a few benchmark rows with the config aotk's tuning table picks, and prints TFLOP/s beside
FlashAttention-2 (torch SDPA flash). A development tool for deciding kernel structure.
"""
import importlib.util
import math
import os
import re
import sys
import tempfile

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = open(os.path.join(HERE, "..", "..", "kernels", "attn_fwd.py")).read()

VARIANTS = {
    "current": [],
    # K and V addressed by advancing a pointer tensor instead of recomputing cols * stride each step.
    "pointer-advance": [
        ("""    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_ks + offs_d[None, :]
        v_ptrs = v_base + cols[:, None] * stride_vs + offs_d[None, :]""",
         """    k_ptrs = k_base + (lo + offs_n)[:, None] * stride_ks + offs_d[None, :]
    v_ptrs = v_base + (lo + offs_n)[:, None] * stride_vs + offs_d[None, :]
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n"""),
        ("""        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new""", """        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_ks
        v_ptrs += BLOCK_N * stride_vs"""),
    ],
    # K loaded already transposed ([HEAD_DIM, BLOCK_N]) instead of tl.trans of a [BLOCK_N, HEAD_DIM] tile.
    "k-transposed-load": [
        ("k_ptrs = k_base + cols[:, None] * stride_ks + offs_d[None, :]",
         "k_ptrs = k_base + cols[None, :] * stride_ks + offs_d[:, None]"),
        ("k = tl.load(k_ptrs, mask=col_ok[:, None], other=0.0)", "k = tl.load(k_ptrs, mask=col_ok[None, :], other=0.0)"),
        ("qk = tl.dot(q, tl.trans(k))", "qk = tl.dot(q, k)"),
    ],
    # The softmax scale folded into q once (in fp32, then rounded back to the input dtype).
    "prescaled-q": [
        ("    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)\n",
         "    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)\n    q = (q.to(tl.float32) * qk_scale_log2).to(q.dtype)\n    qk_scale_log2 = 1.0\n"),
    ],
}

CONFIGS = {(128, 1024): (64, 64, 4, 3), (128, 2048): (128, 128, 8, 3), (64, 1024): (64, 64, 4, 3),
           (128, 4096): (128, 128, 8, 3), (64, 4096): (128, 64, 8, 3)}
ROWS = [(128, False, 1024), (128, False, 2048), (128, True, 1024), (64, True, 1024), (128, True, 4096), (64, False, 4096)]


def load_variant(name, edits):
    text = SOURCE
    for old, new in edits:
        if old not in text:
            raise SystemExit(f"variant {name}: edit target not found: {old[:60]!r}")
        text = text.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(), f"attn_fwd_{re.sub('[^a-z0-9]', '_', name)}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.attn_fwd


def main():
    kernels = {name: load_variant(name, edits) for name, edits in VARIANTS.items()}
    for d, causal, n in ROWS:
        b, h = 16384 // n, 2048 // d
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        bm, bn, w, s = CONFIGS[(d, n)]
        nmb = triton.cdiv(n, bm)
        flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2).float()
            flash = flops / triton.testing.do_bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                                                    warmup=25, rep=200, return_mode="median") / 1e9
        line = [f"d={d} causal={int(causal)} n={n} flash {flash:.0f}"]
        for name, kern in kernels.items():
            args = (q, k, v, out, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                    v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2), lse.stride(0),
                    lse.stride(1), n, n, h, 1, nmb, 1.0 / math.sqrt(d) * 1.4426950408889634, int(causal), 1)
            fn = lambda: kern[(nmb * b * h,)](*args, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
            out.fill_(float("nan"))
            fn()
            err = (out.float() - ref).abs().max().item()
            tf = flops / triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e9
            line.append(f"{name} {tf:.0f} ({tf / flash:.2f}x, err {err:.3g})")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()

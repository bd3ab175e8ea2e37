"""The paged prefill with softcap and ALiBi (the sm_90 forward's EXTRAS rows through the block table) against
the varlen forward on the same keys stored contiguously, through the Python package, in one process: bf16
d128, 4 requests, GQA 32/8, causal, 16- and 256-key pages in shuffled order. A spot measurement beside
bench_decode.py --prefill (which times the plain rows); prints only.

    python3 bench/explore/paged_prefill_extras.py --package-dir DIR    (DIR/aotk holds libaotk.so)
"""
import argparse
import os
import sys

import torch
import triton

ap = argparse.ArgumentParser()
ap.add_argument("--package-dir", required=True)
sys.path.insert(0, ap.parse_args().package_dir)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import aotk  # noqa: E402
from bench_decode import shuffled_pages  # noqa: E402

b, hq, hkv, d = 4, 32, 8, 128
for feature in ("plain", "softcap", "alibi"):
    for chunk, L in ((1024, 4096), (1024, 16384), (4096, 16384)):
        torch.manual_seed(0)
        q = torch.randn(b * chunk, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b * L, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        cu_q = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * chunk
        cu_k = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * L
        kw = dict(causal=True)
        if feature == "softcap":
            kw["softcap"] = 30.0
        if feature == "alibi":
            kw["alibi_slopes"] = torch.rand(hq, device="cuda", dtype=torch.float32) * 0.1
        res = {"varlen": lambda: aotk.flash_attn_varlen_func(q, k, v, cu_q, cu_k, chunk, L, **kw)}
        for ps in (16, 256):
            kp, vp, table = shuffled_pages(torch, k, v, b, L, ps)
            res[f"paged{ps}"] = (lambda kp=kp, vp=vp, table=table: aotk.flash_attn_varlen_func(
                q, kp, vp, cu_q, cu_k, chunk, L, block_table=table, **kw))
        ref = res["varlen"]().float()
        line = f"{feature:8s} chunk {chunk} L {L}:"
        t0 = None
        for name, fn in res.items():
            err = (fn().float() - ref).abs().max().item()
            t = triton.testing.do_bench(fn, warmup=30, rep=150)
            t0 = t0 or t
            line += f"  {name} {t * 1e3:.0f} us ({t0 / t:.2f}x, err {err:.1e})"
        print(line, flush=True)

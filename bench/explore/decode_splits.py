"""Decoding through the library over a range of forced split counts (`num_splits`), contiguous and over
shuffled 256-key pages, one process, CUDA-graph replay (median). 0 is the library's own choice; each
count's output is checked against the first count's.

    python3 bench/explore/decode_splits.py PACKAGE_DIR [--rows b:L:hq/hkv:page:n1/n2/...,...]

PACKAGE_DIR holds an `aotk` package (build/python). Decided that MQA's 32-row tile keeps its split where
the 16-row tile in two row chunks would fill the GPU unsplit (H200: batch 64 at 4k keys 43.7 against
53.2 us). Exploration only: bench/bench_decode.py is the benchmark whose results are committed.
"""
import argparse
import sys

import torch
import triton

DEFAULT_ROWS = ",".join(
    [f"{b}:{L}:32/1:{pg}:0/1/2/4" for (b, L) in ((64, 4096), (32, 4096), (128, 4096), (64, 2048), (64, 8192),
                                                 (128, 2048), (256, 1024), (32, 8192)) for pg in (0, 256)]
    + ["8:8192:32/1:0:0/8/16/24/32", "16:32768:32/1:0:0/2/4/8"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("package_dir")
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    args = ap.parse_args()
    sys.path.insert(0, args.package_dir)
    import aotk
    dev = "cuda"
    for text in args.rows.split(","):
        b, L, heads, page, counts = text.split(":")
        b, L, page = int(b), int(L), int(page)
        hq, hkv = (int(x) for x in heads.split("/"))
        torch.manual_seed(0)
        q = torch.randn(b, 1, hq, 128, device=dev, dtype=torch.bfloat16)
        if page:
            n = b * L // page
            kc = torch.randn(n, page, hkv, 128, device=dev, dtype=torch.bfloat16)
            table = torch.randperm(n, device=dev, dtype=torch.int32).view(b, L // page)
        else:
            kc = torch.randn(b, L, hkv, 128, device=dev, dtype=torch.bfloat16)
            table = None
        vc = torch.randn_like(kc)
        lengths = torch.full((b,), L, device=dev, dtype=torch.int32)
        moved = 2 * b * L * hkv * 128 * 2
        line, ref = [], None
        for ns in (int(c) for c in counts.split("/")):
            def fn(ns=ns):
                return aotk.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lengths, block_table=table, causal=True,
                                                    num_splits=ns)
            out = fn().float()
            ref = out if ref is None else ref
            err = (out - ref).abs().max().item()
            t = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
            line.append(f"{ns}:{t * 1e3:.1f}us/{moved / (t * 1e-3) / 1e9:.0f}GB/s" + ("" if err < 1e-2 else f" ERR {err:.1e}"))
        print(f"b{b} L{L} {hq}/{hkv} page{page}: " + "  ".join(line), flush=True)
        del q, kc, vc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

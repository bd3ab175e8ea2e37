"""Decoding through two or more aotk packages, one process each, alternating: the same rows timed by
CUDA-graph replay (triton.testing.do_bench_cudagraph, median) of torch.ops.aotk.decode, contiguous and
over shuffled 16-key pages, with SDPA cuDNN's time beside them in every process. The torch op registers
under one name, so two libraries cannot share a process; each round runs every package in turn.

    python bench/explore/ab_decode.py --packages DIR_A,DIR_B [--rounds 2] [--rows b:L:hq/hkv[:sq],...]

Each DIR holds an `aotk` package (build/python, with its libaotk.so). Exploration only: bench/bench_decode.py
is the benchmark whose results are committed.
"""
import argparse
import json
import os
import subprocess
import sys

DEFAULT_ROWS = "1:1024:32/8,1:2048:32/8,2:2048:32/8,4:1024:32/8,8:1024:32/8,1:4096:32/8,4:4096:32/8,1:8192:32/8"


def child(rows, page_sizes):
    import math
    import torch
    import triton.testing
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import aotk  # noqa: F401  (registers torch.ops.aotk.*)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from bench_decode import bottom_right_mask, shuffled_pages

    dev = "cuda"
    out = []
    for text in rows.split(","):
        parts = text.split(":")
        batch, seqlen_k = int(parts[0]), int(parts[1])
        hq, _, hkv = parts[2].partition("/")
        heads_q, heads_kv = int(hq), int(hkv or hq)
        seqlen_q = int(parts[3]) if len(parts) > 3 else 1
        torch.manual_seed(0)
        d = 128
        q = torch.randn(batch, seqlen_q, heads_q, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, seqlen_k, heads_kv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, seqlen_k, heads_kv, d, device=dev, dtype=torch.bfloat16)
        lens = torch.full((batch,), seqlen_k, dtype=torch.int32, device=dev)
        scale = 1.0 / math.sqrt(d)
        causal = seqlen_q > 1
        impls = {"aotk": lambda: torch.ops.aotk.decode(q, k, v, lens, None, None, None, scale, causal, -1, -1, 0.0, 0)[0]}
        for page_size in page_sizes:
            c = shuffled_pages(torch, k, v, batch, seqlen_k, page_size)
            impls[f"paged{page_size}"] = (lambda c=c: torch.ops.aotk.decode(
                q, c[0], c[1], lens, c[2], None, None, scale, causal, -1, -1, 0.0, 0)[0])
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        mask = bottom_right_mask(torch, seqlen_q, seqlen_k, dev) if causal else None

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale,
                                                      enable_gqa=True).transpose(1, 2)
        reference = cudnn().float()
        row = {"row": text}
        for name, fn in list(impls.items()) + [("cudnn", cudnn)]:
            o = fn()
            err = (o.float() - reference).abs().max().item()
            if not err < 2e-2:
                row[name] = f"error {err}"
                continue
            fn()
            row[name] = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3
        out.append(row)
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", help="comma-separated package directories (required)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    ap.add_argument("--pages", default="16")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    pages = [int(p) for p in args.pages.split(",") if p]
    if args.child:
        child(args.rows, pages)
        return
    if not args.packages:
        ap.error("--packages is required")
    packages = args.packages.split(",")
    results = {p: [] for p in packages}
    for _ in range(args.rounds):
        for p in packages:
            env = dict(os.environ, PYTHONPATH=p + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       AOTK_LIBRARY=os.path.join(p, "aotk", "libaotk.so"))
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--rows", args.rows,
                                   "--pages", args.pages], env=env, capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode != 0 or not line:
                print(f"{p}: failed\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
                continue
            results[p].append(json.loads(line[0][7:]))
    names = ["aotk"] + [f"paged{p}" for p in pages] + ["cudnn"]
    print(f"{'row':>18} | " + " | ".join(f"{os.path.basename(p.rstrip('/'))[:22]:>22}" for p in packages) +
          "   (us per " + "/".join(names) + ", min over rounds)")
    for i, text in enumerate(args.rows.split(",")):
        cells = []
        for p in packages:
            vals = []
            for n in names:
                xs = [r[i][n] for r in results[p] if isinstance(r[i].get(n), float)]
                vals.append(f"{min(xs):.2f}" if xs else "-")
            cells.append("/".join(vals))
        print(f"{text:>18} | " + " | ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()

"""Where the sm_90 paged prefill (attn_fwd_hopper_paged) overtakes the decoding kernel's packed path: the
library's call through the Python package (flash_attn_varlen_func with block_table: the decoding kernel
below the host's threshold, the Gluon kernel from it) against the Gluon kernel through the JIT at every
chunk size, same problem, one process. Where the library's call runs the Gluon kernel too the two times
differ by the Python call's own cost, which short calls show (the GPU waits on the CPU); --graphs times
both from CUDA graphs instead, which leaves only the GPU's time.

    python3 bench/explore/hopper/paged_prefill_threshold.py --package-dir DIR [--batch 1,4,64] [--graphs]
    (DIR/aotk holds libaotk.so)
"""
import argparse
import os
import sys

import torch
import triton

ap = argparse.ArgumentParser()
ap.add_argument("--package-dir", required=True)
ap.add_argument("--batch", default="4", help="comma-separated batch sizes")
ap.add_argument("--graphs", action="store_true", help="time both calls as CUDA graph replays")
ap.add_argument("--chunks", default="16,32,48,64,96,128,192")
ap.add_argument("--lengths", default="4096,16384")
ap.add_argument("--head-dims", default="128,64")
ap.add_argument("--heads", default="32/8", help="comma-separated heads_q/heads_kv pairs")
ap.add_argument("--pages", default="16,256", help="comma-separated page sizes")
ap.add_argument("--rows", default="", help="comma-separated b:hq/hkv:d:keys:chunk problems, in place of the "
                "--batch/--head-dims/--heads/--lengths/--chunks product")
args = ap.parse_args()
sys.path.insert(0, args.package_dir)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aotk  # noqa: E402
import paged_prefill_jit as pj  # noqa: E402


def timed(fn):
    if not args.graphs:
        return triton.testing.do_bench(fn, warmup=20, rep=100)
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=20, rep=100)


def problems():
    if args.rows:
        for r in args.rows.split(","):
            b, heads, d, L, chunk = r.split(":")
            yield int(b), int(d), heads, int(L), int(chunk)
        return
    for b in args.batch.split(","):
        for d in args.head_dims.split(","):
            for heads in args.heads.split(","):
                for L in args.lengths.split(","):
                    for chunk in args.chunks.split(","):
                        yield int(b), int(d), heads, int(L), int(chunk)


for b, d, heads, L, chunk in problems():
    hq, hkv = (int(x) for x in heads.split("/"))
    for ps in (int(x) for x in args.pages.split(",")):
        lens_k, lens_q = [L] * b, [chunk] * b
        pr = pj.make_problem(lens_k, lens_q, hq, hkv, d, ps, torch.bfloat16, seed=1)
        q, kc, vc, table = pr["q"], pr["kc"], pr["vc"], pr["table"]
        cu_q = pr["cu_q"]
        cu_k = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * L
        lib = lambda: aotk.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, chunk, L, causal=True, block_table=table)
        out = torch.empty(q.shape[0], hq, d, device="cuda", dtype=torch.bfloat16)
        lse = torch.empty(hq, q.shape[0], device="cuda", dtype=torch.float32)
        jit = pj.launch_paged(pr, out, lse, True, box=16 if ps == 16 else 64)
        jit()
        ref = lib().float()
        err = (out.float() - ref).abs().max().item()
        tl = timed(lib)
        tj = timed(jit)
        print(f"b{b} d{d} h{hq}/{hkv} L{L} chunk {chunk:4d} page {ps:3d}: library {tl*1e3:8.1f} us  gluon(jit) {tj*1e3:8.1f} us  "
              f"gluon/library speed {tl/tj:5.2f}  err {err:.1e}", flush=True)

"""Same kernel, same config: aotk's AOT build against Triton's JIT, in one process.

The JIT specializes integer arguments on the fly (divisibility by 16, the value 1); the AOT build only
has the hints the catalog gives. This measures what that difference costs, so the catalog hints what
matters. Run on the GPU machine: python3 bench/explore/compare_jit_aot.py --lib .gpu/libaotk.so
"""
import argparse
import ctypes
import math
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels"))
import aotk_bench.common as bench_common  # noqa: E402
from attn_fwd import attn_fwd  # noqa: E402

INT_ARGS = ["stride_qb", "stride_qs", "stride_qh", "stride_kb", "stride_ks", "stride_kh", "stride_vb", "stride_vs",
            "stride_vh", "stride_ob", "stride_os", "stride_oh", "stride_lb", "stride_lh", "seqlen_q", "seqlen_k",
            "heads_q", "group_size", "num_m_blocks", "causal", "write_lse"]


def launcher(kernel, q, k, v, out, lse, causal, cfg):
    bm, bn, w, s = cfg
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    nmb = triton.cdiv(sq, bm)
    args = (q, k, v, out, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2), lse.stride(0),
            lse.stride(1), sq, sk, hq, hq // hkv, nmb, 1.0 / math.sqrt(d) * 1.4426950408889634, int(causal), 1)
    return lambda: kernel[(nmb * b * hq,)](*args, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", required=True)
    args = parser.parse_args()
    aotk = bench_common.Aotk(args.lib)
    variants = {
        "jit": attn_fwd,
        "jit-no-int-spec": triton.jit(do_not_specialize=INT_ARGS)(attn_fwd.fn),
        "jit-spec-lengths-only": triton.jit(do_not_specialize=[a for a in INT_ARGS if a.startswith("stride")
                                                                or a in ("group_size", "causal", "write_lse")])(attn_fwd.fn),
        "jit-spec-strides-only": triton.jit(do_not_specialize=[a for a in INT_ARGS if not a.startswith("stride")])(attn_fwd.fn),
    }
    for d, causal, n in ((128, False, 1024), (128, False, 2048), (128, True, 1024), (64, True, 1024), (64, False, 4096)):
        b, h = 16384 // n, 2048 // d
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        params = bench_common.fwd_params(q, k, v, out, lse, causal)
        info = aotk.query(1, params)
        name = info["kernel_name"]
        cfg = tuple(int(x) for x in __import__("re").search(r"m(\d+)n(\d+)w(\d+)s(\d+)", name).groups())
        ref = params
        flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        res = {}
        for rep in range(2):
            res[f"aotk#{rep}"] = flops / triton.testing.do_bench(
                lambda: aotk.attn_fwd(ctypes.byref(ref), bench_common.current_stream()), warmup=25, rep=200,
                return_mode="median") / 1e9
            for vname, kern in variants.items():
                res[f"{vname}#{rep}"] = flops / triton.testing.do_bench(launcher(kern, q, k, v, out, lse, causal, cfg),
                                                                       warmup=25, rep=200, return_mode="median") / 1e9
        print(f"d={d} causal={int(causal)} n={n} {name}: " + ", ".join(f"{k2} {v2:.0f}" for k2, v2 in res.items()),
              flush=True)


if __name__ == "__main__":
    main()

"""Config sweep for kernels/attn_fwd.py through Triton's JIT, on the GPU machine.

Used to choose the compiled configs in codegen/aotk_catalog.py: times every candidate
(BLOCK_M, BLOCK_N, num_warps, num_stages) on the benchmark grid beside torch SDPA's flash and cuDNN
backends in one process, after checking each config against SDPA's math backend. Not part of the
build; results go to stdout and $OUT/tune_fwd.json.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "kernels"))
from attn_fwd import attn_fwd  # noqa: E402

CONFIGS = [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 4, 4),
           (64, 64, 4, 3), (128, 32, 4, 4), (128, 128, 4, 3), (64, 128, 4, 3), (128, 64, 8, 4)]


def run_aotk_jit(q, k, v, out, lse, causal, cfg):
    bm, bn, w, s = cfg
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    nmb = triton.cdiv(sq, bm)
    attn_fwd[(nmb * b * hq,)](q, k, v, out, lse,
                              q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                              v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
                              lse.stride(0), lse.stride(1), sq, sk, hq, hq // hkv, nmb,
                              1.0 / math.sqrt(d) * 1.4426950408889634, int(causal), 1,
                              HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)


def tflops(b, h, sq, sk, d, causal, ms):
    f = 4.0 * b * h * sq * sk * d
    if causal:
        f /= 2
    return f / ms / 1e9


def main():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqlens", default="512,1024,4096,16384")
    parser.add_argument("--configs", default="", help="BMxBNxWxS,... (default: CONFIGS)")
    args = parser.parse_args()
    global CONFIGS
    if args.configs:
        CONFIGS = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    out_dir = os.environ.get("OUT", "/tmp")
    rows = []
    torch.manual_seed(0)
    for d in (int(x) for x in args.head_dims.split(",")):
        for causal in (False, True):
            for n in (int(x) for x in args.seqlens.split(",")):
                b, h = 16384 // n, 2048 // d
                q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn_like(q)
                v = torch.randn_like(q)
                out = torch.empty_like(q)
                lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                ref = None
                res = {}
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        with sdpa_kernel(be):
                            fn = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                            res[name] = tflops(b, h, n, n, d, causal, ms)
                            if ref is None:
                                ref = fn().transpose(1, 2).float()
                    except Exception as e:  # noqa: BLE001
                        res[name] = f"error {type(e).__name__}"
                for cfg in CONFIGS:
                    try:
                        out.fill_(float("nan"))
                        run_aotk_jit(q, k, v, out, lse, causal, cfg)
                        torch.cuda.synchronize()
                        err = (out.float() - ref).abs().max().item()
                        ms = triton.testing.do_bench(lambda: run_aotk_jit(q, k, v, out, lse, causal, cfg),
                                                     warmup=25, rep=100, return_mode="median")
                        res[str(cfg)] = (round(tflops(b, h, n, n, d, causal, ms), 1), round(err, 4))
                    except Exception as e:  # noqa: BLE001
                        res[str(cfg)] = f"error {type(e).__name__}: {str(e)[:80]}"
                row = {"d": d, "causal": causal, "n": n, **res}
                rows.append(row)
                best = max((v[0], c) for c, v in res.items() if isinstance(v, tuple))
                print(f"d={d} causal={int(causal)} n={n}: flash {res['flash']:.0f} cudnn {res['cudnn']:.0f} "
                      f"best {best[1]} {best[0]}", flush=True)
                print("   ", {c: v for c, v in res.items() if c not in ('flash', 'cudnn')}, flush=True)
                del q, k, v, out, lse
    with open(os.path.join(out_dir, "tune_fwd.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

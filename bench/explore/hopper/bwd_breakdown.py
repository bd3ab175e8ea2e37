"""Where a backward's time goes: the kernels of one aotk_attn_bwd call (both modes) and of cuDNN's SDPA
backward, each kernel's mean duration over a few calls (torch.profiler, CUPTI), on the benchmark grid's
problems (16k tokens, hidden 2048).

    python3 bench/explore/hopper/bwd_breakdown.py --lib build/python/aotk/libaotk.so \
        --head-dims 128,192/128 --seqlens 1024,16384 [--causal 0,1] [--dtype bf16] [--modes aotk,aotk-det,cudnn]

Printed per problem and implementation: each kernel (name cut to 60 characters), its count per call and
mean microseconds, and the sum of the kernels' means beside the call's wall time (CUDA events, L2 not
flushed) so that gaps between launches show."""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from aotk_bench.common import (AOTK_OP_ATTN_BWD, Aotk, current_stream, describe_tensor,  # noqa: E402
                               fwd_params)

CALLS = 10


def kernel_table(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = ev.name[:60]
        n, us = rows.get(name, (0, 0.0))
        rows[name] = (n + 1, us + (ev.time_range.end - ev.time_range.start))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return {k: (n / CALLS, us / n) for k, (n, us) in rows.items()}, start.elapsed_time(end) * 1000 / CALLS


def show(label, table, wall_us):
    total = sum(n * us for n, us in table.values())
    print(f"  {label}: kernels {total:.1f} us, wall {wall_us:.1f} us")
    for name, (n, us) in sorted(table.items(), key=lambda kv: -kv[1][0] * kv[1][1]):
        print(f"    {n:4.1f} x {us:9.1f} us  {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--head-dims", default="128")
    ap.add_argument("--seqlens", default="1024,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--modes", default="aotk,aotk-det,cudnn", help="which of aotk, aotk-det and cudnn to run")
    args = ap.parse_args()
    aotk = Aotk(args.lib)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    for dims in args.head_dims.split(","):
        d, _, dv = dims.partition("/")  # "192/128": head_dim_qk 192, head_dim_v 128
        d, dv = int(d), int(dv or d)
        for causal in (bool(int(x)) for x in args.causal.split(",")):
            for n in (int(x) for x in args.seqlens.split(",")):
                b, h = 16384 // n, 2048 // d
                print(f"d={d}/{dv} causal={int(causal)} seqlen={n} batch={b} heads={h}", flush=True)
                q, k = (torch.randn(b, n, h, d, device="cuda", dtype=dtype) for _ in range(2))
                v, dout = (torch.randn(b, n, h, dv, device="cuda", dtype=dtype) for _ in range(2))
                out = torch.empty_like(dout)
                lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                dq, dk, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                params = fwd_params(q, k, v, out, lse, causal)
                for field, t in (("dout", dout), ("dq", dq), ("dk", dk), ("dv", dv_)):
                    setattr(params, field, describe_tensor(t))
                ref = ctypes.byref(params)
                aotk.attn_fwd(ref, current_stream())
                modes = args.modes.split(",")
                for label, det in (("aotk", 0), ("aotk-det", 1)):
                    if label not in modes:
                        continue
                    params.deterministic = det
                    info = aotk.query(AOTK_OP_ATTN_BWD, params)
                    ws = torch.empty(max(info["workspace_bytes"], 16), device="cuda", dtype=torch.uint8)
                    show(label, *kernel_table(lambda: aotk.attn_bwd(ref, ws.data_ptr(), info["workspace_bytes"],
                                                                    current_stream())))
                if "cudnn" in modes:
                    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                        g = dout.transpose(1, 2)
                        show("cudnn", *kernel_table(lambda: torch.autograd.grad(o, (qt, kt, vt), g,
                                                                                retain_graph=True)))
                    del qt, kt, vt, o
                del q, k, v, dout, out, lse, dq, dk, dv_
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

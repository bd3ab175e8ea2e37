"""Dropout's cost beside its anchors, one process: aotk (the package in PACKAGE_DIR), SDPA cuDNN and SDPA flash,
each at dropout_p 0 and 0.1, forward and forward+backward (bf16, batch 4, 16 heads, 4096 tokens, d 64 and 128,
causal and not), TFLOP/s and each one's dropout/plain ratio. Exploration: bench/bench_attn.py --features holds
the committed dropout rows.

    python3 bench/explore/dropout_speed.py PACKAGE_DIR
"""
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, sys.argv[1])
import aotk  # noqa: E402

dev = "cuda"
def t(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, rep=200, return_mode="median")
for d in (64, 128):
    for causal in (False, True):
        b, s, h = 4, 4096, 16
        q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn_like(q)
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        line = f"d{d} causal={int(causal)}:"
        for name in ("aotk", "cudnn", "flash"):
            res = []
            for p in (0.0, 0.1):
                if name == "aotk":
                    f = lambda: aotk.flash_attn_func(q, k, v, dropout_p=p, causal=causal)
                else:
                    be = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                    def f(qt=qt, kt=kt, vt=vt, be=be, p=p):
                        with sdpa_kernel(be):
                            return F.scaled_dot_product_attention(qt, kt, vt, dropout_p=p, is_causal=causal)
                try:
                    tf = t(lambda: f())
                    tb = t(lambda: torch.autograd.grad(f(), (q, k, v), do if name == "aotk" else do.transpose(1, 2)))
                    res.append((flops / tf / 1e9, 3.5 * flops / tb / 1e9))
                except Exception as e:  # an anchor that does not run this problem: nan, and why
                    print(f"  d{d} causal={int(causal)} {name} p={p}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    res.append((float("nan"), float("nan")))
            line += f"  {name} fwd {res[0][0]:.0f}/{res[1][0]:.0f} ({res[1][0]/res[0][0]:.2f})  f+b {res[0][1]:.0f}/{res[1][1]:.0f} ({res[1][1]/res[0][1]:.2f}) |"
        print(line, flush=True)

"""The library's sm_90 Gluon forward (kernels/attn_fwd_hopper.py) through Triton's JIT, on the GPU machine,
checked against a float32 reference and timed beside cuDNN in one process. A change to the library's
kernel is tried here first: give the kernel a constexpr that selects the variant (a default keeps the
library's build unchanged) and name each variant's overrides on the command line; the library's own
benchmark (bench/bench_attn.py) then measures what ships.

    python3 bench/explore/hopper/fwd_hopper_jit.py --variants 'base:{}' 'new:{"VARIANT":1}' \
        --head-dims 64,128 --seqlens 1024,4096,16384

or keep the last commit's kernel in a directory git ignores and name it: `--base-kernels DIR --variants
'old@base:{}' 'new:{}'` (variants `name@base` launch DIR's kernels). `--feature plain,alibi` runs the
feature rows after the plain ones in the same process.

Not part of the build; results go to stdout and $OUT/fwd_hopper_jit.json. (The harness builds
descriptors for Q, K, V and O as the library does and sets FLAG_O_TMA.)
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# AOTK_KERNELS_DIR: another copy of the kernel sources (a variant kept beside the tree's).
sys.path.insert(0, os.environ.get("AOTK_KERNELS_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                       "kernels"))
from attn_fwd_hopper import attn_fwd_hopper, attn_fwd_hopper_wg3  # noqa: E402

KERNELS = {"": (attn_fwd_hopper, attn_fwd_hopper_wg3)}
# --dropout P: the consumers draw dropout (attn_fwd_hopper_dropout, where the kernel source has it), checked
# against the reference with the mask of kernels/attn_fwd.py's attn_dropout_mask (the Triton kernels' rule).
DROPOUT = {"p": 0.0, "rng": None}
WINDOW = [-1, -1]  # --window: (window_left, window_right) of every row; causal sets window_right 0


def load_base(path):
    """--base-kernels: another copy of kernels/attn_fwd_hopper.py (say, the last commit's), for variants named
    `name@base` (it imports the tree's attn_hopper_common)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("attn_fwd_hopper_base", os.path.join(path, "attn_fwd_hopper.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    KERNELS["base"] = (mod.attn_fwd_hopper, mod.attn_fwd_hopper_wg3)

LOG2E = 1.4426950408889634
FLAG_WRITE_LSE, FLAG_SOFTCAP, FLAG_ALIBI, FLAG_REVERSE, FLAG_O_TMA = 1, 8, 16, 128, 256


def _desc(t3, block):
    dt = gl.bfloat16 if t3.dtype == torch.bfloat16 else gl.float16
    return TensorDescriptor(t3, list(t3.shape), list(t3.stride()), block,
                            gl.NVMMASharedLayout.get_default_for(block, dt))


def host_grid(sq, sk, tiles, nmb, block_m, block_n, causal, sms):
    """The grid src/attn/aotk_attn.c (hopper_grid) launches: persistent, unless a causal problem of at
    most 64 rounds would leave its busiest program over 1.08x the mean; then one program per tile."""
    if tiles <= sms:
        return tiles
    if not causal or tiles > 64 * sms:
        return sms
    diag = sk - sq
    load = [0.0] * sms
    for r in range((tiles + sms - 1) // sms):
        for p in range(sms):
            tile = r * sms + (p if r % 2 == 0 else sms - 1 - p)
            if tile >= tiles:
                continue
            m0 = (nmb - 1 - tile % nmb) * block_m
            last = min(m0 + block_m, sq) - 1
            hi = max(min(last + diag + 1, sk), 0)
            load[p] += max(-(-hi // block_n), 1) + 1.0
    return sms if max(load) <= 1.08 * sum(load) / sms else tiles


def launcher(q, k, v, out, lse, causal, softcap=0.0, alibi=None, wg3=False, extras=False, persistent=False,
             module="", **over):
    """A callable that launches the kernel with everything prepared (descriptors built once)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    block_m = over.get("BLOCK_M", 192 if wg3 else 128)
    block_n = over.get("BLOCK_N", 64 if d > 128 else 128)  # a variant may name its key block
    q3, k3, v3 = (t.view(t.shape[0], t.shape[1], -1) for t in (q, k, v))
    dq_box = d
    dq = _desc(q3, [1, 64, dq_box])
    dk = _desc(k3, [1, block_n, dq_box])
    dv = _desc(v3, [1, block_n, d])
    do = _desc(out.view(out.shape[0], out.shape[1], -1), [1, 64, d])
    nmb = triton.cdiv(sq, block_m)
    tiles = nmb * b * hq
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    grid = min(tiles, sms) if persistent else host_grid(sq, sk, tiles, nmb, block_m, block_n, causal, sms)
    programs = over.pop("programs", None)  # a variant's grid: "tiles" (one program a tile) or a count
    if programs is not None:
        grid = tiles if programs == "tiles" else min(int(programs), tiles)
    # O by TMA store (out is contiguous here); flags is then never 1, which the JIT would compile in.
    flags = FLAG_WRITE_LSE | FLAG_O_TMA | (FLAG_REVERSE if causal else 0)
    scale = 1.0 / math.sqrt(d)
    if softcap > 0:
        flags |= FLAG_SOFTCAP
    if alibi is not None:
        flags |= FLAG_ALIBI
    cx = dict(HEAD_DIM_QK=d, HEAD_DIM_V=d, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=2, EXTRAS=extras,
              PRODUCER_REGS=24, CONSUMER_REGS=160 if wg3 else 240)
    cx.update(over)
    opts = dict(num_warps=4, maxnreg=128 if wg3 else 168)
    kern = KERNELS[module][1 if wg3 else 0]
    threshold, drop_scale, rng = 0, 1.0, None
    if DROPOUT["p"] > 0:
        import attn_fwd_hopper as hopper_module
        kern = hopper_module.attn_fwd_hopper_dropout
        threshold = min(math.floor(256 * DROPOUT["p"] + 0.5), 255)
        drop_scale = 256.0 / (256 - threshold)
        rng = DROPOUT["rng"]
    ints = torch.zeros(2, device=q.device, dtype=torch.int32)
    floats = torch.zeros(2, device=q.device, dtype=torch.float32)
    al = alibi if alibi is not None else floats
    args = (q, k, v, out, lse, ints, ints, al, floats, rng if rng is not None else ints.view(torch.int64),
                   q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                   v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
                   lse.stride(0), lse.stride(1), al.stride(0) if alibi is not None else 0,
                   sq, sk, hq, hq // hkv, nmb, d // 8, d // 8, WINDOW[0], 0 if causal else WINDOW[1], flags,
                   scale * LOG2E, scale / softcap if softcap > 0 else 0.0, softcap * LOG2E, threshold, drop_scale,
                   dq, dk, dv, do, tiles)
    kw = dict(cx, **opts)
    return lambda: kern[(grid, )](*args, **kw)


def dropout_mask(b, hq, sq, sk):
    """[b, hq, sq, sk] uint8 keep mask from attn_fwd.py's attn_dropout_mask (the Triton kernels' rule)."""
    from attn_fwd import attn_dropout_mask
    mask = torch.full((b, hq, sq, sk), 0xaa, device="cuda", dtype=torch.uint8)
    ints = torch.zeros(2, device="cuda", dtype=torch.int32)
    nmb = triton.cdiv(sq, 64)
    threshold = min(math.floor(256 * DROPOUT["p"] + 0.5), 255)
    attn_dropout_mask[(nmb * b * hq, )](mask, ints, ints, DROPOUT["rng"], mask.stride(0), mask.stride(1),
                                        mask.stride(2), sq, sk, hq, nmb, 0, threshold, BLOCK_M=64, BLOCK_N=64)
    return mask


def reference(q, k, v, causal, softcap=0.0, alibi=None):
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf = kf.repeat_interleave(q.shape[2] // k.shape[2], 1)
    vf = vf.repeat_interleave(q.shape[2] // k.shape[2], 1)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[1], k.shape[1]
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    if alibi is not None:
        s = s - alibi[:, :, None, None] * (i - j).abs().float()
    if causal:
        s = s.masked_fill(j > i, float("-inf"))
    if WINDOW[0] >= 0:
        s = s.masked_fill(j < i - WINDOW[0], float("-inf"))
    if WINDOW[1] >= 0 and not causal:
        s = s.masked_fill(j > i + WINDOW[1], float("-inf"))
    prob = s.softmax(-1)
    if DROPOUT["p"] > 0:
        t = min(math.floor(256 * DROPOUT["p"] + 0.5), 255)
        prob = prob * dropout_mask(q.shape[0], q.shape[2], sq, sk).float() * (256.0 / (256 - t))
    return (prob @ vf).transpose(1, 2), torch.logsumexp(s, -1)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=200)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", nargs="+", default=["base:{}"], help="name:json constexpr overrides")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--window", default="", help="LEFT,RIGHT: a sliding window on every row (-1: unbounded; "
                    "causal makes RIGHT 0); TFLOP/s then count the visible pairs")
    ap.add_argument("--feature", default="plain", help="comma-separated, of plain, softcap, alibi")
    ap.add_argument("--base-kernels", default=None, help="a directory with another attn_fwd_hopper.py (load_base)")
    ap.add_argument("--wg3", action="store_true", help="the 192-row three-warpgroup entry (d=64)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="P: every variant launches attn_fwd_hopper_dropout (its source's) at dropout_p P")
    args = ap.parse_args()
    if args.dropout > 0:
        DROPOUT["p"] = args.dropout
        DROPOUT["rng"] = torch.tensor([0x2545F4914F6CDD1D, (1 << 32) + 12345], device="cuda", dtype=torch.int64)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    if args.base_kernels:
        load_base(args.base_kernels)
    if args.window:
        WINDOW[:] = [int(x) for x in args.window.split(",")]
    variants = []
    for v in args.variants:
        name, over = v.split(":", 1)[0], json.loads(v.split(":", 1)[1])
        over["module"] = name.split("@", 1)[1] if "@" in name else ""
        variants.append((name, over))
    rows = []
    for feature in args.feature.split(","):
        args.feature = feature
        run_feature(args, dtype, variants, rows)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "fwd_hopper_jit.json"), "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run_feature(args, dtype, variants, rows):
    torch.manual_seed(0)
    extras = args.feature != "plain"
    failed = set()
    for d in (int(x) for x in args.head_dims.split(",")):
        for causal in (bool(int(c)) for c in args.causal.split(",")):
            # Correctness first, on more tiles than SMs (programs run several, under both grids).
            b, n, h = 3, 1531, 12
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype) for _ in range(3))
            softcap = 30.0 if args.feature == "softcap" else 0.0
            alibi = (torch.rand(b, h, device="cuda") * 0.2) if args.feature == "alibi" else None
            ref, ref_lse = reference(q, k, v, causal, softcap, alibi)
            for name, over in variants:
                for persistent in (False, True):
                    out = torch.full_like(q, float("nan"))
                    lse = torch.full((b, h, n), float("nan"), device="cuda", dtype=torch.float32)
                    try:
                        launcher(q, k, v, out, lse, causal, softcap, alibi, args.wg3, extras, persistent, **over)()
                        torch.cuda.synchronize()
                    except Exception as e:  # a variant that does not compile (shared memory, registers)
                        print(f"check d={d} causal={int(causal)} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                        failed.add(name)
                        break
                    err = (out.float() - ref).abs().max().item()
                    lerr = (lse - ref_lse).abs().max().item()
                    bad = not (err <= 2e-2 and lerr <= 1e-3)  # NaN fails too
                    print(f"check d={d} causal={int(causal)} {name} {'persistent' if persistent else 'host grid'}: "
                          f"max|out-ref| {err:.2e}  max|lse-ref| {lerr:.2e}" + ("  FAIL" if bad else ""), flush=True)
            for n in (int(x) for x in args.seqlens.split(",")):
                b, h = max(1, 16384 // n), 2048 // d
                q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype) for _ in range(3))
                alibi = (torch.rand(b, h, device="cuda") * 0.2) if args.feature == "alibi" else None
                out = torch.empty_like(q)
                lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
                flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
                if args.window:
                    i = torch.arange(n, dtype=torch.float64)
                    lo = (i - WINDOW[0]).clamp(min=0) if WINDOW[0] >= 0 else torch.zeros_like(i)
                    right = 0 if causal else WINDOW[1]
                    hi = (i + right).clamp(max=n - 1) if right >= 0 else torch.full_like(i, n - 1)
                    flops = 4.0 * b * h * d * float((hi - lo + 1).sum())
                res = {}
                if args.feature == "plain" and not args.window:
                    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        res["cudnn"] = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
                for name, over in variants:
                    if name in failed:
                        continue
                    res[name] = bench(launcher(q, k, v, out, lse, causal, softcap, alibi, args.wg3, extras, **over))
                line = f"{args.feature} d={d} causal={int(causal)} n={n}:"
                for name, ms in res.items():
                    line += f"  {name} {flops / ms / 1e9:.0f}"
                    if "cudnn" in res and name != "cudnn":
                        line += f" ({res['cudnn'] / ms:.3f}x)"
                print(line, flush=True)
                rows.append(dict(d=d, causal=causal, n=n, feature=args.feature, wg3=args.wg3,
                                 tflops={k2: flops / ms / 1e9 for k2, ms in res.items()}))


if __name__ == "__main__":
    main()

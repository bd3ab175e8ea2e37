"""What the run-time feature arguments cost the plain forward: JIT variants of kernels/attn_fwd.py.

Run on the GPU machine: python3 bench/explore/feature_cost_jit.py [--old-source path]
Builds source variants of the forward (the head-dim mask made a compile-time constant; and, with
--old-source, the issue-2 kernel without any feature argument) and times them side by side with
triton.testing.do_bench on the same inputs, so the cost of each run-time feature argument is measured,
not guessed. The catalog's choices (docs/design.md) cite this script's output.
"""
import argparse
import importlib.util
import math
import os
import shutil
import sys
import tempfile

import torch
import triton
import triton.testing

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels")


def load_variant(name, source_file, substitutions, tmp):
    with open(source_file) as f:
        text = f.read()
    for old, new in substitutions:
        if old not in text:
            raise RuntimeError(f"{name}: {old!r} not in the source")
        text = text.replace(old, new)
    path = os.path.join(tmp, f"variant_{name}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"variant_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def new_launcher(module, q, k, v, out, lse, causal, cfg, extras=False, feature_flags=0, window=(-1, -1)):
    bm, bn, w, s = cfg
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    nmb = triton.cdiv(sq, bm)
    flags = 1 | (128 if causal else 0) | feature_flags
    # The optional pointers are not read with their flags off, but the JIT needs typed tensors.
    i32 = torch.zeros(2, device=q.device, dtype=torch.int32)
    f32 = torch.full((hq,), 0.05, device=q.device, dtype=torch.float32)
    i64 = torch.tensor([1, 2], device=q.device, dtype=torch.int64)
    args = (q, k, v, out, lse, i32, i32, f32, f32, i64,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2), lse.stride(0),
            lse.stride(1), 0, sq, sk, hq, hq // hkv, nmb, d // 8, d // 8, window[0], 0 if causal else window[1], flags,
            1.0 / math.sqrt(d) * 1.4426950408889634, 1.0 / math.sqrt(d) / 30.0, 30.0 * 1.4426950408889634,
            429496729, 1.0 / 0.9)
    return lambda: module.attn_fwd[(nmb * b * hq,)](*args, HEAD_DIM_QK=d, HEAD_DIM_V=d, BLOCK_M=bm, BLOCK_N=bn,
                                                     EXTRAS=extras, num_warps=w, num_stages=s)


def old_launcher(module, q, k, v, out, lse, causal, cfg):
    bm, bn, w, s = cfg
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    nmb = triton.cdiv(sq, bm)
    args = (q, k, v, out, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2), lse.stride(0),
            lse.stride(1), sq, sk, hq, hq // hkv, nmb, 1.0 / math.sqrt(d) * 1.4426950408889634, int(causal), 1)
    return lambda: module.attn_fwd[(nmb * b * hq,)](*args, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=w,
                                                     num_stages=s)


EXTRAS_CONFIGS = ((64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 8, 3), (128, 32, 4, 3), (64, 128, 4, 2),
                  (64, 32, 4, 3), (128, 128, 8, 2))
FEATURE_FLAGS = {"softcap": 8, "alibi": 16, "dropout": 64}


def sweep_extras(module):
    """TFLOP/s of the EXTRAS forward per tile config and feature, beside the plain kernel's best config."""
    for d, n in ((128, 16384), (128, 4096), (64, 16384)):
        b, h = 16384 // n, 2048 // d
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        flops = 4.0 * b * h * n * n * d
        plain_cfg = (128, 128, 8, 3) if d == 128 else (128, 64, 8, 3)
        plain = flops / triton.testing.do_bench(new_launcher(module, q, k, v, out, lse, False, plain_cfg), warmup=25,
                                                rep=200, return_mode="median") / 1e9
        for feature, bit in FEATURE_FLAGS.items():
            res = {}
            for cfg in EXTRAS_CONFIGS:
                try:
                    fn = new_launcher(module, q, k, v, out, lse, False, cfg, extras=True, feature_flags=bit)
                    res[cfg] = flops / triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e9
                except triton.runtime.errors.OutOfResources:
                    pass
            best = max(res, key=res.get)
            print(f"extras d={d} n={n} {feature}: plain {plain:.0f}; " +
                  ", ".join(f"{c}: {t:.0f}" for c, t in res.items()) + f"; best {best} = {res[best] / plain:.2f}x plain",
                  flush=True)


def sweep_windows(module):
    """TFLOP/s (counted by the pairs computed) of windowed forwards per tile config, beside plain."""
    for d, n, window, causal in ((128, 16384, (1024, 0), True), (128, 16384, (512, 512), False),
                                 (64, 16384, (1024, 0), True)):
        b, h = 16384 // n, 2048 // d
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        i = torch.arange(n, device="cuda")
        lo = (i - window[0]).clamp(min=0)
        hi = (i + window[1]).clamp(max=n - 1)
        pairs = float((hi - lo + 1).sum()) * b * h
        plain_cfg = (128, 128, 8, 3) if d == 128 else (128, 64, 8, 3)
        plain = 4.0 * b * h * n * n * d / triton.testing.do_bench(
            new_launcher(module, q, k, v, out, lse, False, plain_cfg), warmup=25, rep=200, return_mode="median") / 1e9
        res = {}
        for cfg in ((128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3), (64, 32, 4, 3), (128, 32, 8, 3)):
            try:
                fn = new_launcher(module, q, k, v, out, lse, causal, cfg, window=window)
                res[cfg] = 4.0 * pairs * d / triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") / 1e9
            except triton.runtime.errors.OutOfResources:
                pass
        print(f"window d={d} n={n} {window} causal={causal}: plain {plain:.0f}; " +
              ", ".join(f"{c}: {t:.0f} ({t / plain:.2f})" for c, t in res.items()), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-source", default="", help="the issue-2 kernels/attn_fwd.py, for comparison")
    parser.add_argument("--extras", action="store_true", help="sweep the EXTRAS forward's tile configs instead")
    parser.add_argument("--windows", action="store_true", help="sweep tile configs of windowed forwards")
    parser.add_argument("--branch-free", action="store_true", help="the same with branch-free score modifiers")
    args = parser.parse_args()
    if args.windows:
        sys.path.insert(0, KERNELS)
        import attn_fwd
        sweep_windows(attn_fwd)
        return
    if args.extras:
        sys.path.insert(0, KERNELS)
        import attn_fwd
        sweep_extras(attn_fwd)
        return
    if args.branch_free:
        # The score modifiers without run-time branches in the inner loop: ALiBi always subtracted (slope 0
        # when off), softcap's tanh always computed and selected.
        tmp = tempfile.mkdtemp()
        with open(os.path.join(KERNELS, "attn_common.py")) as f:
            common = f.read()
        old = common[common.index("    t = qk * 0.0\n"):common.index("    return s, t\n")]
        common = common.replace(old, """    t = tanh_approx(qk * softcap_scale)
    s = tl.where((flags & FLAG_SOFTCAP) != 0, t * softcap_log2, qk * qk_scale_log2)
    distance = tl.abs(rows[:, None] + diag - cols[None, :]).to(tl.float32)
    s = s - slope_log2 * distance
""")
        with open(os.path.join(tmp, "attn_common.py"), "w") as f:
            f.write(common)
        shutil.copy(os.path.join(KERNELS, "attn_fwd.py"), tmp)
        sys.path.insert(0, tmp)
        import attn_fwd
        global EXTRAS_CONFIGS
        EXTRAS_CONFIGS = ((128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 2))
        sweep_extras(attn_fwd)
        return
    sys.path.insert(0, KERNELS)
    tmp = tempfile.mkdtemp()
    shutil.copy(os.path.join(KERNELS, "attn_common.py"), tmp)
    sys.path.insert(0, tmp)
    fwd = os.path.join(KERNELS, "attn_fwd.py")
    no_dmask = [("dqk_ok = offs_dqk < head_dim_qk8 * 8", "dqk_ok = offs_dqk < HEAD_DIM_QK"),
                ("dv_ok = offs_dv < head_dim_v8 * 8", "dv_ok = offs_dv < HEAD_DIM_V")]
    unmasked_loads = [("k = tl.load(k_ptrs, mask=dqk_ok[None, :], other=0.0)", "k = tl.load(k_ptrs)"),
                      ("v = tl.load(v_ptrs, mask=dv_ok[None, :], other=0.0)", "v = tl.load(v_ptrs)")]
    dense = [("q_start, sq = sequence(CuSeqlensQ, batch, seqlen_q, flags)", "q_start, sq = batch * 0, seqlen_q"),
             ("k_start, sk = sequence(CuSeqlensK, batch, seqlen_k, flags)", "k_start, sk = batch * 0, seqlen_k")]
    variants = {"new": load_variant("new", fwd, [], tmp), "no-dmask": load_variant("nodmask", fwd, no_dmask, tmp),
                "unmasked-loads": load_variant("unmaskedloads", fwd, unmasked_loads, tmp),
                "dense": load_variant("dense", fwd, dense, tmp)}
    old = load_variant("old", args.old_source, [], tmp) if args.old_source else None
    configs = {64: {1024: (64, 64, 4, 3), 4096: (128, 64, 8, 3)}, 128: {1024: (64, 64, 4, 3), 4096: (128, 128, 8, 3)}}
    for d, causal, n in ((64, False, 4096), (64, True, 4096)):
        b, h = 16384 // n, 2048 // d
        q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        cfg = configs[d][n]
        flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        fns = {name: new_launcher(m, q, k, v, out, lse, causal, cfg) for name, m in variants.items()}
        fns["new-extras"] = new_launcher(variants["new"], q, k, v, out, lse, causal, cfg, extras=True)
        if old is not None:
            fns["old"] = old_launcher(old, q, k, v, out, lse, causal, cfg)
        res = {}
        for rep in range(2):
            for name, fn in fns.items():
                try:
                    ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
                except triton.runtime.errors.OutOfResources:
                    continue  # the EXTRAS variant of a large tile may not fit; the catalog gives it another
                res[f"{name}#{rep}"] = flops / ms / 1e9
        print(f"d={d} causal={int(causal)} n={n} cfg={cfg}: " + ", ".join(f"{k2} {v2:.0f}" for k2, v2 in res.items()),
              flush=True)


if __name__ == "__main__":
    main()

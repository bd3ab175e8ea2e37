"""Two builds of libaotk side by side in one process: the backward (or forward) of each on the same inputs,
alternating, with cuDNN's time beside them.

    python bench/explore/ab_libs.py --libs base.so,new.so [--op bwd|fwd|sel] [--rounds 3] [--rows ROWS] [--ptx]
                                    [--profile]

ROWS: semicolon-separated `d[/dv]:causal:seqlen[:heads_q[/heads_kv][:feature]]` (batch = 16384 / seqlen, heads
2048 / d by default, as the benchmark's grid; feature `softcap` (30) or `alibi` (random slopes), the
EXTRAS kernels; cuDNN's time beside them is then the plain problem's). For each row the first library's forward gives out and lse;
every library's backward is then run in both modes (deterministic = 0 and 1). The deterministic results
must be bitwise equal across libraries (each output element has one owner in a fixed order, so a change of
program order or schedule must not change a bit) and the default mode's must match within rounding; a
mismatch is printed loudly. Each (library, mode) is timed `rounds` times, libraries alternating, and the
minimum kept. Exploration only: bench/bench_attn.py is the benchmark whose results are committed.

--op sel: selection attention (aotk_sel_fwd and aotk_sel_bwd) on the benchmark's problem (one sequence,
heads 64/4, d 128, block 64, 16 slots, bf16); ROWS are `tokens:distribution` (an index distribution of
bench_attn.py's selection rows). Every library's out, lse, dq, dk and dv must be bitwise equal to the first
one's (the selection backward is deterministic), and each library's forward and backward are timed.

--profile (sel): after the timing, each row's backward of every library once more under torch.profiler, and
its kernels' device times (the index passes, dQ, dK/dV, the reduction), to see where a change moved time.
"""
import argparse
import ctypes
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aotk_bench.common import (AOTK_OP_ATTN_BWD, AOTK_OP_SEL_BWD, Aotk, current_stream,  # noqa: E402
                               describe_tensor, fwd_params, rel_l2, time_ms, torch)

DEFAULT_ROWS = ";".join(
    [f"{d}:1:{n}" for d in ("64", "128", "192/128", "256") for n in (1024, 2048, 4096, 8192, 16384)]
    + ["128:1:8192:32/8", "128:0:4096", "192/128:0:8192"])


def parse_rows(text):
    rows = []
    for item in text.split(";"):
        parts = item.split(":")
        d, _, dv = parts[0].partition("/")
        d, dv = int(d), int(dv or d)
        causal, n = parts[1] == "1", int(parts[2])
        hq, hkv = 2048 // d, 2048 // d
        if len(parts) > 3 and parts[3]:
            a, _, b = parts[3].partition("/")
            hq, hkv = int(a), int(b or a)
        feature = parts[4] if len(parts) > 4 else ""
        if feature not in ("", "softcap", "alibi"):
            raise SystemExit(f"unknown feature {feature!r} in row {item!r}")
        rows.append(dict(d=d, dv=dv, causal=causal, n=n, hq=hq, hkv=hkv, b=max(16384 // n, 1), feature=feature))
    return rows


SEL_ROWS = ";".join(f"{n}:{dist}" for n in (16384, 65536) for dist in ("uniform-causal", "nsa-fixed", "nsa-topk"))


def kernel_times(fn):
    """fn's kernels and their device times (us), from one run under torch.profiler (CUPTI records the
    kernels the library launches through the driver, as it does torch's)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            times[e.name] = times.get(e.name, 0.0) + e.device_time_total
    return times


def sel_main(paths, rows, rounds, profile=False):
    """--op sel: each row's selection forward and backward in every library, alternating."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crosscheck"))
    import check_selection as cs
    import aotk_bench.selection as bench_selection
    libs = [cs.load(p) for p in paths]
    hq, hkv, d, block, slots = 64, 4, 128, 64, 16
    stream = current_stream()
    for item in rows.split(";"):
        n, dist = item.split(":")
        n = int(n)
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                       for h in (hq, hkv, hkv, hq))
        if dist == "uniform-causal":
            idx = cs.random_indices(n, n, hkv, slots, block, gen, "cuda", junk=False)
        else:
            idx = torch.tensor(bench_selection.sel_nsa_block_rows(dist, n, hkv, slots, block, 1), dtype=torch.int32,
                               device="cuda")
        runs = []
        for lib in libs:
            t = {"q": q, "k": k, "v": v, "out": torch.full_like(q, float("nan")),
                 "lse": torch.full((n, hq), float("nan"), device="cuda"), "block_idx": idx, "block_size": block,
                 "dout": do, "dq": torch.full_like(q, float("nan")), "dk": torch.full_like(k, float("nan")),
                 "dv": torch.full_like(v, float("nan"))}
            p = cs.sel_params(t)
            info = cs.ba.AotkKernelInfo()
            info.struct_size = ctypes.sizeof(info)
            lib.check(lib.lib.aotk_sel_query(AOTK_OP_SEL_BWD, ctypes.byref(p), ctypes.byref(info)), "aotk_sel_query")
            ws = torch.empty(max(info.workspace_bytes, 16), device="cuda", dtype=torch.uint8)
            fwd = (lambda lib=lib, p=p: lib.check(lib.lib.aotk_sel_fwd(ctypes.byref(p), stream), "aotk_sel_fwd"))
            bwd = (lambda lib=lib, p=p, ws=ws, nb=info.workspace_bytes:
                   lib.check(lib.lib.aotk_sel_bwd(ctypes.byref(p), ws.data_ptr(), nb, stream), "aotk_sel_bwd"))
            fwd()
            bwd()
            runs.append((t, fwd, bwd, p, [math.inf, math.inf]))
        torch.cuda.synchronize()
        for i in range(1, len(runs)):
            for name in ("out", "lse", "dq", "dk", "dv"):
                if not torch.equal(runs[0][0][name], runs[i][0][name]):
                    print(f"!!! MISMATCH lib {i} vs 0, {name}: not bitwise equal, rel L2 "
                          f"{rel_l2(runs[i][0][name], runs[0][0][name])}")
        for _ in range(rounds):
            for t, fwd, bwd, p, best in runs:
                best[0] = min(best[0], time_ms(fwd))
                best[1] = min(best[1], time_ms(bwd))
        base = runs[0][4]
        cells = [f"lib{i} fwd {b[0]:.3f} ms (x{base[0] / b[0]:.3f}) bwd {b[1]:.3f} ms (x{base[1] / b[1]:.3f})"
                 for i, (_, _, _, _, b) in enumerate(runs)]
        print(f"sel {dist:14s} {n:6d} | " + " | ".join(cells), flush=True)
        if profile:
            for i, (_, _, bwd, _, _) in enumerate(runs):
                times = kernel_times(bwd)
                print(f"    lib{i} bwd kernels (us): " + ", ".join(
                    f"{name.split('_bf16')[0]} {t:.0f}" for name, t in sorted(times.items(), key=lambda x: -x[1])),
                    flush=True)


def cudnn_ms(q, k, v, dout, causal, op, gqa):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        args = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        if op == "fwd":
            with torch.no_grad():
                return time_ms(lambda: F.scaled_dot_product_attention(*args, is_causal=causal, enable_gqa=gqa))
        o = F.scaled_dot_product_attention(*args, is_causal=causal, enable_gqa=gqa)
        g = dout.transpose(1, 2)
        return time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))


def run_row(row, libs, op, rounds):
    dt = torch.bfloat16
    b, n, hq, hkv, d, dv = row["b"], row["n"], row["hq"], row["hkv"], row["d"], row["dv"]
    q = torch.randn(b, n, hq, d, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(b, n, hkv, d, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(b, n, hkv, dv, device="cuda", dtype=dt, requires_grad=True)
    dout = torch.randn(b, n, hq, dv, device="cuda", dtype=dt)
    ref = cudnn_ms(q, k, v, dout, row["causal"], op, hq != hkv)
    out = torch.empty(b, n, hq, dv, device="cuda", dtype=dt)
    lse = torch.empty(b, hq, n, device="cuda", dtype=torch.float32)
    params = fwd_params(q.detach(), k.detach(), v.detach(), out, lse, row["causal"])
    if row["feature"] == "softcap":
        params.softcap = 30.0
    elif row["feature"] == "alibi":
        slopes = torch.rand(hq, device="cuda", dtype=torch.float32) * 0.2
        params.alibi_slopes = describe_tensor(slopes)
    grads = [(torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)) for _ in libs]
    pref = ctypes.byref(params)
    libs[0].attn_fwd(pref, current_stream())
    flops = 4.0 * b * hq * n * n * (d + dv) / 2 * (0.5 if row["causal"] else 1.0) * (2.5 if op == "bwd" else 1.0)
    modes = (0,) if op == "fwd" else (0, 1)
    times = {}
    for mode in modes:
        params.deterministic = mode
        ws = []
        for i, lib in enumerate(libs):
            if op == "bwd":
                for field, t in zip(("dout", "dq", "dk", "dv"), (dout,) + grads[i]):
                    setattr(params, field, describe_tensor(t))
                info = lib.query(AOTK_OP_ATTN_BWD, params)
                w = torch.empty(max(info["workspace_bytes"], 16), device="cuda", dtype=torch.uint8)
                ws.append((w, info["workspace_bytes"]))
                for t in grads[i]:
                    t.fill_(float("nan"))
                lib.attn_bwd(pref, w.data_ptr(), info["workspace_bytes"], current_stream())
        torch.cuda.synchronize()
        if op == "bwd":
            for i in range(1, len(libs)):
                for name, a, c in zip(("dq", "dk", "dv"), grads[0], grads[i]):
                    same = torch.equal(a, c)
                    err = rel_l2(c, a)
                    if (mode == 1 and not same) or not err < 1e-2:
                        print(f"!!! MISMATCH lib {i} vs 0, deterministic={mode}, {name}: bitwise {same}, rel L2 {err}")
        for r in range(rounds):
            for i, lib in enumerate(libs):
                if op == "bwd":
                    for field, t in zip(("dq", "dk", "dv"), grads[i]):
                        setattr(params, field, describe_tensor(t))
                    w, nb = ws[i]
                    ms = time_ms(lambda: lib.attn_bwd(pref, w.data_ptr(), nb, current_stream()))
                else:
                    ms = time_ms(lambda: lib.attn_fwd(pref, current_stream()))
                key = (i, mode)
                times[key] = min(times.get(key, math.inf), ms)
    label = f"{op} d{d}{'/' + str(dv) if dv != d else ''} {'causal' if row['causal'] else 'full'} {n} " \
            f"b{b} h{hq}/{hkv}{' ' + row['feature'] if row['feature'] else ''}"
    for mode in modes:
        base = times[(0, mode)]
        cells = [f"det={mode}"] + [f"lib{i} {times[(i, mode)]:.3f} ms ({flops / times[(i, mode)] / 1e9:.0f} TF, "
                                   f"x{base / times[(i, mode)]:.3f}, cudnn {ref / times[(i, mode)]:.3f})"
                                   for i in range(len(libs))]
        print(f"{label:40s} cudnn {ref:.3f} | " + " | ".join(cells), flush=True)
    return {(i, m): (ref / t) for (i, m), t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--libs", required=True, help="comma-separated libaotk.so paths, the first the base")
    ap.add_argument("--op", default="bwd", choices=("bwd", "fwd", "sel"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", default=None, help="default: the causal grid (fwd, bwd); SEL_ROWS (sel)")
    ap.add_argument("--profile", action="store_true",
                    help="sel: each library's backward kernels and their device times (torch.profiler)")
    ap.add_argument("--ptx", action="store_true",
                    help="every library runs the sm_80 PTX (aotk_set_image_policy): the Triton kernels newer "
                         "GPUs take, and the nearest this GPU comes to sm_80's code")
    args = ap.parse_args()
    if args.op == "sel":
        sel_main(args.libs.split(","), args.rows or SEL_ROWS, args.rounds, args.profile)
        return
    args.rows = args.rows or DEFAULT_ROWS
    libs = [Aotk(p) for p in args.libs.split(",")]
    if args.ptx:
        for lib in libs:
            lib.check(lib.lib.aotk_set_image_policy(1), "aotk_set_image_policy")
    ratios = {}
    for row in parse_rows(args.rows):
        for key, r in run_row(row, libs, args.op, args.rounds).items():
            ratios.setdefault(key, []).append(r)
    for (i, m), rs in sorted(ratios.items()):
        print(f"lib{i} det={m}: geomean x cuDNN {math.exp(sum(map(math.log, rs)) / len(rs)):.4f} over {len(rs)} rows")


if __name__ == "__main__":
    main()

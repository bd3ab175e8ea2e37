"""Check and time the Gluon FA3-style forward (bench/explore/hopper/gluon_attn_fwd.py) on an H100.

Run from the repository root:  python3 bench/explore/hopper/gluon_attn_fwd_check.py
Options: --configs a,b (default: all in CONFIGS, simplest first), --quick (fewer cases), --timeout S.

Each config runs in its own subprocess with a timeout, so a hang (a barrier deadlock in a warp-specialized
kernel never returns) or a crash (illegal address poisons the CUDA context) costs only that config. cuDNN
(torch SDPA, CUDNN_ATTENTION backend) is timed in a separate subprocess on the same shapes. Results go
to $OUT/gluon_fwd.json when OUT is set (else ./gluon_fwd.json is not written; printed only).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, layout) ; layout "dense" or "packed" (q/k/v are views
# of one [b, s, 3, h, d] tensor: arbitrary 16-byte-aligned strides)
CHECK_CASES = [
    (2, 8192, 8192, 16, 16, "dense"),
    (2, 1000, 1000, 16, 16, "dense"),
    (2, 1000, 4097, 16, 16, "dense"),
    (1, 1000, 4097, 32, 8, "dense"),
    (2, 777, 777, 4, 4, "packed"),
    (1, 1500, 1000, 4, 2, "dense"),  # seqlen_q > seqlen_k: causal rows with no visible key (out 0, lse -inf)
    (1, 1, 300, 2, 2, "dense"),
]
QUICK_CASES = [CHECK_CASES[1], CHECK_CASES[2], CHECK_CASES[3], CHECK_CASES[5]]
TIME_SEQLENS = (4096, 8192)
DIMS = [64, 128]  # --dims overrides (e.g. 64,128,256)


def flops(b, h, sq, sk, d, causal):
    f = 4.0 * b * h * sq * sk * d
    return f / 2 if causal else f


def make_inputs(case, d, dtype, seed=0):
    import torch
    b, sq, sk, hq, hkv, layout = case
    g = torch.Generator(device="cuda").manual_seed(seed)
    if layout == "packed":
        assert sq == sk and hq == hkv
        qkv = torch.randn(b, sq, 3, hq, d, device="cuda", dtype=dtype, generator=g)
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v


def reference(q, k, v, causal, scale):
    """float32 reference; out [b, sq, hq, d], lse [b, hq, sq]. Rows with no visible key: out 0, lse -inf."""
    import torch
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    grp = hq // hkv
    out = torch.empty(b, sq, hq, d, device=q.device, dtype=torch.float32)
    lse = torch.empty(b, hq, sq, device=q.device, dtype=torch.float32)
    rows = torch.arange(sq, device=q.device)[:, None]
    cols = torch.arange(sk, device=q.device)[None, :]
    visible = cols <= rows + (sk - sq) if causal else None
    chunk = max(1, min(hq, (1 << 28) // max(1, sq * sk)))
    for bi in range(b):
        for h0 in range(0, hq, chunk):
            hs = list(range(h0, min(hq, h0 + chunk)))
            qh = q[bi, :, hs].float().transpose(0, 1)  # [c, sq, d]
            kh = k[bi][:, [h // grp for h in hs]].float().transpose(0, 1)
            vh = v[bi][:, [h // grp for h in hs]].float().transpose(0, 1)
            s = torch.matmul(qh, kh.transpose(1, 2)) * scale
            if causal:
                s = s.masked_fill(~visible, float("-inf"))
            l = torch.logsumexp(s, dim=-1)  # -inf for rows with no key
            p = torch.exp(s - torch.where(torch.isinf(l), torch.zeros_like(l), l)[..., None])
            o = torch.matmul(p, vh)
            out[bi, :, h0:h0 + len(hs)] = o.transpose(0, 1)
            lse[bi, h0:h0 + len(hs)] = l
    return out, lse


def compare(out, lse, ref_out, ref_lse):
    import torch
    err_out = (out.float() - ref_out).abs().max().item()
    fin = torch.isfinite(ref_lse)
    same_inf = bool(torch.equal(torch.isfinite(lse), fin))
    err_lse = (lse[fin] - ref_lse[fin]).abs().max().item() if fin.any() else 0.0
    nan = bool(torch.isnan(out).any().item() or torch.isnan(lse).any().item())
    return err_out, err_lse, same_inf, nan


def run_config(name, quick, results):
    import torch
    import triton
    from gluon_attn_fwd import CONFIGS, config_ok, gluon_attn_fwd
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = CONFIGS[name]
    cases = QUICK_CASES if quick else CHECK_CASES
    dtype = torch.bfloat16
    for d in DIMS:
        if not config_ok(cfg, d):
            continue
        for causal in (False, True):
            for case in cases:
                rec = dict(kind="check", config=name, d=d, causal=causal, case=list(case), dtype="bf16")
                try:
                    q, k, v = make_inputs(case, d, dtype)
                    scale = 1.0 / math.sqrt(d)
                    t0 = time.time()
                    out, lse = gluon_attn_fwd(q, k, v, causal, scale, name)
                    torch.cuda.synchronize()
                    rec["first_call_s"] = round(time.time() - t0, 2)
                    ref_out, ref_lse = reference(q, k, v, causal, scale)
                    e_o, e_l, same_inf, nan = compare(out, lse, ref_out, ref_lse)
                    ok = e_o < 2e-2 and e_l < 5e-3 and same_inf and not nan
                    rec.update(err_out=e_o, err_lse=e_l, lse_inf_match=same_inf, nan=nan, ok=ok)
                    print(f"[{name}] d={d} causal={int(causal)} case={case}: out_err={e_o:.3e} lse_err={e_l:.3e} "
                          f"inf_match={same_inf} nan={nan} -> {'OK' if ok else 'FAIL'}", flush=True)
                    del q, k, v, out, lse, ref_out, ref_lse
                except Exception as e:
                    rec.update(ok=False, error=f"{type(e).__name__}: {e}"[:3000])
                    print(f"[{name}] d={d} causal={int(causal)} case={case}: ERROR {type(e).__name__}: {e}"[:3000],
                          flush=True)
                    traceback.print_exc(limit=4)
                results.append(rec)
            # fp16 once per causal, d=128 only (each dtype is another compile)
            if d != 128:
                continue
            case = CHECK_CASES[2]
            rec = dict(kind="check", config=name, d=d, causal=causal, case=list(case), dtype="fp16")
            try:
                q, k, v = make_inputs(case, d, torch.float16)
                scale = 1.0 / math.sqrt(d)
                out, lse = gluon_attn_fwd(q, k, v, causal, scale, name)
                ref_out, ref_lse = reference(q, k, v, causal, scale)
                e_o, e_l, same_inf, nan = compare(out, lse, ref_out, ref_lse)
                ok = e_o < 1e-2 and e_l < 5e-3 and same_inf and not nan
                rec.update(err_out=e_o, err_lse=e_l, lse_inf_match=same_inf, nan=nan, ok=ok)
                print(f"[{name}] fp16 d={d} causal={int(causal)} case={case}: out_err={e_o:.3e} lse_err={e_l:.3e}"
                      f" -> {'OK' if ok else 'FAIL'}", flush=True)
            except Exception as e:
                rec.update(ok=False, error=f"{type(e).__name__}: {e}"[:3000])
                print(f"[{name}] fp16 d={d} causal={int(causal)}: ERROR {type(e).__name__}: {e}"[:3000], flush=True)
            results.append(rec)
    # Timing on the standard grid (batch 16384/seqlen, heads 2048/d), bf16, square.
    for d in DIMS:
        if not config_ok(cfg, d):
            continue
        for s in TIME_SEQLENS:
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                rec = dict(kind="time", impl="gluon", config=name, d=d, causal=causal, batch=b, heads=h, seqlen=s)
                try:
                    q, k, v = make_inputs((b, s, s, h, h, "dense"), d, dtype, seed=1)
                    fn = lambda: gluon_attn_fwd(q, k, v, causal, 1.0 / math.sqrt(d), name)
                    fn()
                    ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                    tf = flops(b, h, s, s, d, causal) / ms * 1e-9
                    rec.update(ms=ms, tflops=tf)
                    print(f"[{name}] time d={d} s={s} causal={int(causal)}: {ms:.3f} ms {tf:.0f} TFLOP/s", flush=True)
                except Exception as e:
                    rec.update(error=f"{type(e).__name__}: {e}"[:3000])
                    print(f"[{name}] time d={d} s={s} causal={int(causal)}: ERROR {type(e).__name__}: {e}"[:3000],
                          flush=True)
                results.append(rec)


def run_cudnn(results):
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dtype = torch.bfloat16
    for d in DIMS:
        for s in TIME_SEQLENS:
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                rec = dict(kind="time", impl="cudnn", d=d, causal=causal, batch=b, heads=h, seqlen=s)
                try:
                    q, k, v = make_inputs((b, s, s, h, h, "dense"), d, dtype, seed=1)
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

                    def fn():
                        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

                    fn()
                    ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                    tf = flops(b, h, s, s, d, causal) / ms * 1e-9
                    rec.update(ms=ms, tflops=tf)
                    print(f"[cudnn] time d={d} s={s} causal={int(causal)}: {ms:.3f} ms {tf:.0f} TFLOP/s", flush=True)
                except Exception as e:
                    rec.update(error=f"{type(e).__name__}: {e}"[:2000])
                    print(f"[cudnn] d={d} s={s} causal={int(causal)}: ERROR {type(e).__name__}: {e}"[:2000], flush=True)
                results.append(rec)


def worker(args):
    results = []
    try:
        if args.worker == "cudnn":
            run_cudnn(results)
        else:
            run_config(args.worker, args.quick, results)
    except Exception as e:
        results.append(dict(kind="error", worker=args.worker, error=f"{type(e).__name__}: {e}"[:3000]))
        traceback.print_exc()
    finally:
        with open(args.json, "w") as f:
            json.dump(results, f)


def read_partial(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timeout", type=float, default=150.0)
    ap.add_argument("--no-cudnn", action="store_true")
    ap.add_argument("--worker", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--dims", default="64,128")
    args = ap.parse_args()
    DIMS[:] = [int(x) for x in args.dims.split(",")]
    if args.worker:
        return worker(args)

    from gluon_attn_fwd import CONFIGS
    names = args.configs.split(",") if args.configs else list(CONFIGS)
    workers = ([] if args.no_cudnn else ["cudnn"]) + names
    all_results, summary = [], {}
    out_dir = os.environ.get("OUT")
    tmp_dir = out_dir or "/tmp"
    t_start = time.time()
    for w in workers:
        path = os.path.join(tmp_dir, f"gluon_fwd_part_{w}.json")
        if os.path.exists(path):
            os.remove(path)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", w, "--json", path, "--dims", args.dims]
        if args.quick:
            cmd.append("--quick")
        t0 = time.time()
        print(f"==== worker {w}", flush=True)
        try:
            rc = subprocess.run(cmd, timeout=args.timeout).returncode
            status = "ok" if rc == 0 else f"rc={rc}"
        except subprocess.TimeoutExpired:
            status = f"timeout after {args.timeout:.0f}s (hang? partial results lost unless printed)"
        part = read_partial(path) or []
        if os.path.exists(path) and out_dir is None:
            os.remove(path)
        summary[w] = dict(status=status, seconds=round(time.time() - t0, 1), n=len(part),
                          n_ok=sum(1 for r in part if r.get("ok")),
                          n_fail=sum(1 for r in part if r.get("kind") == "check" and not r.get("ok")))
        print(f"==== worker {w}: {status}, {summary[w]}", flush=True)
        all_results.extend(part)

    # Ratios vs cuDNN.
    cud = {(r["d"], r["seqlen"], r["causal"]): r.get("tflops") for r in all_results
           if r.get("kind") == "time" and r.get("impl") == "cudnn"}
    print("\n==== timing summary (TFLOP/s, ratio to cuDNN)")
    for r in all_results:
        if r.get("kind") == "time" and r.get("impl") == "gluon" and r.get("tflops"):
            c = cud.get((r["d"], r["seqlen"], r["causal"]))
            r["ratio_cudnn"] = r["tflops"] / c if c else None
            print(f"  {r['config']:>14} d={r['d']:>3} s={r['seqlen']:>5} causal={int(r['causal'])}: "
                  f"{r['tflops']:6.0f}  cudnn {c or float('nan'):6.0f}  ratio {r['ratio_cudnn'] or float('nan'):.3f}")
    print("==== workers:", json.dumps(summary, indent=1))
    print(f"total {time.time() - t_start:.0f}s")
    if out_dir:
        with open(os.path.join(out_dir, "gluon_fwd.json"), "w") as f:
            json.dump(dict(summary=summary, results=all_results), f, indent=1)


if __name__ == "__main__":
    main()

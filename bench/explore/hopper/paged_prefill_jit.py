"""The sm_90 paged prefill (kernels/attn_fwd_hopper.py, attn_fwd_hopper_paged) through Triton's JIT, on
the GPU machine: checked against a float32 reference over shuffled pages whose unused rows hold NaN, and
timed beside the same kernel family's dense varlen forward (attn_fwd_hopper over the same keys stored
contiguously) in one process.

    python3 bench/explore/hopper/paged_prefill_jit.py [--head-dims 64,128] [--page-sizes 16,64,256]

Not part of the build; results go to stdout and $OUT/paged_prefill_jit.json.
"""
import argparse
import itertools
import json
import math
import os
import sys

import torch
import triton

sys.path.insert(0, os.environ.get("AOTK_KERNELS_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                       "kernels"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attn_fwd_hopper import attn_fwd_hopper, attn_fwd_hopper_paged  # noqa: E402

# The split's arguments stay run-time values, as in the library's cubins (the catalog specializes no
# integer). (Before FLAG_SPLIT_OUT chose the epilogue, the JIT's num_splits = 1 constant folded its branch
# inside a warp-specialized partition, which Triton 3.6 failed to lower.)
for _param in attn_fwd_hopper_paged.params:
    if _param.name in ("stride_pp", "stride_lpp", "num_splits", "split_keys"):
        _param.do_not_specialize = True

from fwd_hopper_jit import LOG2E, _desc  # noqa: E402  (the same descriptors as the dense harness's)

FLAG_WRITE_LSE, FLAG_VARLEN, FLAG_REVERSE, FLAG_O_TMA, FLAG_LEFTPAD = 1, 2, 128, 256, 512


def make_problem(lens_k, lens_q, hq, hkv, d, page, dtype, leftpad=None, spare=7, seed=0, dv=None):
    """A paged cache holding each request's keys in shuffled pages (NaN in every row past a length and in
    the spare pages), its contiguous copy, and packed queries at the end of each request."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    dv = dv or d
    b = len(lens_k)
    pages_per = [max(1, -(-lk // page)) for lk in lens_k]
    max_pages = max(pages_per)
    num_pages = sum(pages_per) + spare
    perm = torch.randperm(num_pages, generator=g)
    table = torch.zeros(b, max_pages, dtype=torch.int32)
    kc = torch.full((num_pages, page, hkv, d), float("nan"), dtype=dtype)
    vc = torch.full((num_pages, page, hkv, dv), float("nan"), dtype=dtype)
    keys, values = [], []
    used = 0
    for i, lk in enumerate(lens_k):
        k = torch.randn(lk, hkv, d, generator=g).to(dtype)
        v = torch.randn(lk, hkv, dv, generator=g).to(dtype)
        keys.append(k)
        values.append(v)
        for p in range(pages_per[i]):
            pid = int(perm[used])
            used += 1
            table[i, p] = pid
            rows = slice(p * page, min((p + 1) * page, lk))
            n = rows.stop - rows.start
            if n > 0:
                kc[pid, :n] = k[rows]
                vc[pid, :n] = v[rows]
        # entries past the request's pages: a page id no request owns (never read)
        table[i, pages_per[i]:] = int(perm[-1])
    q = torch.randn(sum(lens_q), hq, d, generator=g).to(dtype)
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32)
    dev = "cuda"
    return dict(q=q.to(dev), kc=kc.to(dev), vc=vc.to(dev), table=table.to(dev), cu_q=cu_q.to(dev),
                seqlens=torch.tensor(lens_k, dtype=torch.int32, device=dev), lens_k=lens_k, lens_q=lens_q,
                keys=[k.to(dev) for k in keys], values=[v.to(dev) for v in values], page=page, hq=hq, hkv=hkv, d=d, dv=dv,
                capacity=max_pages * page,
                leftpad=None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32, device=dev))


def reference(pr, causal, window_left=-1):
    outs, lses = [], []
    g = pr["hq"] // pr["hkv"]
    for i, (lk, lq) in enumerate(zip(pr["lens_k"], pr["lens_q"])):
        q = pr["q"][int(pr["cu_q"][i]):int(pr["cu_q"][i + 1])].float().transpose(0, 1)
        k = pr["keys"][i].float().transpose(0, 1).repeat_interleave(g, 0)
        v = pr["values"][i].float().transpose(0, 1).repeat_interleave(g, 0)
        s = q @ k.transpose(-1, -2) / math.sqrt(pr["d"])
        pos = torch.arange(lq, device=q.device)[:, None] + (lk - lq)
        j = torch.arange(lk, device=q.device)[None, :]
        mask = torch.zeros(lq, lk, dtype=torch.bool, device=q.device)
        if causal:
            mask |= j > pos
        if window_left >= 0:
            mask |= j < pos - window_left
        if pr["leftpad"] is not None:
            mask |= j < int(pr["leftpad"][i])
        s = s.masked_fill(mask, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        outs.append((p @ v).transpose(0, 1))
        lses.append(lse)
    return torch.cat(outs, 0), torch.cat(lses, 1)


def tiles_of(d):
    """(BLOCK_N, Q's box width) of the library's config at head dim d."""
    return (64 if d > 192 else 128), (64 if d == 192 else d)


def launch_paged(pr, out, lse, causal, window_left=-1, grid=None, box=16):
    q, kc, vc = pr["q"], pr["kc"], pr["vc"]
    total, hq, d = q.shape
    dv = vc.shape[-1]
    block_n, q_box = tiles_of(d)
    page, hkv = pr["page"], pr["hkv"]
    max_q = max(pr["lens_q"])
    nmb = triton.cdiv(max_q, 128)
    tiles = nmb * len(pr["lens_q"]) * hq
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    grid = grid or min(tiles, sms)
    desc_q = _desc(q.view(1, total, hq * d), [1, 64, q_box])
    desc_k = _desc(kc.view(kc.shape[0], page, hkv * d), [1, box, 64])
    desc_v = _desc(vc.view(vc.shape[0], page, hkv * dv), [1, box, 64])
    desc_o = _desc(out.view(1, total, hq * dv), [1, 64, dv])
    flags = FLAG_WRITE_LSE | FLAG_VARLEN | (FLAG_O_TMA if d == dv else 0) | (FLAG_REVERSE if causal and window_left < 0
                                                                             else 0)
    lp = pr["leftpad"]
    if lp is not None:
        flags |= FLAG_LEFTPAD
    scale = 1.0 / math.sqrt(d)
    floats = torch.zeros(2, device=q.device, dtype=torch.float32)
    args = (q, kc, vc, out, lse, pr["cu_q"], pr["cu_q"], floats, floats, floats,
            0, q.stride(0), q.stride(1), 0, kc.stride(1), kc.stride(2), 0, vc.stride(1), vc.stride(2),
            0, out.stride(0), out.stride(1), 0, lse.stride(0), 0,
            max_q, pr["capacity"], hq, hq // hkv, nmb, d // 8, dv // 8, window_left, 0 if causal else -1, flags,
            scale * LOG2E, 0.0, 0.0, 0, 1.0, desc_q, desc_k, desc_v, desc_o, tiles,
            pr["table"], pr["seqlens"], lp if lp is not None else pr["seqlens"], pr["table"].stride(0),
            page.bit_length() - 1, floats, 0, 0, 1, pr["capacity"])  # unsplit: no partials, one split
    kw = dict(HEAD_DIM_QK=d, HEAD_DIM_V=dv, BLOCK_M=128, BLOCK_N=block_n, STAGES=2, EXTRAS=False, PRODUCER_REGS=56,
              CONSUMER_REGS=240, num_warps=4, maxnreg=168)
    return lambda: attn_fwd_hopper_paged[(grid, )](*args, **kw)


def launch_dense(pr, kp, vp, cu_k, out, lse, causal, window_left=-1):
    """The dense varlen forward over the same keys stored contiguously (kp, vp: [1, total_k, hkv, d])."""
    q = pr["q"]
    total, hq, d = q.shape
    dv = vp.shape[-1]
    block_n, q_box = tiles_of(d)
    hkv = pr["hkv"]
    max_q, max_k = max(pr["lens_q"]), max(pr["lens_k"])
    nmb = triton.cdiv(max_q, 128)
    tiles = nmb * len(pr["lens_q"]) * hq
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    desc_q = _desc(q.view(1, total, hq * d), [1, 64, q_box])
    desc_k = _desc(kp.view(1, kp.shape[1], hkv * d), [1, block_n, q_box])
    desc_v = _desc(vp.view(1, vp.shape[1], hkv * dv), [1, block_n, dv])
    desc_o = _desc(out.view(1, total, hq * dv), [1, 64, dv])
    flags = FLAG_WRITE_LSE | FLAG_VARLEN | (FLAG_O_TMA if d == dv else 0) | (FLAG_REVERSE if causal and window_left < 0
                                                                             else 0)
    scale = 1.0 / math.sqrt(d)
    floats = torch.zeros(2, device=q.device, dtype=torch.float32)
    args = (q, kp, vp, out, lse, pr["cu_q"], cu_k, floats, floats, floats,
            0, q.stride(0), q.stride(1), 0, kp.stride(1), kp.stride(2), 0, vp.stride(1), vp.stride(2),
            0, out.stride(0), out.stride(1), 0, lse.stride(0), 0,
            max_q, max_k, hq, hq // hkv, nmb, d // 8, dv // 8, window_left, 0 if causal else -1, flags,
            scale * LOG2E, 0.0, 0.0, 0, 1.0, desc_q, desc_k, desc_v, desc_o, tiles)
    kw = dict(HEAD_DIM_QK=d, HEAD_DIM_V=dv, BLOCK_M=128, BLOCK_N=block_n, STAGES=2, EXTRAS=False, PRODUCER_REGS=24,
              CONSUMER_REGS=240, num_warps=4, maxnreg=168)
    return lambda: attn_fwd_hopper[(min(tiles, sms), )](*args, **kw)


def check(d, page, dtype, causal, window_left, leftpad, lens_k, lens_q, hq=8, hkv=2, grid=None, box=16, dv=None):
    pr = make_problem(lens_k, lens_q, hq, hkv, d, page, dtype, leftpad=leftpad, seed=d + page, dv=dv)
    ref, ref_lse = reference(pr, causal, window_left)
    out = torch.full((pr["q"].shape[0], hq, pr["dv"]), float("nan"), device="cuda", dtype=dtype)
    lse = torch.full((hq, pr["q"].shape[0]), float("nan"), device="cuda", dtype=torch.float32)
    launch_paged(pr, out, lse, causal, window_left, grid, box)()
    torch.cuda.synchronize()
    err = (out.float() - ref).abs().max().item()
    fin = torch.isfinite(ref_lse)
    lerr = (lse[fin] - ref_lse[fin]).abs().max().item() if fin.any() else 0.0
    lse_inf_ok = bool((lse[~fin] == float("-inf")).all()) if (~fin).any() else True
    bad = not (err <= 2e-2 and lerr <= 1e-3 and lse_inf_ok)
    print(f"check d={d}v{pr['dv']} page={page} box={box} causal={int(causal)} window={window_left} leftpad={leftpad} grid={grid}: "
          f"max|out-ref| {err:.2e} max|lse-ref| {lerr:.2e}" + ("  FAIL" if bad else ""), flush=True)
    return not bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128", help="e.g. 64,128,256,192v128")
    ap.add_argument("--page-sizes", default="16,64,256")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--boxes", default="16", help="box rows to try (each at most the page size)")
    ap.add_argument("--cases", default="4096:256,4096:1024,4096:4096,16384:256,16384:1024,16384:4096")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    boxes = [int(x) for x in args.boxes.split(",")]
    ok = True
    dims = [(int(x.split("v")[0]), int(x.split("v")[-1])) for x in args.head_dims.split(",")]
    for d, dv in dims:
        for page in (int(x) for x in args.page_sizes.split(",")):
            # lengths: not multiples of 16, a request shorter than its queries' tile, one of 0 new... (>= 1)
            lens_k = [1000, 77, 3001, 16, 513]
            lens_q = [300, 77, 129, 1, 200]
            for box in (b for b in boxes if b <= page):
                for causal in (True, False):
                    ok &= check(d, page, dtype, causal, -1, None, lens_k, lens_q, box=box, dv=dv)
                ok &= check(d, page, dtype, True, 100, None, lens_k, lens_q, box=box, dv=dv)
                ok &= check(d, page, dtype, True, -1, [0, 5, 2000, 16, 600], lens_k, lens_q, box=box, dv=dv)
                ok &= check(d, page, dtype, True, -1, None, lens_k, lens_q, grid=7, box=box, dv=dv)
    print("ALL CHECKS PASS" if ok else "SOME CHECKS FAILED", flush=True)
    if args.no_bench:
        return
    rows = []
    for d, dv in dims:
        hq, hkv = (32, 8) if d >= 128 else (64, 16)
        for case in args.cases.split(","):
                cache, chunk = (int(x) for x in case.split(":"))
                b = 4
                lens_k, lens_q = [cache] * b, [chunk] * b
                res = {}
                for page in (int(x) for x in args.page_sizes.split(",")):
                    pr = make_problem(lens_k, lens_q, hq, hkv, d, page, dtype, seed=1, dv=dv)
                    out = torch.empty(pr["q"].shape[0], hq, dv, device="cuda", dtype=dtype)
                    lse = torch.empty(hq, pr["q"].shape[0], device="cuda", dtype=torch.float32)
                    for box in (b for b in boxes if b <= page):
                        res[f"p{page}b{box}"] = triton.testing.do_bench(launch_paged(pr, out, lse, True, box=box),
                                                                        warmup=50, rep=200)
                kp = torch.cat(pr["keys"], 0)[None]
                vp = torch.cat(pr["values"], 0)[None]
                cu_k = torch.tensor([0] + list(itertools.accumulate(lens_k)), dtype=torch.int32, device="cuda")
                res["dense"] = triton.testing.do_bench(launch_dense(pr, kp, vp, cu_k, out, lse, True), warmup=50, rep=200)
                pairs = sum(lq * lk - lq * (lq - 1) / 2 for lk, lq in zip(lens_k, lens_q))
                flops = 2.0 * hq * (d + dv) * pairs
                line = f"d={d}v{dv} cache={cache} chunk={chunk}:"
                for k, ms in res.items():
                    line += f"  {k} {flops / ms / 1e9:.0f}" + (f" ({res['dense'] / ms:.2f}x)" if k != "dense" else "")
                print(line, flush=True)
                rows.append(dict(d=d, cache=cache, chunk=chunk, tflops={k: flops / ms / 1e9 for k, ms in res.items()}))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "paged_prefill_jit.json"), "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

"""Benchmark of aotk's decoding (aotk_attn_decode) against torch SDPA's backends, on the GPU machine.

    python3 bench/bench_decode.py --package-dir build/python --out-dir bench/results [--quick]

Issue 13's rows and bars: bf16, head_dim 128, one new token per request (and a 4-token speculative
step), every request at the full cache length L so that the anchors, which take no per-request
lengths, do the same work. GQA 32/8 over batch 1-256 x cache 1k-128k; GQA 64/8 and MQA (32/1) where
batch x L >= 64k tokens. Implementations, in one process on the same inputs:
  aotk           aotk_attn_decode over a contiguous cache (the split count aotk chooses, and its merge)
  aotk-paged16   the same cache as 16-key pages in shuffled order (block_table)
  aotk-paged256  ... as 256-key pages
  aotk-prefill   the prefill kernel on the same problem (aotk_attn_fwd: how 0.3 decoded), issue rows only
  sdpa-flash     torch SDPA's flash backend, enable_gqa=True, q [b, hq, s, d] and the cache viewed
  sdpa-cudnn     [b, hkv, L, d] (a transpose, no copy): the anchors of notes/anchors.md
  copy           a device-to-device copy of 2 GiB (torch's copy_), the bandwidth anchor: its GB/s count
                 the bytes read and the bytes written
Each aotk column is checked against SDPA's output before it is timed. Every implementation is timed
by CUDA-graph replay (triton.testing.do_bench_cudagraph, median), as an inference engine runs a
decoding step, so that no column pays Python's launch overhead. GB/s of a decode counts the K and V
bytes read once (batch x L x heads_kv x d x 2 tensors x 2 bytes).

Prints a table and the bars' verdicts, and writes <out-dir>/<gpu>-<date>-decode.json: one row per
(shape, implementation) with "op": "decode", "impl", "page_size" (0 for contiguous), "ms" and "gbps",
and one "impl": "copy" row. A file already there from the same day keeps the rows of ops this run did
not run (--prefill after a full run keeps the decoding rows).

The paged prefill (chunked prefill over a cache: flash_attn_varlen_func with block_table, which runs
aotk_attn_decode with packed queries), rows "op": "prefill" (--prefill runs only these): bf16, d128,
GQA 32/8, b requests each with a cache of L keys whose last C are the chunk's tokens (causal,
bottom-right), for b x C x L in PREFILL_ROWS (chunks of 16 and 48 tokens too: below 64 queries, where 4
requests x 32 heads fit one wave of the sm_90 forward's tiles; and 1 request of 128 and 256 tokens, whose
few tiles the paged prefill splits across the keys). Implementations, checked against each
other and timed as above:
  aotk-paged16, aotk-paged256   the paged prefill over 16- and 256-key pages in shuffled order
  aotk-varlen                   aotk's prefill kernel (flash_attn_varlen_func without block_table: the
                                sm_90 forward) on the same keys stored contiguously
"tflops" counts the score pairs computed, 4 x pairs x heads_q x d; "speed_vs_varlen" is the prefill
kernel's time over the paged one's.
"""
import argparse
import datetime
import json
import math
import os
import sys

HEAD_DIM = 128
# (batch, seqlen_k, heads_q, heads_kv, seqlen_q)
GQA_GRID = [(b, L, 32, 8, 1) for b, L in (
    (1, 1024), (1, 4096), (1, 16384), (1, 32768), (1, 131072),
    (4, 1024), (4, 4096), (4, 16384), (4, 32768), (4, 131072),
    (16, 1024), (16, 4096), (16, 16384), (16, 32768), (16, 131072),
    (64, 1024), (64, 4096), (64, 16384), (64, 32768),
    (256, 1024), (256, 4096), (256, 8192))]
OTHER_ROWS = [(b, L, hq, hkv, 1) for hq, hkv in ((64, 8), (32, 1)) for b, L in (
    (1, 131072), (8, 8192), (16, 32768), (64, 4096))] + [(16, 32768, 32, 8, 4), (64, 4096, 32, 8, 4)]
ISSUE_ROWS = {(64, 4096, 32, 8, 1), (16, 32768, 32, 8, 1), (2, 131072, 32, 8, 1), (16, 32768, 32, 8, 4)}
ROWS = GQA_GRID + [(2, 131072, 32, 8, 1)] + OTHER_ROWS
QUICK_ROWS = [(64, 4096, 32, 8, 1), (2, 131072, 32, 8, 1), (1, 131072, 32, 1, 1)]
PAGE_SIZES = (16, 256)
# (chunk tokens C, cache keys L including the chunk), 4 requests, GQA 32/8.
# (requests, chunk, keys): 4 requests, and 1 request of 128 and 256 tokens, whose 32 and 64 tiles the paged
# prefill splits across the keys.
PREFILL_ROWS = [(4, 16, 4096), (4, 16, 16384), (4, 48, 16384), (4, 256, 4096), (4, 1024, 4096), (4, 1024, 16384),
                (4, 4096, 16384), (1, 128, 4096), (1, 128, 16384), (1, 256, 16384)]
COPY_BYTES = 2 << 30


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package-dir", required=True, help="directory holding the aotk package (build/python)")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--quick", action="store_true", help="three rows only")
    ap.add_argument("--prefill", action="store_true", help="only the paged-prefill rows")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.package_dir))
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import aotk  # noqa: F401  (registers torch.ops.aotk.*)

    dev = "cuda"
    gpu = torch.cuda.get_device_name()

    def bench(fn):
        fn()
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")

    results = []
    print(f"{gpu}; aotk {aotk.version()}; torch {torch.__version__}", flush=True)
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t_copy = bench(lambda: dst.copy_(src))
    copy_gbps = 2 * COPY_BYTES / (t_copy * 1e-3) / 1e9
    del src, dst
    print(f"copy: {COPY_BYTES >> 30} GiB in {t_copy * 1e3:.1f} us, {copy_gbps:.0f} GB/s (read + written)", flush=True)
    results.append({"op": "decode", "impl": "copy", "bytes": COPY_BYTES, "ms": t_copy, "gbps": copy_gbps,
                    "note": "device-to-device copy_; gbps counts the bytes read and the bytes written"})
    names = ("aotk", "aotk-paged16", "aotk-paged256", "aotk-prefill", "sdpa-flash", "sdpa-cudnn")
    print(f"{'batch':>5} {'L':>7} {'hq/hkv':>6} {'sq':>2} | " + " ".join(f"{n:>13}" for n in names) +
          " | aotk GB/s  /cudnn /flash  paged16/256 vs contiguous", flush=True)
    for batch, seqlen_k, heads_q, heads_kv, seqlen_q in ([] if args.prefill else QUICK_ROWS if args.quick else ROWS):
        torch.manual_seed(0)
        q = torch.randn(batch, seqlen_q, heads_q, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, seqlen_k, heads_kv, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, seqlen_k, heads_kv, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        lens = torch.full((batch,), seqlen_k, dtype=torch.int32, device=dev)
        scale = 1.0 / math.sqrt(HEAD_DIM)
        causal = seqlen_q > 1  # bottom-right: the step's tokens see the cache and their predecessors

        impls = {
            "aotk": lambda: torch.ops.aotk.decode(q, k, v, lens, None, None, None, scale, causal, -1, -1, 0.0, 0)[0],
        }
        caches = {}
        for page_size in PAGE_SIZES:
            caches[page_size] = shuffled_pages(torch, k, v, batch, seqlen_k, page_size)
            impls[f"aotk-paged{page_size}"] = (lambda c=caches[page_size]: torch.ops.aotk.decode(
                q, c[0], c[1], lens, c[2], None, None, scale, causal, -1, -1, 0.0, 0)[0])
        if (batch, seqlen_k, heads_q, heads_kv, seqlen_q) in ISSUE_ROWS:
            impls["aotk-prefill"] = lambda: aotk.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        mask = bottom_right_mask(torch, seqlen_q, seqlen_k, dev) if causal else None
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale,
                                                          enable_gqa=True).transpose(1, 2)
            impls[name] = run
        reference = None
        times, notes = {}, {}
        for name in ("sdpa-cudnn", "sdpa-flash"):
            try:
                reference = impls[name]().float()
                break
            except RuntimeError as e:
                notes[name] = str(e).splitlines()[0][:120]
        for name, fn in impls.items():
            try:
                out = fn()
                if reference is not None and name.startswith("aotk"):
                    err = (out.float() - reference).abs().max().item()
                    if not err < 2e-2:
                        notes[name] = f"max |aotk - SDPA| = {err}: not timed"
                        continue
                times[name] = bench(fn)
            except RuntimeError as e:
                notes[name] = str(e).splitlines()[0][:120]
        kv_bytes = batch * seqlen_k * heads_kv * HEAD_DIM * 2 * 2
        gbps = {n: kv_bytes / (t * 1e-3) / 1e9 for n, t in times.items()}

        def ratio(a, b):
            return times[b] / times[a] if a in times and b in times else float("nan")
        print(f"{batch:>5} {seqlen_k:>7} {heads_q:>3}/{heads_kv:<2} {seqlen_q:>2} | " +
              " ".join(f"{times[n] * 1e3:>10.1f} us" if n in times else f"{'-':>13}" for n in names) +
              f" | {gbps.get('aotk', float('nan')):>9.0f}  {ratio('aotk', 'sdpa-cudnn'):>6.2f} "
              f"{ratio('aotk', 'sdpa-flash'):>6.2f}  {ratio('aotk-paged16', 'aotk'):>6.2f} "
              f"{ratio('aotk-paged256', 'aotk'):>5.2f}", flush=True)
        for name, text in notes.items():
            print(f"  note: {name}: {text}")
        # Each aotk column's own query: its kernel (the paged ones' families differ) and split count.
        infos, keep_alive = {}, []
        for name in times:
            if name == "aotk" or (name.startswith("aotk-paged") and int(name[10:]) in caches):
                kc, vc, table = (k, v, None) if name == "aotk" else caches[int(name[10:])]
                params, _out = _decode_params_for_query(q, kc, vc, lens, scale, causal, table)
                keep_alive.append((params, _out))
                infos[name] = aotk._capi.library().query(aotk._capi.AOTK_OP_DECODE, params)
        shape = {"batch": batch, "seqlen_k": seqlen_k, "seqlen_q": seqlen_q, "heads_q": heads_q, "heads_kv": heads_kv,
                 "head_dim": HEAD_DIM, "dtype": "bf16", "causal": causal}
        for name, t in times.items():
            row = {"op": "decode", "impl": name, **shape, "page_size": int(name[10:]) if "paged" in name else 0,
                   "ms": t, "gbps": gbps[name]}
            if name in infos:
                row.update({"num_splits": int(infos[name].num_splits), "kernel": infos[name].kernel_name.decode()})
            if name.startswith("aotk") and name != "aotk-prefill":
                for anchor in ("sdpa-cudnn", "sdpa-flash"):
                    if anchor in times:
                        row[f"speed_vs_{anchor[5:]}"] = times[anchor] / t
                if name != "aotk" and "aotk" in times:
                    row["speed_vs_contiguous"] = times["aotk"] / t
            results.append(row)
        for name, text in notes.items():
            results.append({"op": "decode", "impl": name, **shape, "note": text})
        del q, k, v, caches, impls
        torch.cuda.empty_cache()
    results += prefill_rows(torch, aotk, bench, PREFILL_ROWS[:1] if args.quick else PREFILL_ROWS)
    verdicts = bars(results, copy_gbps)
    for line in verdicts:
        print(line)
    os.makedirs(args.out_dir, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in gpu.lower()).strip("-")
    path = os.path.join(args.out_dir, f"{slug}-{datetime.date.today().isoformat()}-decode.json")
    rows = kept_rows(path, {"prefill"} if args.prefill else {"decode", "prefill"}) + results
    with open(path, "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "aotk": aotk.version(), "bars": bars(rows, copy_gbps),
                   "rows": rows}, f, indent=1)
    print(f"wrote {path} ({len(results)} rows from this run, {len(rows)} in the file)")


def kept_rows(path, ops_run):
    """The rows of a file already at `path` (same GPU, same day) that this run does not replace: those of
    ops it did not run (--prefill after a full run keeps the decoding rows). The copy row is measured by
    every run, so the old one goes."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        old = json.load(f).get("rows", [])
    return [r for r in old if r.get("op") not in ops_run and r.get("impl") != "copy"]


def bottom_right_mask(torch, seqlen_q, seqlen_k, device):
    """SDPA's boolean mask for a step of seqlen_q tokens at the end of seqlen_k keys, causal bottom-right
    (SDPA's is_causal is top-left): token i sees key j <= i + seqlen_k - seqlen_q."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    return j <= i + seqlen_k - seqlen_q


def shuffled_pages(torch, k, v, batch, seqlen_k, page_size):
    """The caches k, v (batch x seqlen_k keys, request by request) as pages of page_size keys in shuffled
    order: (k pages, v pages, block_table int32 [batch, seqlen_k / page_size])."""
    heads_kv, head_dim = k.shape[-2], k.shape[-1]
    pages = batch * seqlen_k // page_size
    order = torch.randperm(pages, device=k.device)
    kp = torch.empty(pages, page_size, heads_kv, head_dim, device=k.device, dtype=k.dtype)
    vp = torch.empty_like(kp)
    kp[order] = k.reshape(pages, page_size, heads_kv, head_dim)
    vp[order] = v.reshape(pages, page_size, heads_kv, head_dim)
    return kp, vp, order.to(torch.int32).view(batch, seqlen_k // page_size).contiguous()


def prefill_rows(torch, aotk, bench, rows):
    """The paged prefill against aotk's prefill kernel on the same keys (see the module's docstring)."""
    dev, heads_q, heads_kv = "cuda", 32, 8
    names = ("aotk-varlen", "aotk-paged16", "aotk-paged256")
    print(f"paged prefill: GQA {heads_q}/{heads_kv}, d {HEAD_DIM}, bf16, causal bottom-right")
    print(f"{'b':>2} {'chunk':>6} {'L':>6} | " + " ".join(f"{n:>14}" for n in names) +
          " | TFLOP/s: varlen paged16 paged256 | paged16/256 vs varlen", flush=True)
    results = []
    for b, chunk, seqlen_k in rows:
        torch.manual_seed(0)
        q = torch.randn(b * chunk, heads_q, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b * seqlen_k, heads_kv, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        cu_q = torch.arange(0, b + 1, device=dev, dtype=torch.int32) * chunk
        cu_k = torch.arange(0, b + 1, device=dev, dtype=torch.int32) * seqlen_k
        impls = {"aotk-varlen": lambda: aotk.flash_attn_varlen_func(q, k, v, cu_q, cu_k, chunk, seqlen_k, causal=True)}
        for page_size in PAGE_SIZES:
            kp, vp, table = shuffled_pages(torch, k, v, b, seqlen_k, page_size)
            impls[f"aotk-paged{page_size}"] = (lambda kp=kp, vp=vp, table=table: aotk.flash_attn_varlen_func(
                q, kp, vp, cu_q, cu_k, chunk, seqlen_k, causal=True, block_table=table))
        pairs = b * (chunk * (seqlen_k - chunk) + chunk * (chunk + 1) // 2)
        flops = 4.0 * pairs * heads_q * HEAD_DIM
        reference = impls["aotk-varlen"]().float()
        times, notes = {}, {}
        for name, fn in impls.items():
            try:
                err = (fn().float() - reference).abs().max().item()
                if not err < 2e-2:
                    notes[name] = f"max |{name} - aotk-varlen| = {err}: not timed"
                    continue
                times[name] = bench(fn)
            except RuntimeError as e:
                notes[name] = str(e).splitlines()[0][:120]
        tfl = {n: flops / (t * 1e-3) / 1e12 for n, t in times.items()}

        def ratio(name):
            return times["aotk-varlen"] / times[name] if name in times and "aotk-varlen" in times else float("nan")
        print(f"{b:>2} {chunk:>6} {seqlen_k:>6} | " + " ".join(f"{times[n] * 1e3:>11.1f} us" if n in times else f"{'-':>14}"
                                                   for n in names) +
              " | " + " ".join(f"{tfl.get(n, float('nan')):>6.0f}" for n in names) +
              f" | {ratio('aotk-paged16'):>6.2f} {ratio('aotk-paged256'):>5.2f}", flush=True)
        for name, text in notes.items():
            print(f"  note: {name}: {text}")
        shape = {"batch": b, "seqlen_q": chunk, "seqlen_k": seqlen_k, "heads_q": heads_q, "heads_kv": heads_kv,
                 "head_dim": HEAD_DIM, "dtype": "bf16", "causal": True, "pairs": pairs}
        for name, t in times.items():
            row = {"op": "prefill", "impl": name, **shape, "page_size": int(name[10:]) if "paged" in name else 0,
                   "ms": t, "tflops": tfl[name]}
            if name != "aotk-varlen" and "aotk-varlen" in times:
                row["speed_vs_varlen"] = times["aotk-varlen"] / t
            results.append(row)
        for name, text in notes.items():
            results.append({"op": "prefill", "impl": name, **shape, "note": text})
        del q, k, v, impls, reference
        torch.cuda.empty_cache()
    return results


def bars(results, copy_gbps):
    """Issue 13's three bars over the rows of this run, as lines of text."""
    rows = [r for r in results if r.get("op") == "decode" and r.get("impl", "").startswith("aotk") and "ms" in r
            and r["impl"] != "aotk-prefill"]
    lines = []
    big = [r for r in rows if r["batch"] * r["seqlen_k"] >= 65536 and r["seqlen_q"] == 1]
    if big:
        worst = min(big, key=lambda r: r["gbps"])
        ok = all(r["gbps"] >= 0.85 * copy_gbps for r in big)
        lines.append(f"bandwidth (batch x L >= 64k, every layout): {len(big)} rows, worst {worst['gbps']:.0f} GB/s = "
                     f"{worst['gbps'] / copy_gbps:.2f} of the copy's {copy_gbps:.0f} ({_label(worst)}): "
                     f"{'PASS' if ok else 'FAIL'} (bar 0.85)")
    for anchor in ("cudnn", "flash"):
        key = f"speed_vs_{anchor}"
        contiguous = [r for r in rows if r["impl"] == "aotk" and key in r]
        if contiguous:
            worst = min(contiguous, key=lambda r: r[key])
            gm = math.exp(sum(math.log(r[key]) for r in contiguous) / len(contiguous))
            lines.append(f"contiguous vs SDPA {anchor}: {len(contiguous)} rows, geomean {gm:.2f}, worst {worst[key]:.2f} "
                         f"({_label(worst)}): {'PASS' if worst[key] >= 1.0 else 'FAIL'} (bar 1.0 on every row)")
    paged = [r for r in rows if "speed_vs_contiguous" in r]
    if paged:
        worst = min(paged, key=lambda r: r["speed_vs_contiguous"])
        lines.append(f"paged vs contiguous: {len(paged)} rows, worst {worst['speed_vs_contiguous']:.2f} "
                     f"({_label(worst)}): {'PASS' if worst['speed_vs_contiguous'] >= 1 / 1.1 else 'FAIL'} "
                     f"(bar: within 10%)")
    return lines


def _label(r):
    return (f"{r['impl']} batch {r['batch']} L {r['seqlen_k']} {r['heads_q']}/{r['heads_kv']}"
            + (f" sq {r['seqlen_q']}" if r["seqlen_q"] > 1 else ""))


def _decode_params_for_query(q, k, v, lens, scale, causal, table=None):
    """(aotk_decode_params of a column: contiguous, or paged with `table`; the out it describes: keep both
    alive), to ask aotk_decode_query its kernel and split count."""
    from aotk import _capi, _torch_ops
    p = _capi.decode_params()
    out = q.new_empty(q.shape)
    p.q, p.k_cache, p.v_cache = _torch_ops._describe(q), _torch_ops._describe(k), _torch_ops._describe(v)
    p.cache_seqlens, p.out = _torch_ops._describe(lens), _torch_ops._describe(out)
    p.softmax_scale = scale
    p.causal = 1 if causal else 0
    if table is not None:
        p.block_table = _torch_ops._describe(table)
    return p, out


if __name__ == "__main__":
    main()

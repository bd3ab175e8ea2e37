"""Benchmark of aotk's decoding (aotk_attn_decode) against torch SDPA's backends, on the GPU machine.

    python3 bench/bench_decode.py --package-dir build/python --out-dir bench/results [--quick]

Issue 13's rows: bf16, GQA 32 query heads over 8 kv heads, head_dim 128, one new token per request
(and a 4-token speculative step), every request at the full cache length L so that the anchors, which
take no per-request lengths, do the same work: batch 64 x 4k, 16 x 32k, 2 x 128k. Columns, in one
process on the same inputs:
  aotk           aotk_attn_decode over a contiguous cache (the split count aotk chooses)
  aotk-paged16   the same cache as 16-token pages in shuffled order (block_table)
  aotk-paged256  ... as 256-token pages
  aotk-prefill   the prefill kernel on the same problem (aotk_attn_fwd: what 0.3 decoded with)
  sdpa-flash     torch SDPA's flash backend, enable_gqa=True, q [b, hq, s, d] and the cache viewed
  sdpa-cudnn     [b, hkv, L, d] (a transpose, no copy): the anchors of notes/anchors.md
Each aotk column is checked against SDPA's output before it is timed. Bandwidth counts the K and V
bytes read once (batch x L x hkv x d x 2 tensors x 2 bytes). Prints a table and writes
<out-dir>/<gpu>-<date>-decode.json.
"""
import argparse
import datetime
import json
import math
import os
import sys

ROWS = [  # (batch, seqlen_k, seqlen_q)
    (64, 4096, 1), (16, 32768, 1), (2, 131072, 1), (8, 8192, 1), (16, 32768, 4),
]
QUICK_ROWS = [(64, 4096, 1), (2, 131072, 1)]
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package-dir", required=True, help="directory holding the aotk package (build/python)")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--quick", action="store_true", help="two rows only")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.package_dir))
    import torch
    import torch.nn.functional as F
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import aotk  # noqa: F401  (registers torch.ops.aotk.*)

    dev = "cuda"
    gpu = torch.cuda.get_device_name()
    results = []
    print(f"{gpu}; aotk {aotk.version()}; torch {torch.__version__}")
    print(f"{'batch':>5} {'L':>7} {'sq':>3} | " + " ".join(f"{n:>14}" for n in
          ("aotk", "aotk-paged16", "aotk-paged256", "aotk-prefill", "sdpa-flash", "sdpa-cudnn")) + " | aotk/cudnn")
    for batch, seqlen_k, seqlen_q in (QUICK_ROWS if args.quick else ROWS):
        torch.manual_seed(0)
        q = torch.randn(batch, seqlen_q, HEADS_Q, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, seqlen_k, HEADS_KV, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, seqlen_k, HEADS_KV, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        lens = torch.full((batch,), seqlen_k, dtype=torch.int32, device=dev)
        scale = 1.0 / math.sqrt(HEAD_DIM)
        causal = seqlen_q > 1  # bottom-right: the step's tokens see the cache and their predecessors

        def paged(page_size):
            pages = batch * seqlen_k // page_size
            order = torch.randperm(pages, device=dev).to(torch.int32)
            kp = torch.empty(pages, page_size, HEADS_KV, HEAD_DIM, device=dev, dtype=torch.bfloat16)
            vp = torch.empty_like(kp)
            kp[order.long()] = k.reshape(pages, page_size, HEADS_KV, HEAD_DIM)
            vp[order.long()] = v.reshape(pages, page_size, HEADS_KV, HEAD_DIM)
            return kp, vp, order.view(batch, seqlen_k // page_size).contiguous()

        impls = {
            "aotk": lambda: torch.ops.aotk.decode(q, k, v, lens, None, None, None, scale, causal, -1, -1, 0.0, 0)[0],
        }
        for page_size in (16, 256):
            kp, vp, table = paged(page_size)
            impls[f"aotk-paged{page_size}"] = (lambda kp=kp, vp=vp, table=table: torch.ops.aotk.decode(
                q, kp, vp, lens, table, None, None, scale, causal, -1, -1, 0.0, 0)[0])
        impls["aotk-prefill"] = lambda: aotk.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        # SDPA's is_causal is top-left; the bottom-right mask of a step of seqlen_q tokens over L keys is
        # an explicit one (only for seqlen_q > 1; with one token there is no mask).
        mask = None
        if causal:
            i = torch.arange(seqlen_q, device=dev)[:, None]
            j = torch.arange(seqlen_k, device=dev)[None, :]
            mask = j <= i + seqlen_k - seqlen_q
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
                times[name] = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            except RuntimeError as e:
                notes[name] = str(e).splitlines()[0][:120]
        kv_bytes = batch * seqlen_k * HEADS_KV * HEAD_DIM * 2 * 2
        ratio = times["sdpa-cudnn"] / times["aotk"] if "aotk" in times and "sdpa-cudnn" in times else float("nan")
        print(f"{batch:>5} {seqlen_k:>7} {seqlen_q:>3} | " +
              " ".join(f"{times[n] * 1e3:>9.1f} us" if n in times else f"{'-':>14}" for n in impls) +
              f" | {ratio:.2f}", flush=True)
        for name, text in notes.items():
            print(f"  note: {name}: {text}")
        params, _out = _decode_params_for_query(q, k, v, lens, scale, causal)
        info = aotk._capi.library().query(aotk._capi.AOTK_OP_DECODE, params)
        results.append({"op": "decode", "batch": batch, "seqlen_k": seqlen_k, "seqlen_q": seqlen_q,
                        "heads_q": HEADS_Q, "heads_kv": HEADS_KV, "head_dim": HEAD_DIM, "dtype": "bf16",
                        "causal": causal, "ms": times, "tb_per_s": {n: kv_bytes / (t * 1e-3) / 1e12 for n, t in times.items()},
                        "aotk_over_cudnn_speed": ratio, "num_splits": int(info.num_splits),
                        "kernel": info.kernel_name.decode(), "notes": notes})
    os.makedirs(args.out_dir, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in gpu.lower()).strip("-")
    path = os.path.join(args.out_dir, f"{slug}-{datetime.date.today().isoformat()}-decode.json")
    with open(path, "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "aotk": aotk.version(), "rows": results}, f, indent=1)
    print(f"wrote {path}")


def _decode_params_for_query(q, k, v, lens, scale, causal):
    """(aotk_decode_params of the contiguous column, the out it describes: keep both alive), to ask
    aotk_decode_query its split count."""
    from aotk import _capi, _torch_ops
    p = _capi.decode_params()
    out = q.new_empty(q.shape)
    p.q, p.k_cache, p.v_cache = _torch_ops._describe(q), _torch_ops._describe(k), _torch_ops._describe(v)
    p.cache_seqlens, p.out = _torch_ops._describe(lens), _torch_ops._describe(out)
    p.softmax_scale = scale
    p.causal = 1 if causal else 0
    return p, out


if __name__ == "__main__":
    main()

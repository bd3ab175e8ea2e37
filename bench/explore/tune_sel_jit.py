"""Config sweep for kernels/sel_attn.py through Triton's JIT, on the GPU machine.

    python3 bench/explore/tune_sel_jit.py [--tokens 65536] [--kernels fwd,dq,dkdv,index] [--distribution nsa-topk]
        [--lib libaotk.so] [--nsa-path DIR] [--roof] [--spec] [--aot-like] [--max-chunks N]
        [--variant FILE:FWD:DQ] [--dkdv-variant FILE:NAME]

The benchmark's selection problem (heads_q 64, heads_kv 4, d 128, block 64, 16 slots, one sequence; the
blocks drawn as bench_attn.py's index distribution, uniform-causal by default): times each selection
kernel over candidate configs, and checks that every config's output matches the first one's (the first
config is the catalog's). Chooses the catalog's selection configs. Also, on the same tensors: libaotk's
calls (--lib; its out and gradients against the JIT's), the public NSA kernel (--nsa-path), a kernel
that only loads the forward's K/V rows (--roof: the L2's bound), the kernels without the JIT's integer
specializations (--spec one at a time; --aot-like all of them, as the AOT build), and variants of the
kernels from another file with the same parameters (--variant, --dkdv-variant). Not part of the build.
"""
import argparse
import math
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "kernels"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "crosscheck"))  # check_selection
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # aotk_bench
from sel_attn import (sel_bwd_dkdv, sel_bwd_dq, sel_fwd, sel_index_count, sel_index_order, sel_index_scan,  # noqa: E402
                      sel_index_scatter, sel_index_zero)
from check_selection import random_indices  # noqa: E402

# (BLOCK_G, warps, stages) for the forward and dQ; (BLOCK_R, BLOCK_N, warps, stages) for dK/dV;
# (ENTRIES, SORT_TILE, warps of count/scatter, warps of order) for the index passes. The first of each is the catalog's.
GROUP_CONFIGS = [(16, 2, 3)]
DKDV_CONFIGS = [(64, 64, 4, 2)]
INDEX_CONFIGS = [(1024, 8192, 4, 4)]


@triton.jit
def sel_loads_only(K, V, Out, BlockIdx, stride_ks, stride_kh, stride_is, stride_ih, total_q, num_slots,
                   HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # The forward's memory traffic without its math: per (kv head, token), the K and V rows of every valid
    # selected block (causal), summed so that nothing is dead code. The roof the forward cannot beat.
    pid = tl.program_id(0)
    token = pid % total_q
    head_kv = pid // total_q
    offs_n = tl.arange(0, BLOCK_SIZE)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_SIZE, HEAD_DIM], dtype=tl.float32)
    row = BlockIdx + token.to(tl.int64) * stride_is + head_kv * stride_ih
    for slot in range(0, num_slots):
        b = tl.load(row + slot)
        ok = (b >= 0) & (b * BLOCK_SIZE <= token)
        keys = (tl.where(ok, b, 0) * BLOCK_SIZE + offs_n).to(tl.int64)
        ptrs = keys[:, None] * stride_ks + head_kv * stride_kh + offs_d[None, :]
        acc += tl.load(K + ptrs, mask=ok & (offs_n[:, None] >= 0), other=0.0).to(tl.float32)
        acc += tl.load(V + ptrs, mask=ok & (offs_n[:, None] >= 0), other=0.0).to(tl.float32)
    tl.store(Out + pid, tl.sum(tl.sum(acc, 1), 0))


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--kernels", default="fwd,dq,dkdv,index")
    ap.add_argument("--lib", default="", help="also time libaotk's sel_fwd / sel_bwd on the same tensors")
    ap.add_argument("--spec", action="store_true", help="the forward without parts of the JIT's specialization")
    ap.add_argument("--distribution", default="uniform-causal", help="an index distribution of bench_attn.py")
    ap.add_argument("--max-chunks", type=int, default=0, help="override the dK/dV split's chunk limit")
    ap.add_argument("--aot-like", action="store_true", help="no integer specialization, as the AOT build")
    ap.add_argument("--variant", default="", help="PATH:FWD:DQ, a sel_fwd and a sel_bwd_dq with the same parameters")
    ap.add_argument("--dkdv-variant", default="", help="PATH:NAME, a sel_bwd_dkdv with the same parameters to time")
    ap.add_argument("--roof", action="store_true", help="time the forward's loads alone (sel_loads_only)")
    ap.add_argument("--nsa-path", default=None, help="also time the public NSA kernel (bench_attn.py --nsa-path)")
    ap.add_argument("--group-configs", default="", help="GxWxS,...: forward and dQ configs after the catalog's")
    ap.add_argument("--dkdv-configs", default="", help="RxNxWxS,...: dK/dV configs after the catalog's")
    args = ap.parse_args()
    for text, configs in ((args.group_configs, GROUP_CONFIGS), (args.dkdv_configs, DKDV_CONFIGS)):
        configs.extend(tuple(int(x) for x in c.split("x")) for c in text.split(",") if c)
    which = set(args.kernels.split(","))
    global sel_fwd, sel_bwd_dq, sel_bwd_dkdv
    if args.variant:
        import importlib.util
        path, fwd_name, dq_name = args.variant.split(":")
        spec = importlib.util.spec_from_file_location("variants", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sel_fwd, sel_bwd_dq = getattr(module, fwd_name), getattr(module, dq_name)
    if args.aot_like:
        # The AOT build has only the catalog's hints: no integer specialization (the value 1 included).
        for name in ("sel_fwd", "sel_bwd_dq", "sel_bwd_dkdv"):
            fn = globals()[name]
            ints = [a for a in fn.arg_names if a != "group_size" and a.startswith(("num_", "total_", "max_", "group_", "flags", "heads_",
                                                                  "chunk_", "partials_"))]
            globals()[name] = triton.jit(do_not_specialize=ints)(fn.fn)
    dev = "cuda"
    T, hq, hk, d, bs, S = args.tokens, 64, 4, 128, 64, 16
    G = hq // hk
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(T, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(T, hk, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(T, hk, d, device=dev, dtype=torch.bfloat16)
    do = torch.randn(T, hq, d, device=dev, dtype=torch.bfloat16)
    if args.distribution == "uniform-causal":
        idx = random_indices(T, T, hk, S, bs, gen, dev, junk=False)
    else:
        import aotk_bench.selection as bench_selection
        idx = torch.tensor(bench_selection.sel_nsa_block_rows(args.distribution, T, hk, S, bs, 1), dtype=torch.int32,
                           device=dev)
    print(f"{T} tokens, {args.distribution}: {(idx >= 0).float().sum(-1).mean().item():.2f} valid slots per row",
          flush=True)
    o = torch.empty_like(q)
    lse = torch.empty(T, hq, device=dev)
    scale = 1 / math.sqrt(d)
    c = scale * 1.4426950408889634
    dummy = torch.empty(1, device=dev, dtype=torch.int32)
    flags = 1  # write lse; one sequence (no cu_seqlens)

    def fwd(cfg):
        bg, w, s = cfg
        chunks = triton.cdiv(G, bg)
        sel_fwd[(hk * T * chunks,)](q, k, v, o, lse, dummy, dummy, idx, dummy, q.stride(0), q.stride(1), k.stride(0),
                                    k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1), lse.stride(0),
                                    lse.stride(1), idx.stride(0), idx.stride(1), 0, 0, 1, T, T, T, G, chunks, S, flags,
                                    c, HEAD_DIM_QK0=d, HEAD_DIM_QK1=0, HEAD_DIM_V=d, BLOCK_G=bg, BLOCK_SIZE=bs,
                                    num_warps=w, num_stages=s)

    fwd(GROUP_CONFIGS[0])
    torch.cuda.synchronize()
    o_ref, lse_ref = o.clone(), lse.clone()
    if args.spec:
        # Which of the JIT's integer specializations (divisibility by 16, the value 1) the AOT build,
        # which has only the catalog's hints, lacks: the forward with some of them turned off.
        plain = sel_fwd  # noqa
        ints = ["num_seqs", "total_q", "total_k", "max_seqlen_k", "group_size", "group_chunks", "num_slots", "flags"]
        unhinted_strides = ["stride_ls", "stride_lh", "stride_is", "stride_ih", "stride_cs", "stride_ch"]
        for name, off in (("all ints", ints + unhinted_strides), ("sizes", ints), ("index/lse strides", unhinted_strides),
                          ("group_size", ["group_size"]), ("flags", ["flags"]),
                          ("sizes but group_size", [i for i in ints if i != "group_size"]),
                          ("sizes but num_slots and group_size", [i for i in ints if i not in ("group_size", "num_slots")]),
                          ("num_slots", ["num_slots"]), ("group_chunks", ["group_chunks"]),
                          ("lengths", ["total_q", "total_k", "max_seqlen_k"]), ("num_seqs", ["num_seqs"])):
            sel_fwd = triton.jit(do_not_specialize=off)(plain.fn)
            ms = bench(lambda: fwd(GROUP_CONFIGS[0]))
            print(f"fwd without the JIT's specialization of {name}: {ms:.3f} ms", flush=True)
        sel_fwd = plain
    lib_ref = None
    if args.lib:
        import ctypes
        import check_selection as cs
        lib = cs.load(args.lib)
        t = {"q": q, "k": k, "v": v, "out": torch.empty_like(q), "lse": torch.empty_like(lse), "block_idx": idx,
             "block_size": bs, "dout": do, "dq": torch.empty_like(q), "dk": torch.empty_like(k),
             "dv": torch.empty_like(v)}
        p = cs.sel_params(t)
        info = cs.ba.AotkKernelInfo()
        info.struct_size = ctypes.sizeof(info)
        lib.check(lib.lib.aotk_sel_query(4, ctypes.byref(p), ctypes.byref(info)), "aotk_sel_query")
        ws = torch.empty(info.workspace_bytes, device=dev, dtype=torch.uint8)
        stream = torch.cuda.current_stream().cuda_stream
        aot_fwd = bench(lambda: lib.lib.aotk_sel_fwd(ctypes.byref(p), stream))
        aot_bwd = bench(lambda: lib.lib.aotk_sel_bwd(ctypes.byref(p), ws.data_ptr(), info.workspace_bytes, stream))
        lib_ref = t
        print(f"libaotk: sel_fwd {aot_fwd:.3f} ms, sel_bwd {aot_bwd:.3f} ms; the JIT's out vs libaotk's: max diff "
              f"{(t['out'].float() - o_ref.float()).abs().max().item():.3g}, lse max diff "
              f"{(t['lse'] - lse).abs().nan_to_num().max().item():.3g}, finite {bool(o_ref.isfinite().all())}",
              flush=True)
    if args.roof:
        sink = torch.empty(hk * T, device=dev)
        for w in (2, 4):
            ms = bench(lambda: sel_loads_only[(hk * T,)](k, v, sink, idx, k.stride(0), k.stride(1), idx.stride(0),
                                                         idx.stride(1), T, S, HEAD_DIM=d, BLOCK_SIZE=bs, num_warps=w))
            valid = ((idx >= 0) & (idx * bs <= torch.arange(T, device=dev)[:, None, None])).sum().item()
            print(f"loads only ({w} warps): {ms:.3f} ms, {valid * bs * d * 2 * 2 / ms / 1e9:.2f} TB/s of K/V rows "
                  f"({valid} valid slots)", flush=True)
    if args.nsa_path:
        import aotk_bench.selection as bench_selection
        nsa = bench_selection.load_public_nsa(args.nsa_path)
        cu = torch.tensor([0, T], dtype=torch.int32, device=dev)
        topk_idx = idx.permute(1, 0, 2).contiguous()
        qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        out = nsa(qg, kg, vg, topk_idx, bs, cu)
        print(f"public NSA: out rel diff {((out.float() - o_ref.float()).norm() / o_ref.float().norm()).item():.2e}, "
              f"fwd {bench(lambda: nsa(qg, kg, vg, topk_idx, bs, cu)):.3f} ms, bwd "
              f"{bench(lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)):.3f} ms", flush=True)
        del out, qg, kg, vg
    if "fwd" in which:
        for cfg in GROUP_CONFIGS:
            o.zero_()
            ms = bench(lambda: fwd(cfg))
            err = (o.float() - o_ref.float()).abs().max().item()
            print(f"fwd  {cfg}: {ms:7.3f} ms  max diff vs first {err:.2e}", flush=True)
        fwd(GROUP_CONFIGS[0])

    delta = torch.empty(T, hq, device=dev)
    dq = torch.empty_like(q)
    compact = torch.empty(T, hk, S, device=dev, dtype=torch.int32)

    def dq_run(cfg):
        bg, w, s = cfg
        chunks = triton.cdiv(G, bg)
        sel_bwd_dq[(hk * T * chunks,)](q, k, v, o, do, lse, dq, delta, dummy, dummy, idx, dummy, compact, q.stride(0),
                                       q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0),
                                       o.stride(1), do.stride(0), do.stride(1), dq.stride(0), dq.stride(1),
                                       lse.stride(0), lse.stride(1), idx.stride(0), idx.stride(1), 0, 0, 1, T, T, T,
                                       hq, G, chunks, S, 0, c, scale, HEAD_DIM_QK0=d, HEAD_DIM_QK1=0, HEAD_DIM_V=d,
                                       BLOCK_G=bg, BLOCK_SIZE=bs, num_warps=w, num_stages=s)

    dq_run(GROUP_CONFIGS[0])
    torch.cuda.synchronize()
    dq_ref = dq.clone()
    if "dq" in which:
        for cfg in GROUP_CONFIGS:
            ms = bench(lambda: dq_run(cfg))
            err = (dq.float() - dq_ref.float()).abs().max().item()
            print(f"dq   {cfg}: {ms:7.3f} ms  max diff vs first {err:.2e}", flush=True)
        dq_run(GROUP_CONFIGS[0])

    blocks_per_seq = triton.cdiv(T, bs)
    stride_offsets = (blocks_per_seq + 1 + 3) // 4 * 4
    offsets = torch.zeros(hk, stride_offsets, device=dev, dtype=torch.int32)
    cursors = torch.zeros(hk, stride_offsets, device=dev, dtype=torch.int32)
    tokens = torch.full((hk, T * S), -7, device=dev, dtype=torch.int32)
    # The dK/dV split of long lists, as src/sel/aotk_sel.c sizes it.
    chunk_tokens = max(triton.cdiv(4096, G), triton.cdiv(hk * T * S, 512))
    max_chunks = args.max_chunks or min(16, triton.cdiv(T, chunk_tokens))
    partials_per_head = 2 * T * S // chunk_tokens + 1
    chunks_base = torch.zeros(hk, stride_offsets, device=dev, dtype=torch.int32)
    print(f"dK/dV chunks of {chunk_tokens} tokens, at most {max_chunks} per list, {partials_per_head} partial records "
          f"per kv head", flush=True)
    times = {}

    def index(cfg, timed=False):
        e, tile, w, wo = cfg
        chunks = triton.cdiv(T * S, e)
        steps = [
            ("zero", lambda: sel_index_zero[(triton.cdiv(hk * stride_offsets, 1024),)](offsets, hk * stride_offsets,
                                                                                      BLOCK=1024, num_warps=4)),
            ("count", lambda: sel_index_count[(hk * chunks,)](idx, dummy, dummy, dummy, offsets, idx.stride(0),
                                                              idx.stride(1), 0, 0, stride_offsets, 1, T, T, T, bs, S,
                                                              chunks, 1, 0, ENTRIES=e, num_warps=w)),
            ("scan", lambda: sel_index_scan[(hk,)](offsets, cursors, chunks_base, stride_offsets, blocks_per_seq,
                                                   chunk_tokens, max_chunks, BLOCK=1024, num_warps=4)),
            ("scatter", lambda: sel_index_scatter[(hk * chunks,)](idx, dummy, dummy, dummy, cursors, tokens,
                                                                  idx.stride(0), idx.stride(1), 0, 0, stride_offsets,
                                                                  T * S, 1, T, T, T, bs, S, chunks, 1, 0, ENTRIES=e,
                                                                  num_warps=w)),
            ("order", lambda: sel_index_order[(hk * blocks_per_seq,)](idx, dummy, dummy, dummy, offsets, tokens,
                                                                      idx.stride(0), idx.stride(1), 0, 0,
                                                                      stride_offsets, T * S, 1, T, T, T, bs, S, 0,
                                                                      SORT_TILE=tile, SCAN_TOKENS=256, num_warps=wo)),
        ]
        for name, fn in steps:
            if timed:
                # Each pass timed alone (its inputs are the previous passes' outputs, already in place):
                # zero and count are re-run before the scan so that the state stays consistent.
                torch.cuda.synchronize()
            fn()
        if timed:
            for name, fn in steps:
                def rerun(upto=name):
                    for n2, f2 in steps:
                        f2()
                        if n2 == upto:
                            break
                times[name] = bench(rerun)
            prev = 0.0
            for name, _ in steps:
                t = times[name]
                times[name + "_alone"] = t - prev
                prev = t

    index(INDEX_CONFIGS[0])
    torch.cuda.synchronize()
    offsets_ref, tokens_ref = offsets.clone(), tokens.clone()
    # The index against torch: per head, block b's list is the sorted tokens that selected it.
    for h in range(hk):
        b = idx[:, h].long()
        tok = torch.arange(T, device=dev)[:, None].expand(T, S)
        ok = b >= 0
        key = (b[ok] * T + tok[ok]).sort().values
        n = key.numel()
        good = torch.equal(tokens_ref[h, :n].long(), key % T) and int(offsets_ref[h, blocks_per_seq]) == n
        print(f"index head {h}: {'matches' if good else 'MISMATCH'} torch's sort ({n} entries)", flush=True)
    if "index" in which:
        for cfg in INDEX_CONFIGS:
            index(cfg, timed=True)
            same = torch.equal(offsets, offsets_ref) and torch.equal(tokens, tokens_ref)
            print(f"index {cfg}: total {times['order']:7.3f} ms ("
                  + ", ".join(f"{n} {times[n + '_alone']:.3f}" for n in ("zero", "count", "scan", "scatter", "order"))
                  + f")  {'same' if same else 'DIFFERENT'}", flush=True)
        index(INDEX_CONFIGS[0])

    if args.dkdv_variant:
        import importlib.util
        path, name = args.dkdv_variant.split(":")
        spec = importlib.util.spec_from_file_location("dkdv_variants", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sel_bwd_dkdv = getattr(module, name)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    partials = torch.empty(0, device=dev)

    def dkdv(cfg):
        br, bn, w, s = cfg
        tiles = triton.cdiv(T, bn)
        tiles_per_block = bs // bn
        if partials.numel() < hk * partials_per_head * tiles_per_block * bn * 2 * d:
            partials.resize_(hk * partials_per_head * tiles_per_block * bn * 2 * d)
        # The chunked launch, then the one that adds the split lists' partial records (SEL_FLAG_DKDV_REDUCE).
        for grid, flags in ((hk * tiles * max_chunks, 0), (hk * tiles, 512)):
            sel_bwd_dkdv[(grid,)](q, k, v, do, lse, delta, dk, dv, dummy, dummy, offsets, tokens, chunks_base, partials,
                                  q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                                  do.stride(0), do.stride(1), dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1),
                                  lse.stride(0), lse.stride(1), stride_offsets, T * S, 1, T, T, T, hq, G, tiles,
                                  chunk_tokens, max_chunks, partials_per_head, flags, c, scale, HEAD_DIM_QK0=d,
                                  HEAD_DIM_QK1=0, HEAD_DIM_V=d, BLOCK_R=br, BLOCK_N=bn, BLOCK_SIZE=bs, num_warps=w,
                                  num_stages=s)

    dkdv(DKDV_CONFIGS[0])
    torch.cuda.synchronize()
    dk_ref, dv_ref = dk.clone(), dv.clone()
    dkdv(DKDV_CONFIGS[0])
    print(f"dkdv twice: bitwise equal {torch.equal(dk, dk_ref) and torch.equal(dv, dv_ref)}", flush=True)
    if lib_ref is not None:
        for name, mine in (("dq", dq_ref), ("dk", dk_ref), ("dv", dv_ref)):
            other = lib_ref[name].float()
            print(f"{name} vs libaotk's: max diff {(mine.float() - other).abs().max().item():.3g} (max |ref| "
                  f"{other.abs().max().item():.3g}), bitwise {torch.equal(mine, lib_ref[name])}", flush=True)
    if "dkdv" in which:
        for cfg in DKDV_CONFIGS:
            try:
                ms = bench(lambda: dkdv(cfg))
            except Exception as e:  # a config that does not fit
                print(f"dkdv {cfg}: {type(e).__name__}: {str(e)[:100]}", flush=True)
                continue
            err = max((dk.float() - dk_ref.float()).abs().max().item(), (dv.float() - dv_ref.float()).abs().max().item())
            print(f"dkdv {cfg}: {ms:7.3f} ms  max diff vs first {err:.2e}", flush=True)
    if args.spec:
        plain_dq, plain_dkdv = sel_bwd_dq, sel_bwd_dkdv
        for name, off in (("nothing", []), ("group_size", ["group_size"]), ("heads_q", ["heads_q"]),
                          ("group_size and heads_q", ["group_size", "heads_q"]), ("flags", ["flags"]),
                          ("num_slots", ["num_slots"]), ("sizes", ["num_seqs", "total_q", "total_k", "max_seqlen_k",
                                                                    "num_slots", "flags", "group_chunks"])):
            sel_bwd_dq = triton.jit(do_not_specialize=[o for o in off if o in plain_dq.arg_names])(plain_dq.fn)
            sel_bwd_dkdv = triton.jit(do_not_specialize=[o for o in off if o in plain_dkdv.arg_names])(plain_dkdv.fn)
            ms_dq = bench(lambda: dq_run(GROUP_CONFIGS[0]))
            ms_dkdv = bench(lambda: dkdv(DKDV_CONFIGS[0]))
            print(f"without the JIT's specialization of {name}: dq {ms_dq:.3f} ms, dkdv {ms_dkdv:.3f} ms", flush=True)


if __name__ == "__main__":
    main()

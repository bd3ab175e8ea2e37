"""Config sweep for kernels/sel_attn.py through Triton's JIT, on the GPU machine.

    python3 bench/tune_sel_jit.py [--tokens 65536] [--kernels fwd,dq,dkdv,index]

The benchmark's selection problem (heads_q 64, heads_kv 4, d 128, block 64, 16 random causal blocks
per token, one sequence): times each selection kernel over candidate configs, and checks that every
config's output matches the first one's (the first config is the catalog's). Chooses the catalog's
selection configs. Not part of the build.
"""
import argparse
import math
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels"))
sys.path.insert(0, os.path.dirname(__file__))
from sel_attn import (sel_bwd_dkdv, sel_bwd_dq, sel_fwd, sel_index_count, sel_index_order, sel_index_scan,  # noqa: E402
                      sel_index_scatter, sel_index_zero)
from check_selection import random_indices  # noqa: E402

# (BLOCK_G, warps, stages) for the forward and dQ; (BLOCK_R, BLOCK_N, warps, stages) for dK/dV;
# (ENTRIES, SORT_TILE, warps of count/scatter, warps of order) for the index passes. The first of each is the catalog's.
GROUP_CONFIGS = [(16, 2, 3)]
DKDV_CONFIGS = [(64, 64, 4, 2)]
INDEX_CONFIGS = [(1024, 8192, 4, 4)]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--kernels", default="fwd,dq,dkdv,index")
    ap.add_argument("--lib", default="", help="also time libaotk's sel_fwd / sel_bwd on the same tensors")
    ap.add_argument("--spec", action="store_true", help="the forward without parts of the JIT's specialization")
    args = ap.parse_args()
    which = set(args.kernels.split(","))
    dev = "cuda"
    T, hq, hk, d, bs, S = args.tokens, 64, 4, 128, 64, 16
    G = hq // hk
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(T, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(T, hk, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(T, hk, d, device=dev, dtype=torch.bfloat16)
    do = torch.randn(T, hq, d, device=dev, dtype=torch.bfloat16)
    idx = random_indices(T, T, hk, S, bs, gen, dev, junk=False)
    o = torch.empty_like(q)
    lse = torch.empty(T, hq, device=dev)
    scale = 1 / math.sqrt(d)
    c = scale * 1.4426950408889634
    dummy = torch.empty(1, device=dev, dtype=torch.int32)
    flags = 2  # write lse, dense

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
        global sel_fwd
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
        print(f"libaotk: sel_fwd {aot_fwd:.3f} ms, sel_bwd {aot_bwd:.3f} ms; out matches the JIT's: "
              f"{torch.equal(t['out'], o_ref)}", flush=True)
    if "fwd" in which:
        for cfg in GROUP_CONFIGS:
            o.zero_()
            ms = bench(lambda: fwd(cfg))
            err = (o.float() - o_ref.float()).abs().max().item()
            print(f"fwd  {cfg}: {ms:7.3f} ms  max diff vs first {err:.2e}", flush=True)
        fwd(GROUP_CONFIGS[0])

    delta = torch.empty(T, hq, device=dev)
    dq = torch.empty_like(q)

    def dq_run(cfg):
        bg, w, s = cfg
        chunks = triton.cdiv(G, bg)
        sel_bwd_dq[(hk * T * chunks,)](q, k, v, o, do, lse, dq, delta, dummy, dummy, idx, dummy, q.stride(0),
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
            ("scan", lambda: sel_index_scan[(hk,)](offsets, cursors, stride_offsets, blocks_per_seq, BLOCK=1024,
                                                   num_warps=4)),
            ("scatter", lambda: sel_index_scatter[(hk * chunks,)](idx, dummy, dummy, dummy, cursors, tokens,
                                                                  idx.stride(0), idx.stride(1), 0, 0, stride_offsets,
                                                                  T * S, 1, T, T, T, bs, S, chunks, 1, 0, ENTRIES=e,
                                                                  num_warps=w)),
            ("order", lambda: sel_index_order[(hk * blocks_per_seq,)](idx, dummy, dummy, dummy, offsets, tokens,
                                                                      idx.stride(0), idx.stride(1), 0, 0,
                                                                      stride_offsets, T * S, 1, T, T, T, bs, S, 0,
                                                                      SORT_TILE=tile, ENTRIES=1024, num_warps=wo)),
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

    dk = torch.empty_like(k)
    dv = torch.empty_like(v)

    def dkdv(cfg):
        br, bn, w, s = cfg
        tiles = triton.cdiv(T, bn)
        sel_bwd_dkdv[(hk * tiles,)](q, k, v, do, lse, delta, dk, dv, dummy, dummy, offsets, tokens, q.stride(0),
                                    q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0),
                                    do.stride(1), dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1),
                                    lse.stride(0), lse.stride(1), stride_offsets, T * S, 1, T, T, T, hq, G, tiles, 0,
                                    c, scale, HEAD_DIM_QK0=d, HEAD_DIM_QK1=0, HEAD_DIM_V=d, BLOCK_R=br, BLOCK_N=bn,
                                    BLOCK_SIZE=bs, num_warps=w, num_stages=s)

    dkdv(DKDV_CONFIGS[0])
    torch.cuda.synchronize()
    dk_ref, dv_ref = dk.clone(), dv.clone()
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
        global sel_bwd_dq, sel_bwd_dkdv
        plain_dq, plain_dkdv = sel_bwd_dq, sel_bwd_dkdv
        for name, off in (("nothing", []), ("group_size", ["group_size"]), ("heads_q", ["heads_q"]),
                          ("group_size and heads_q", ["group_size", "heads_q"])):
            sel_bwd_dq = triton.jit(do_not_specialize=[o for o in off])(plain_dq.fn)
            sel_bwd_dkdv = triton.jit(do_not_specialize=[o for o in off])(plain_dkdv.fn)
            ms_dq = bench(lambda: dq_run(GROUP_CONFIGS[0]))
            ms_dkdv = bench(lambda: dkdv(DKDV_CONFIGS[0]))
            print(f"without the JIT's specialization of {name}: dq {ms_dq:.3f} ms, dkdv {ms_dkdv:.3f} ms", flush=True)


if __name__ == "__main__":
    main()

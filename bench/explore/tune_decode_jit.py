"""Config sweep for kernels/attn_decode.py through Triton's JIT, on the GPU machine.

    python3 bench/explore/tune_decode_jit.py [--configs 16x128x4x3,16x64x4x3] [--layouts 0,16,256] [--quick]

Times the decoding kernel and, where it splits, the merge, launched as src/decode/aotk_decode.c launches them
(the same split count, from the same rule; PAGE_MODE 0 for a contiguous cache, 2 for pages holding
whole key blocks, else 1), over issue 13's rows (bf16, head_dim 128, one new token per request, every
request at its full length) on a contiguous cache and on 16- and 256-key pages in shuffled order.
Each config's output is checked against SDPA's before it is timed (CUDA-graph replay, median).
Configs are BLOCK_MxBLOCK_NxwarpsxSTAGES. Not part of the build.
"""
import argparse
import itertools
import math
import os
import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
# AOTK_KERNELS_DIR: another copy of the kernel sources (a variant kept beside the tree's).
KERNELS = os.environ.get("AOTK_KERNELS_DIR") or os.path.join(HERE, "..", "..", "kernels")
sys.path.insert(0, KERNELS)
import attn_decode as K  # noqa: E402

ROWS = [  # (batch, seqlen_k, heads_q, heads_kv)
    (64, 4096, 32, 8), (16, 32768, 32, 8), (2, 131072, 32, 8), (1, 131072, 32, 8), (1, 4096, 32, 8),
    (4, 4096, 32, 8), (16, 1024, 32, 8), (1, 131072, 32, 1), (16, 32768, 32, 1), (8, 8192, 32, 1),
]
QUICK_ROWS = [(64, 4096, 32, 8), (2, 131072, 32, 8)]
FLAG_SPLIT, FLAG_OUT_BF16 = 512, 8192
MERGE_CONFIG = (1, 32, 2, 3, 32)  # codegen/aotk_catalog.py's MERGE_CONFIGS' wide one (BLOCK_P last)
SMS = 132


THRESHOLD = 0.95
ROUNDED = True
# --pdl: the merge as a programmatic dependent launch (kernels that call gdc_launch_dependents in
# attn_decode and gdc_wait in attn_merge, from AOTK_KERNELS_DIR).
PDL = False


def choose_splits(programs, keys, block_n, sms=SMS, min_keys=128):
    """src/decode/aotk_decode.c's choose_splits (sms: the program slots to fill; min_keys: the fewest keys a
    split may have). THRESHOLD: the fraction of the best efficiency taken; ROUNDED: the efficiency of the
    split count that rounding each split to whole key blocks really gives, not of n."""
    if programs >= sms * 4 // 5:
        return 1
    most = min(keys // min_keys, 256, -(-keys // block_n))
    if most <= 1:
        return 1
    eff = {}
    for n in range(1, most + 1):
        real = -(-keys // (-(-(-(-keys // n)) // block_n) * block_n)) if ROUNDED else n
        work = programs * real
        eff[n] = work / (-(-work // sms) * sms)
    best = max(eff.values())
    return next(n for n in range(1, most + 1) if eff[n] >= THRESHOLD * best)


def launcher(q, kc, vc, table, lens, page_size, capacity, cfg, slots=SMS, mcfg=MERGE_CONFIG, min_keys=128,
             rows_per_program=0):
    block_m, block_n, warps, stages = cfg
    batch, seqlen_q, heads_q, d = q.shape
    heads_kv = kc.shape[2]
    group = heads_q // heads_kv
    # rows_per_program > 0: the group's rows in chunks of that many (a kernel that reads its chunk's
    # rows from row_chunks), more programs each reading all its keys; 0: chunks of block_m.
    row_chunks = -(-group * seqlen_q // (rows_per_program or block_m))
    programs = batch * heads_kv * row_chunks
    splits = choose_splits(programs, capacity, block_n, slots, min_keys)
    split_keys = -(-(-(-capacity // splits)) // block_n) * block_n
    splits = -(-capacity // split_keys)
    out = torch.empty_like(q)
    rows = batch * seqlen_q * heads_q
    part = torch.empty(splits * rows * d, device=q.device, dtype=torch.float32)
    lsep = torch.empty(splits * rows, device=q.device, dtype=torch.float32)
    flags = FLAG_SPLIT if splits > 1 else 0
    tbl = table if table is not None else lens
    stride_tb = table.stride(0) if table is not None else 0
    page_mode = 0 if table is None else 2 if page_size % block_n == 0 else 1
    scale_log2 = 1.0 / math.sqrt(d) * 1.4426950408889634

    # A kernel copy from before cache_leftpad (AOTK_KERNELS_DIR) takes one pointer fewer, and one from before
    # packed calls split has no CuSeqlensQ in the merge.
    leftpad = (lens,) if "CacheLeftpad" in K.attn_decode.arg_names else ()
    merge_cu = (lens,) if "CuSeqlensQ" in K.attn_merge.arg_names else ()

    def run():
        K.attn_decode[(programs * splits,)](
            q, kc, vc, out, lsep, tbl, lens, lens, *leftpad, lsep, lsep, part, lsep, q, q,  # CuSeqlensQ, CacheLeftpad,
            # KNew, VNew: unread (no packed queries, padding or appending)
            q.stride(0), q.stride(1), q.stride(2), kc.stride(0), kc.stride(1), kc.stride(2),
            vc.stride(0), vc.stride(1), vc.stride(2), out.stride(0), out.stride(1), out.stride(2),
            0, 0, 0, 0, 0, 0, 0, 0, stride_tb, 0,
            batch, seqlen_q, heads_q, group, capacity, page_size, splits, split_keys, row_chunks, d // 8, d // 8,
            -1, -1, flags, 0, scale_log2, 0.0, 0.0,
            HEAD_DIM_QK=d, HEAD_DIM_V=d, BLOCK_M=block_m, BLOCK_N=block_n, PAGE_MODE=page_mode,
            num_warps=warps, num_stages=stages)
        if splits > 1:
            # Partials [split, batch, seqlen_q, heads_q, d] and lse [split, batch, heads_q, seqlen_q].
            K.attn_merge[(-(-rows // mcfg[0]) * -(-d // mcfg[1]),)](
                part, part, part, lsep, out, out, out, lsep, lsep, *merge_cu,  # CuSeqlensQ: unread (no FLAG_VARLEN)
                rows * d, seqlen_q * heads_q * d, heads_q * d, d, rows, heads_q * seqlen_q, seqlen_q, 1,
                out.stride(0), out.stride(1), out.stride(2), 0, 0, 0,
                splits, seqlen_q, heads_q, rows, d // 8, FLAG_OUT_BF16,
                BLOCK_M=mcfg[0], BLOCK_N=mcfg[1], BLOCK_P=mcfg[4] if len(mcfg) > 4 else 1,
                num_warps=mcfg[2], num_stages=mcfg[3], **({"launch_pdl": True} if PDL else {}))

    return run, out, splits


def merge_only(cases, merges, d=128):
    """The merge alone: `rows` rows (heads 32, one token) from `partials` fp32 partials with random lse, into
    bf16; checked against torch, then timed by CUDA-graph replay."""
    for rows, partials in cases:
        heads = 32
        batch = max(1, rows // heads)
        part = torch.randn(partials, batch, 1, heads, d, device="cuda")
        lsep = torch.randn(partials, batch, heads, 1, device="cuda") * 3
        lsep[partials // 2] = float("-inf")  # one partial with no keys
        w = torch.softmax(lsep.permute(0, 1, 3, 2), dim=0)[..., None]  # [P, B, 1, H, 1]
        ref = (w * part).sum(0)
        out = torch.empty(batch, 1, heads, d, device="cuda", dtype=torch.bfloat16)
        cells = []
        for mcfg in merges:
            bp = mcfg[4] if len(mcfg) > 4 else 1
            grid = (-(-rows // mcfg[0]) * -(-d // mcfg[1]),)

            def run():
                K.attn_merge[grid](
                    part, part, part, lsep, out, out, out, lsep, lsep,
                    *((lsep,) if "CuSeqlensQ" in K.attn_merge.arg_names else ()),  # CuSeqlensQ: unread
                    batch * heads * d, heads * d, heads * d, d, batch * heads, heads, 1, 1,
                    out.stride(0), out.stride(1), out.stride(2), 0, 0, 0,
                    partials, 1, heads, batch * heads, d // 8, FLAG_OUT_BF16,
                    BLOCK_M=mcfg[0], BLOCK_N=mcfg[1], BLOCK_P=bp, num_warps=mcfg[2], num_stages=mcfg[3])
            out.zero_()
            run()
            err = (out.float() - ref).abs().max().item()
            t = triton.testing.do_bench_cudagraph(run, rep=100)
            cells.append(f"{'x'.join(map(str, mcfg))} {t * 1e3:7.1f} us (err {err:.1e})")
        print(f"  merge {rows} rows x {partials} partials: " + " | ".join(cells), flush=True)


def main():
    global THRESHOLD, ROUNDED, PDL
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="16x128x4x3,16x64x4x3,32x128x4x3,64x64x4x2")
    ap.add_argument("--layouts", default="0,16,256", help="page sizes; 0 = contiguous")
    ap.add_argument("--slots", default="132", help="program slots the split rule fills (132: one per SM), list")
    ap.add_argument("--min-keys", default="128", help="the fewest keys per split, list")
    ap.add_argument("--merges", default="1x32x2x3x32",
                    help="merge configs BLOCK_MxBLOCK_NxwarpsxstagesxBLOCK_P (BLOCK_P optional, 1), list")
    ap.add_argument("--merge-only", default="",
                    help="rows:partials,... : time the merge alone (bf16 out, fp32 partials, d128) and exit")
    ap.add_argument("--rows", default="", help="batch:L:hq:hkv,... instead of the default rows")
    ap.add_argument("--rules", default="0.95r", help="split rules: THRESHOLD, or THRESHOLDr (rounded), list")
    ap.add_argument("--page-order", default="shuffled", choices=["shuffled", "sequential"],
                    help="the pages' order in the cache: a random permutation, or request by request in order")
    ap.add_argument("--rows-per-program", default="0",
                    help="list: rows of a group per program (0: the tile's BLOCK_M); needs a kernel that takes its "
                         "rows from row_chunks")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pdl", action="store_true", help="launch the merge with launch_pdl (kernels that use gdc_*)")
    ap.add_argument("--unspecialize", default="",
                    help="integer arguments of attn_decode the JIT must not specialize (value 1, divisibility by "
                         "16), comma-separated, or 'all': the AOT build has only the catalog's hints")
    args = ap.parse_args()
    PDL = args.pdl
    if args.unspecialize:
        ints = ["batch_size", "seqlen_q", "heads_q", "group_size", "capacity", "page_size", "num_splits",
                "split_keys", "row_chunks", "head_dim_qk8", "head_dim_v8", "window_left", "window_right", "flags",
                "seqlen_new"]
        off = ints if args.unspecialize == "all" else args.unspecialize.split(",")
        K.attn_decode = triton.jit(do_not_specialize=off)(K.attn_decode.fn)
        print(f"attn_decode without the JIT's specialization of {', '.join(off)}", flush=True)
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    layouts = [int(x) for x in args.layouts.split(",")]
    slot_list = [int(x) for x in args.slots.split(",")]
    merges = [tuple(int(x) for x in c.split("x")) for c in args.merges.split(",")]
    min_keys_list = [int(x) for x in args.min_keys.split(",")]
    rows = [tuple(int(x) for x in r.split(":")) for r in args.rows.split(",")] if args.rows else \
        (QUICK_ROWS if args.quick else ROWS)
    print(f"{torch.cuda.get_device_name()}; triton {triton.__version__}; torch {torch.__version__}", flush=True)
    if args.merge_only:
        merge_only([tuple(int(x) for x in c.split(":")) for c in args.merge_only.split(",")], merges)
        return
    for batch, seqlen_k, heads_q, heads_kv in rows:
        torch.manual_seed(0)
        d = 128
        q = torch.randn(batch, 1, heads_q, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, seqlen_k, heads_kv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lens = torch.full((batch,), seqlen_k, dtype=torch.int32, device="cuda")
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 enable_gqa=True).transpose(1, 2).float()
            t_cudnn = triton.testing.do_bench_cudagraph(lambda: F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True), rep=100)
        gb = batch * seqlen_k * heads_kv * d * 2 * 2 / 1e9
        print(f"== batch {batch} L {seqlen_k} heads {heads_q}/{heads_kv}: {gb:.2f} GB of K and V; "
              f"cuDNN {t_cudnn * 1e3:.1f} us ({gb / t_cudnn:.2f} TB/s)", flush=True)
        for page_size in layouts:
            if page_size == 0:
                kc, vc, table = k, v, None
            else:
                pages = batch * seqlen_k // page_size
                order = torch.randperm(pages, device="cuda") if args.page_order == "shuffled" else \
                    torch.arange(pages, device="cuda")
                kc = torch.empty(pages, page_size, heads_kv, d, device="cuda", dtype=torch.bfloat16)
                vc = torch.empty_like(kc)
                kc[order] = k.reshape(pages, page_size, heads_kv, d)
                vc[order] = v.reshape(pages, page_size, heads_kv, d)
                table = order.to(torch.int32).view(batch, seqlen_k // page_size).contiguous()
            cells = []
            for cfg in configs:
                rpp_list = [int(x) for x in args.rows_per_program.split(",")]
                for slots, mcfg, min_keys, rule, rpp in itertools.product(slot_list, merges, min_keys_list,
                                                                           args.rules.split(","), rpp_list):
                    THRESHOLD, ROUNDED = float(rule.rstrip("r")), rule.endswith("r")
                    name = "x".join(map(str, cfg)) + (f"@{slots}" if len(slot_list) > 1 else "") + \
                        ("+m" + "x".join(map(str, mcfg)) if len(merges) > 1 else "") + \
                        (f" k{min_keys}" if len(min_keys_list) > 1 else "") + \
                        (f" e{rule}" if "," in args.rules else "") + \
                        (f" r{rpp}" if len(rpp_list) > 1 else "")
                    try:
                        run, out, splits = launcher(q, kc, vc, table, lens, page_size or seqlen_k, seqlen_k, cfg,
                                                    slots, mcfg, min_keys, rpp)
                        if splits == 1 and mcfg != merges[0]:
                            continue  # no merge: the same as the first merge config
                        run()
                        err = (out.float() - ref).abs().max().item()
                        if not err < 2e-2:
                            cells.append(f"{name}: err {err:.2e}")
                            continue
                        t = triton.testing.do_bench_cudagraph(run, rep=100)
                        cells.append(f"{name}/s{splits} {t * 1e3:6.1f} us {gb / t:4.2f} TB/s")
                    except Exception as e:  # noqa: BLE001: a config that does not compile or fit is reported
                        cells.append(f"{name}: {type(e).__name__} {str(e)[:60]}")
            print(f"  page {page_size:>3}: " + "\n            ".join(" | ".join(cells[i:i + 4])
                                                          for i in range(0, len(cells), 4)), flush=True)
            del kc, vc
        del k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

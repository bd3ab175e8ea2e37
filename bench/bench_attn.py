"""Benchmark of aotk's attention kernels against torch SDPA's backends, on the GPU machine.

    python3 bench/bench_attn.py --lib path/to/libaotk.so --out-dir bench/results [--quick] [--features]
    python3 bench/bench_attn.py --lib path/to/libaotk.so --selection   # only the selection rows
    python3 bench/bench_attn.py --self-check          # any machine: no GPU, torch optional

Calls libaotk.so through ctypes and times it beside torch SDPA's flash, cuDNN and memory-efficient
backends on the same inputs, in one process, on the grid of /work/shared/notes/anchors.md: bf16, head_dim
64 and 128, seqlen 512 ... 16384, batch = 16384 / seqlen, heads = 2048 / head_dim, causal and not. Each row's aotk output (and lse) is checked against SDPA
before anything is timed. Prints a table and writes <out-dir>/<gpu>-<date>.json (see bench/README.md).

Ops: "fwd" (aotk_attn_fwd against SDPA's flash, cuDNN and efficient forwards) and "bwd" (aotk_attn_bwd
against the flash and cuDNN backwards, each timed alone after its own forward); the OPS registry holds them.
"sel_fwd" and "sel_bwd" (--selection runs only these; also in OPS): selection attention (aotk_sel_fwd,
aotk_sel_bwd) on one sequence of 8k ... 64k tokens, heads 64/4, d 128, block 64, 16 slots of random causal
blocks, against the flash and cuDNN backends doing dense causal attention on the same q, k, v, with the
issue's bars (64k: forward >= 7.6x, backward >= 16x FlashAttention-2; 16k: faster), after checks against
float32 references (every token of a 4096-token problem, and sampled tokens of the row itself).
"fwd_gqa" and "bwd_gqa" (issue 11): GQA, 32 query heads over 8 kv heads, d 128, causal, seqlen 8192, batch 2,
against SDPA's flash and cuDNN backends (enable_gqa=True) and FlexAttention. "fwd_varlen" and "bwd_varlen"
(issue 11): 16 documents of 512 (and of 1024) tokens packed with cu_seqlens, d 128 / 64, causal and not: aotk's
varlen kernel against aotk's plain kernel on the same memory as a dense batch of 16 (the 0.8x bar), SDPA on
that batch and FlexAttention with a document mask (to beat). FlexAttention (torch.compile'd, one compile per
shape) is a column on these rows, and on the fwd/bwd grid with --flex.
"fwd_feat" and "bwd_feat" (--features runs only these): issue 4's features (causal alignments, windows,
varlen, softcap, ALiBi, sinks, dropout, head dims 32 ... 256 and 192/128), each counted by the score
pairs it really computes and compared with the plain kernel of its head dim in the same run (the 0.90
bar), after a check against a float32 torch reference with explicit masks.
Importable without a GPU (and without torch): all work happens in main().

This file is the command line; the rows are built in the package beside it, bench/aotk_bench/: common.py
(include/aotk.h through ctypes, timing, what the ops share), grid.py (fwd, bwd), gqa.py, varlen_docs.py,
flex.py (the FlexAttention column), selection.py, features.py, op_registry.py (OPS), report.py (tables,
JSON) and self_check.py.
"""
import argparse
import datetime
import os
import random
import sys

from aotk_bench.common import (DTYPE_NAMES, GRID_DTYPES, HEAD_DIMS, IMPLS, SDPA_BACKENDS, TORCH_IMPORT_ERROR, Aotk,
                               AotkError, case_label, note, torch, triton)
from aotk_bench.features import FEATURE_GRID_SEQLENS, FEATURE_GRID_SEQLENS_QUICK, FEATURE_HEAD_DIMS, run_feature_op
from aotk_bench.selection import NSA_OPTIONS, SEL_INDEX_DISTRIBUTIONS, SEL_OPS, SEL_OPTIONS, load_public_nsa
from aotk_bench.flex import FLEX_OPTIONS
from aotk_bench.varlen_docs import DOC_HEAD_DIMS, DOC_LENS
from aotk_bench.op_registry import ALL_OPS, OPS
from aotk_bench.report import (geomean, gpu_slug, print_feature_table, print_table, ratios, table_head, table_line,
                               write_results)
from aotk_bench.self_check import self_check


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", help="path to libaotk.so (required except with --self-check)")
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                    help="where <gpu>-<date>.json goes (default bench/results)")
    ap.add_argument("--head-dims", default=",".join(str(d) for d in HEAD_DIMS),
                    help="head dims of the fwd and bwd grid rows (default: %(default)s)")
    ap.add_argument("--dtypes", default=",".join(GRID_DTYPES),
                    help="dtypes of the fwd and bwd grid rows, of bf16, fp16 (default: %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="grid: only seqlen 1024 and 4096; features: only grid seqlen 4096; selection: only 8k "
                         "and 16k tokens (smoke test)")
    ap.add_argument("--ops", default=",".join(ALL_OPS), help=f"comma-separated ops to run, of: {', '.join(ALL_OPS)}")
    ap.add_argument("--features", action="store_true", help="run only the feature rows (--ops fwd_feat,bwd_feat)")
    ap.add_argument("--selection", action="store_true",
                    help="run only the selection-attention rows (--ops sel_fwd,sel_bwd)")
    ap.add_argument("--feature-head-dims", default=",".join(str(d) for d in FEATURE_HEAD_DIMS),
                    help="head dims the feature rows run at (default %(default)s; the plain rows of every head "
                         "dim run regardless)")
    ap.add_argument("--flex", action="store_true",
                    help="grid rows (fwd, bwd): also time FlexAttention (torch.compile'd, one compile per shape and "
                         "mask: minutes over the whole grid); the GQA and varlen rows time it regardless")
    ap.add_argument("--varlen-doc-lens", default=",".join(str(n) for n in DOC_LENS),
                    help="document lengths of the varlen rows (fwd_varlen, bwd_varlen), 16 documents each "
                         "(default: %(default)s)")
    ap.add_argument("--varlen-head-dims", default=",".join(str(d) for d in DOC_HEAD_DIMS),
                    help="head dims of the varlen rows, heads = 2048 / head dim (default: %(default)s)")
    ap.add_argument("--sel-distributions", default=",".join(SEL_INDEX_DISTRIBUTIONS),
                    help="index distributions of the selection rows (sel_fwd, sel_bwd), of: "
                         + ", ".join(SEL_INDEX_DISTRIBUTIONS) + " (default: all)")
    ap.add_argument("--nsa-path", default=None,
                    help="selection rows: a checkout of XunhaoLai/native-sparse-attention-triton (in a folder git "
                         "ignores); its topk_sparse_attention is checked against aotk and timed on the same inputs, "
                         "and aotk's rows record the ratio (issue 12's anchor)")
    ap.add_argument("--no-flex", action="store_true",
                    help="GQA and varlen rows: leave FlexAttention out (no torch.compile in the run)")
    ap.add_argument("--self-check", action="store_true",
                    help="no GPU, no torch: check the pair counts, the feature rows and the ctypes layout, then exit")
    args = ap.parse_args(argv)

    if args.self_check:
        return self_check()
    if args.flex and args.no_flex:
        ap.error("--flex and --no-flex contradict each other")
    FLEX_OPTIONS["grid"] = args.flex
    FLEX_OPTIONS["rows"] = not args.no_flex
    if args.flex and "flex" not in IMPLS:
        IMPLS.append("flex")
    if args.features and args.selection:
        ap.error("--features and --selection each choose the ops: give one, or --ops fwd_feat,bwd_feat,sel_fwd,sel_bwd")
    if args.features:
        ops = ["fwd_feat", "bwd_feat"]
    elif args.selection:
        ops = list(SEL_OPS)
    else:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in ALL_OPS:
            ap.error(f"unknown op {o!r}; known: {', '.join(ALL_OPS)}")
    try:
        feature_head_dims = [int(x) for x in args.feature_head_dims.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--feature-head-dims {args.feature_head_dims!r}: give comma-separated integers")
    GRID_DTYPES[:] = [x.strip() for x in args.dtypes.split(",") if x.strip()]
    if not GRID_DTYPES or any(x not in ("bf16", "fp16") for x in GRID_DTYPES):
        ap.error(f"--dtypes {args.dtypes!r}: give bf16, fp16 or both")
    try:
        HEAD_DIMS[:] = [int(x) for x in args.head_dims.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--head-dims {args.head_dims!r}: give comma-separated integers")
    for name, target in (("varlen_doc_lens", DOC_LENS), ("varlen_head_dims", DOC_HEAD_DIMS)):
        try:
            target[:] = [int(x) for x in getattr(args, name).split(",") if x.strip()]
        except ValueError:
            target[:] = []
        if not target or min(target) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)!r}: give comma-separated positive integers")
    SEL_OPTIONS["distributions"] = [x.strip() for x in args.sel_distributions.split(",") if x.strip()]
    if not SEL_OPTIONS["distributions"] or any(x not in SEL_INDEX_DISTRIBUTIONS for x in SEL_OPTIONS["distributions"]):
        ap.error(f"--sel-distributions {args.sel_distributions!r}: give some of {', '.join(SEL_INDEX_DISTRIBUTIONS)}")
    if args.lib is None:
        ap.error("--lib is required (except with --self-check)")
    if torch is None:
        sys.exit(f"bench_attn.py needs torch and triton ({TORCH_IMPORT_ERROR}); --self-check runs without them")
    if not torch.cuda.is_available():
        sys.exit("bench_attn.py needs a CUDA GPU (torch.cuda.is_available() is False)")

    if args.nsa_path is not None:
        try:
            NSA_OPTIONS["path"], NSA_OPTIONS["fn"] = args.nsa_path, load_public_nsa(args.nsa_path)
        except Exception as e:  # noqa: BLE001
            sys.exit(f"--nsa-path {args.nsa_path!r}: cannot load topk_sparse_attention: {type(e).__name__}: {e}")
    aotk = Aotk(args.lib)
    try:
        aotk_triton = aotk.build_info()["triton_version"]
    except (AotkError, AttributeError) as e:
        note(f"no build info: {e}")
        aotk_triton = None
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    print(f"gpu {gpu}, torch {torch.__version__}, triton {triton.__version__}, "
          f"aotk {aotk.version()} (kernels compiled by triton {aotk_triton})", flush=True)

    torch.manual_seed(0)
    random.seed(0)
    rows, lines, failures = [], [], []
    feature_lines, bar_lines = [], []
    op_tables = {}  # an op's "print" -> (its table lines, its bar lines), in the order the ops ran
    # Geomeans per grid op and dtype (a run of several reports each apart, never one mixed figure).
    r_flash_all, r_best_all, r_det_all = {}, {}, {}
    # Issue 11's bar range: head dims 64 and 128 from 1024 rows on (geomean and lowest row).
    r_bar = {}
    for op in ops:
        if op in ("fwd_feat", "bwd_feat"):
            seqlens = FEATURE_GRID_SEQLENS_QUICK if args.quick else FEATURE_GRID_SEQLENS
            f_rows, f_lines, f_failures, f_bar = run_feature_op(op, seqlens, feature_head_dims, aotk)
            rows += f_rows
            feature_lines += f_lines
            failures += f_failures
            bar_lines += f_bar
            continue
        spec = OPS[op]
        if "run_op" in spec:
            o_rows, o_lines, o_failures, o_bar = spec["run_op"](op, args.quick, aotk)
            rows += o_rows
            table_lines, table_bars = op_tables.setdefault(spec["print"], ([], []))
            table_lines += o_lines
            failures += o_failures
            table_bars += o_bar
            continue
        for case in spec["cases"](args.quick):
            print(f"\n{case_label(case)}", flush=True)
            ms, failure = spec["run"](case, aotk)
            torch.cuda.empty_cache()
            flops = spec["flops"](case)
            tfl = {}
            for impl in IMPLS:
                if impl not in ms:
                    continue
                tfl[impl] = flops / ms[impl] / 1e9
                rows.append({
                    "op": case["op"], "impl": impl, "dtype": DTYPE_NAMES[case["dtype"]],
                    "head_dim": case["head_dim"], "causal": bool(case["causal"]),
                    **({"head_dim_v": case["head_dim_v"]} if case.get("head_dim_v", case["head_dim"]) != case["head_dim"]
                       else {}),
                    "seqlen_q": case["seqlen_q"], "seqlen_k": case["seqlen_k"], "batch": case["batch"],
                    "heads_q": case["heads_q"], "heads_kv": case["heads_kv"],
                    "ms": ms[impl], "tflops": round(tfl[impl], 2),
                })
            if failure:
                failures.append(f"{case_label(case)}: {failure}")
            r_flash, r_best = ratios(tfl)
            if r_flash:
                r_flash_all.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(r_flash)
            if r_best:
                r_best_all.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(r_best)
                if case["head_dim"] in (64, 128) and case["seqlen_q"] >= 1024:
                    r_bar.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(r_best)
            sdpa = [tfl[name] for name, _ in SDPA_BACKENDS if name in tfl]
            if "aotk-det" in tfl and sdpa:
                r_det_all.setdefault((case["op"], DTYPE_NAMES[case["dtype"]]), []).append(tfl["aotk-det"] / max(sdpa))
            line = table_line(case, tfl, failure)
            lines.append(line)
            print(table_head())
            print(line, flush=True)

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"{gpu_slug(gpu)}-{date}.json")
    doc = {"gpu": gpu, "date": date, "triton": triton.__version__, "aotk_triton": aotk_triton,
           "torch": torch.__version__, "rows": rows}
    total_rows = write_results(path, doc, set(ops))

    summary = []
    for (op, dt), xs in r_flash_all.items():
        summary.append(f"{op} {dt}: geomean aotk/sdpa-flash {geomean(xs):.2f}x over {len(xs)} rows")
    for (op, dt), xs in r_best_all.items():
        summary.append(f"{op} {dt}: geomean aotk/best-sdpa  {geomean(xs):.2f}x over {len(xs)} rows")
    for (op, dt), xs in r_bar.items():
        summary.append(f"{op} {dt}: d64/d128 from 1024 rows (issue 11's bar range): aotk/best-sdpa geomean "
                       f"{geomean(xs):.3f}x, lowest {min(xs):.3f}x over {len(xs)} rows")
    for (op, dt), xs in r_det_all.items():
        summary.append(f"{op} {dt}: geomean aotk-det/best-sdpa {geomean(xs):.2f}x over {len(xs)} rows "
                       "(the deterministic backward)")
    summary.append(f"wrote {path} ({len(rows)} rows from this run, {total_rows} in the file)")
    if failures:
        summary.append(f"{len(failures)} FAILED row(s):")
        summary.extend(f"  {f_}" for f_ in failures)
    if lines:
        print_table(lines, [])
    if feature_lines:
        print_feature_table(feature_lines, bar_lines)
    for print_op_table, (table_lines, table_bars) in op_tables.items():
        if table_lines:
            print_op_table(table_lines, table_bars)
    for line in summary:
        print(line)
    sys.stdout.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
